// Which series may be registered: the refusal reasons (one X-macro list, each with its text) and the
// checks behind them, applied by the writer at registration and by every reader again.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string_view>

#include "rankstat/shmproto/label_lists.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/text_rules.hpp"

namespace rankstat::shm {

// Why a series cannot be registered as given, decided here once: the writer refuses such a series
// (RegisterStatus::kInvalid) and keeps the reason (CumulativeWriter::last_refusal), which the C ABI turns
// into its message; readers, which trust nothing they read, apply the label part again (labels_allowed).
// X(enumerator, text): the text of a label's reason follows "label '<name>' ".
// clang-format off
#define RANKSTAT_SERIES_REFUSALS(X)                                                                     \
  X(kNone, "")                                                                                          \
  X(kFamilyName, "the family name must be non-empty UTF-8 text without NUL")                            \
  X(kKind, "the kind is not a series kind")                                                             \
  X(kGaugeMode, "the gauge mode is not a multiprocess mode")                                            \
  X(kBoundsWithoutHistogram, "only histograms have bucket bounds")                                      \
  X(kLabelName, "is not a valid label name (non-empty UTF-8 text without NUL, not starting with __)")   \
  X(kLabelLe, "is reserved for histogram buckets")                                                      \
  X(kLabelQuantile, "is reserved for summaries")                                                        \
  X(kLabelTwice, "is given twice")                                                                      \
  X(kLabelValue, "has a value that is not valid UTF-8")                                                 \
  X(kHelp, "the help text is not valid UTF-8")                                                          \
  X(kTooManyBounds, "more bucket bounds than a histogram may have")                                     \
  X(kBoundsOrder, "bucket bounds must be finite and strictly increasing")
// clang-format on

RANKSTAT_DEFINE_ENUM_WITH_TEXTS(SeriesRefusal, kSeriesRefusalTexts, RANKSTAT_SERIES_REFUSALS)

inline constexpr std::string_view series_refusal_text(SeriesRefusal refusal) {
  const auto index = static_cast<std::size_t>(refusal);
  return index < std::size(kSeriesRefusalTexts) ? kSeriesRefusalTexts[index] : std::string_view("unknown");
}

// Whether `refusal` is about one label (SeriesCheck::label names it).
inline constexpr bool is_label_refusal(SeriesRefusal refusal) {
  return refusal >= SeriesRefusal::kLabelName && refusal <= SeriesRefusal::kLabelValue;
}

// The first reason found, and for a label's reason the position of that label.
struct SeriesCheck {
  SeriesRefusal refusal = SeriesRefusal::kNone;
  std::size_t label = 0;
  explicit operator bool() const { return refusal != SeriesRefusal::kNone; }
};

// What a series of `kind` may carry as its own labels: valid names, each once, none the exposition
// reserves for the kind (`le` on histograms, `quantile` on summaries), values in UTF-8.
inline SeriesCheck check_series_labels(SeriesKind kind, const LabelPairs& labels) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto& [name, value] = labels[i];
    const auto refused = [i](SeriesRefusal refusal) { return SeriesCheck{refusal, i}; };
    if (!is_valid_label_name(name)) return refused(SeriesRefusal::kLabelName);
    if (kind == SeriesKind::kHistogram && name == "le") return refused(SeriesRefusal::kLabelLe);
    if (kind == SeriesKind::kSummary && name == "quantile") return refused(SeriesRefusal::kLabelQuantile);
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[j].first == name) return refused(SeriesRefusal::kLabelTwice);
    }
    if (!is_valid_utf8(value)) return refused(SeriesRefusal::kLabelValue);
  }
  return {};
}

// Checked by the writer at registration and again by every reader, which trusts nothing it reads.
inline bool labels_allowed(SeriesKind kind, const LabelPairs& labels) {
  return !check_series_labels(kind, labels);
}

// Everything register_series checks before it looks at capacity. `bounds` are a histogram's finite
// upper bounds, strictly increasing (the +Inf bucket is implicit).
inline SeriesCheck check_series(SeriesKind kind, GaugeMode mode, std::string_view family,
                                const LabelPairs& labels, std::span<const double> bounds,
                                std::string_view help) {
  if (!is_valid_metric_name(family)) return {SeriesRefusal::kFamilyName};
  if (static_cast<std::uint8_t>(kind) < 1 || static_cast<std::uint8_t>(kind) > kSeriesKindMax)
    return {SeriesRefusal::kKind};
  if (static_cast<std::uint8_t>(mode) >= kGaugeModeCount) return {SeriesRefusal::kGaugeMode};
  if (kind != SeriesKind::kHistogram && !bounds.empty()) return {SeriesRefusal::kBoundsWithoutHistogram};
  if (const SeriesCheck label = check_series_labels(kind, labels)) return label;
  if (!is_valid_utf8(help)) return {SeriesRefusal::kHelp};
  if (bounds.size() > kMaxHistogramBuckets) return {SeriesRefusal::kTooManyBounds};
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
      return {SeriesRefusal::kBoundsOrder};
  }
  return {};
}

}  // namespace rankstat::shm
