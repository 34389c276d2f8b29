// The C ABI's series registration: the label arrays and series specs bindings pass, read into a
// Reporter registration, and a refused registration's message naming the culprit.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "c_api_internal.hpp"
#include "rankstat/shmproto/error_text.hpp"
#include "rankstat/shmproto/series_rules.hpp"

using rankstat::Status;
using namespace rankstat::c_api;  // NOLINT(google-build-using-namespace): this file is the C ABI's glue

namespace rankstat::c_api {

bool read_labels(std::uint32_t count, const char* const* names, const char* const* values,
                 rankstat::shm::LabelPairs& out) {
  if (count == 0) return true;
  if (names == nullptr || values == nullptr) return false;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    if (names[i] == nullptr || values[i] == nullptr) return false;
    out.emplace_back(names[i], values[i]);
  }
  return true;
}

}  // namespace rankstat::c_api

namespace {

// A series spec before the text lengths were appended (layout 2), and with them.
constexpr std::uint32_t kSeriesSpecV1Bytes = offsetof(rankstat_series_spec, family_length);
constexpr std::uint32_t kSeriesSpecLengthsBytes = sizeof(rankstat_series_spec);

// Labels whose texts are given by length (RANKSTAT_SERIES_TEXT_LENGTHS): NUL bytes included.
bool read_sized_labels(std::uint32_t count, const char* const* names, const char* const* values,
                       const size_t* name_lengths, const size_t* value_lengths,
                       rankstat::shm::LabelPairs& out) {
  if (count == 0) return true;
  if (names == nullptr || values == nullptr || name_lengths == nullptr || value_lengths == nullptr)
    return false;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    if ((names[i] == nullptr && name_lengths[i] != 0) || (values[i] == nullptr && value_lengths[i] != 0))
      return false;
    out.emplace_back(names[i] != nullptr ? std::string(names[i], name_lengths[i]) : std::string(),
                     values[i] != nullptr ? std::string(values[i], value_lengths[i]) : std::string());
  }
  return true;
}

// The reason shm::check_series found for refusing a series (the registration's
// Reporter::last_refusal), as text naming the label at fault; empty when none was recorded. The
// reasons and their texts are shmproto's (RANKSTAT_SERIES_REFUSALS); this only adds the culprit.
std::string refusal_text(const rankstat::shm::SeriesCheck& check, const rankstat::shm::LabelPairs& labels) {
  namespace shm = rankstat::shm;
  if (!check) return {};
  std::string text(shm::series_refusal_text(check.refusal));
  if (shm::is_label_refusal(check.refusal) && check.label < labels.size()) {
    return "label " + shm::quoted_for_message(labels[check.label].first) + " " + text;
  }
  if (check.refusal == shm::SeriesRefusal::kTooManyBounds) {
    return text + " (" + std::to_string(shm::kMaxHistogramBuckets) + ")";
  }
  return text;
}

int registration_failed(const rankstat_reporter& reporter, const rankstat::shm::LabelPairs& labels,
                        Status status, const char* kind, std::string_view family) {
  if (status == Status::kClosed) return fail(status);
  std::string message = std::string("cannot register ") + kind + " '" + std::string(family) + "': ";
  if (status == Status::kRegistryFull) {
    message += "the cumulative block is full (series, bucket bounds, value words or text bytes)";
  } else if (status == Status::kNoSpace) {
    message +=
        "the shm directory has no room for its pages (the segment grows as series are registered; free "
        "space or enlarge the shm directory, a later registration is tried again)";
  } else if (status == Status::kIo) {
    message += "out of memory or I/O error while reserving its pages";
  } else if (const std::string why = refusal_text(reporter.reporter.last_refusal(), labels); !why.empty()) {
    message += why;
  } else {
    message += "invalid family name, labels, bucket bounds or mode";
  }
  return fail_with(status, message);
}

}  // namespace

extern "C" {

int rankstat_register_counter(rankstat_reporter* reporter, const char* family, uint32_t label_count,
                              const char* const* label_names, const char* const* label_values,
                              uint32_t* out_id) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (family == nullptr || out_id == nullptr) {
      return fail(Status::kInvalidArgument, "rankstat_register_counter: family and out_id must not be NULL");
    }
    rankstat::shm::LabelPairs labels;
    if (!read_labels(label_count, label_names, label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    const Status status = reporter->reporter.register_counter(family, labels, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "counter", family);
  } catch (...) {
    return internal_error();
  }
}

int rankstat_register_gauge(rankstat_reporter* reporter, const char* family, uint32_t mode,
                            uint32_t label_count, const char* const* label_names,
                            const char* const* label_values, uint32_t* out_id) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (family == nullptr || out_id == nullptr) {
      return fail(Status::kInvalidArgument, "rankstat_register_gauge: family and out_id must not be NULL");
    }
    // Checked here: the conversion to the 8-bit GaugeMode below would otherwise wrap a bad value.
    if (mode >= rankstat::shm::kGaugeModeCount) {
      return fail(Status::kInvalidArgument, "rankstat_register_gauge: mode must be a RANKSTAT_MODE_* value");
    }
    rankstat::shm::LabelPairs labels;
    if (!read_labels(label_count, label_names, label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    const Status status = reporter->reporter.register_gauge(
        family, static_cast<rankstat::shm::GaugeMode>(static_cast<std::uint8_t>(mode)), labels, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "gauge", family);
  } catch (...) {
    return internal_error();
  }
}

int rankstat_register_histogram(rankstat_reporter* reporter, const char* family, uint32_t label_count,
                                const char* const* label_names, const char* const* label_values,
                                const double* bounds, uint32_t bound_count, uint32_t* out_id) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (family == nullptr || out_id == nullptr || (bound_count != 0 && bounds == nullptr)) {
      return fail(
          Status::kInvalidArgument,
          "rankstat_register_histogram: family, out_id and bounds (when bound_count > 0) must not be NULL");
    }
    rankstat::shm::LabelPairs labels;
    if (!read_labels(label_count, label_names, label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    const std::span<const double> bound_span(bounds, bound_count);
    const Status status = reporter->reporter.register_histogram(family, labels, bound_span, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "histogram", family);
  } catch (...) {
    return internal_error();
  }
}

int rankstat_register_series(rankstat_reporter* reporter, const rankstat_series_spec* spec,
                             uint32_t* out_id) {
  namespace shm = rankstat::shm;
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (spec == nullptr || out_id == nullptr || spec->family == nullptr ||
        spec->struct_size < kSeriesSpecV1Bytes || (spec->bound_count != 0 && spec->bounds == nullptr)) {
      return fail(
          Status::kInvalidArgument,
          "rankstat_register_series: spec (with struct_size set), its family, out_id and bounds (when "
          "bound_count > 0) must not be NULL");
    }
    const bool lengths = (spec->flags & RANKSTAT_SERIES_TEXT_LENGTHS) != 0;
    if (lengths && spec->struct_size < kSeriesSpecLengthsBytes) {
      return fail_with(Status::kInvalidArgument,
                       "rankstat_register_series: RANKSTAT_SERIES_TEXT_LENGTHS needs a struct_size of " +
                           std::to_string(kSeriesSpecLengthsBytes) + ", got " +
                           std::to_string(spec->struct_size));
    }
    if (spec->kind < RANKSTAT_KIND_COUNTER || spec->kind > RANKSTAT_KIND_SUMMARY) {
      return fail(Status::kInvalidArgument, "rankstat_register_series: kind must be a RANKSTAT_KIND_* value");
    }
    if (spec->kind == RANKSTAT_KIND_GAUGE && spec->mode >= shm::kGaugeModeCount) {
      return fail(Status::kInvalidArgument, "rankstat_register_series: mode must be a RANKSTAT_MODE_* value");
    }
    if (spec->kind != RANKSTAT_KIND_HISTOGRAM && spec->bound_count != 0) {
      return fail(Status::kInvalidArgument, "rankstat_register_series: only histograms have bucket bounds");
    }
    shm::LabelPairs labels;
    std::string_view family = spec->family;
    std::string_view help = spec->help != nullptr ? std::string_view(spec->help) : std::string_view();
    if (lengths) {
      if ((spec->help == nullptr && spec->help_length != 0) ||
          !read_sized_labels(spec->label_count, spec->label_names, spec->label_values,
                             spec->label_name_lengths, spec->label_value_lengths, labels)) {
        return fail(Status::kInvalidArgument, "label names, values, their lengths or help are NULL");
      }
      family = std::string_view(spec->family, spec->family_length);
      help = spec->help != nullptr ? std::string_view(spec->help, spec->help_length) : std::string_view();
    } else if (!read_labels(spec->label_count, spec->label_names, spec->label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    rankstat::Reporter::SeriesSpec s;
    s.kind = static_cast<shm::SeriesKind>(static_cast<std::uint8_t>(spec->kind));
    s.mode = static_cast<shm::GaugeMode>(
        static_cast<std::uint8_t>(spec->kind == RANKSTAT_KIND_GAUGE ? spec->mode : 0));
    s.flags = spec->flags & RANKSTAT_SERIES_OWN_LABELS_ONLY;
    s.family = family;
    s.help = help;
    s.labels = &labels;
    s.bounds = std::span<const double>(spec->bounds, spec->bound_count);
    const Status status = reporter->reporter.register_series(s, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "series", family);
  } catch (...) {
    return internal_error();
  }
}

}  // extern "C"
