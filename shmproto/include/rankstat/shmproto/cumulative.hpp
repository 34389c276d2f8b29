// The cumulative block: counters, histograms and standalone gauges as running state.
//
// Protocol (docs/shm-layout.md, "Cumulative block"):
//   registration (writer): fill descriptor i and its bounds  ->  series_count.store(i + 1, release)
//   reader:                n = series_count.load(acquire)    ->  descriptors [0, n) are immutable
//   counter:   value word stored relaxed by the single writer; a reader sees some recent total.
//   gauge, histogram: a per-series sequence word; writer seq+1 (relaxed), words (release), seq+2
//              (release); reader seq (acquire), words (acquire), seq again (relaxed), retries while
//              odd or changed (bounded). A reader that sees any word of update N is thereby ordered
//              after that update's seq+1, so its second seq load cannot return the value it started
//              with. No standalone fences: ThreadSanitizer cannot model them (GCC 12 rejects them
//              under -fsanitize=thread), and release stores / acquire loads are plain moves on x86.
// Everything that must survive a dropped ring record or a daemon restart lives here.
#pragma once

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/ring.hpp"

namespace rankstat::shm {

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): what Prometheus accepts in a
// label value or a HELP text. A series with anything else is refused, never exported half-valid.
inline bool is_valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int extra = 0;
    std::uint32_t code = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      code = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      code = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      code = c & 0x07u;
    } else {
      return false;
    }
    if (end - p <= extra) return false;
    for (int i = 1; i <= extra; ++i) {
      if ((p[i] & 0xC0u) != 0x80u) return false;
      code = (code << 6) | (p[i] & 0x3Fu);
    }
    if ((extra == 2 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) ||
        (extra == 3 && (code < 0x10000 || code > 0x10FFFF))) {
      return false;
    }
    p += extra + 1;
  }
  return true;
}

// The classic names, which every Prometheus version and scraper reads unquoted: metric names
// [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*. rankstatd writes other names escaped or
// quoted as the scrape negotiated (daemon/src/text_exposition.hpp); a few operator-set names (constant
// labels, --label.instance) must be classic.
inline bool is_classic_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

inline bool is_classic_label_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

// The names a series may have, as prometheus_client (0.22 and later) accepts them by default: any
// non-empty strict UTF-8 text (`my.metric`, `http.method`); label names starting with "__" stay
// reserved. One refusal of rankstat's own: no NUL character, which the text format cannot escape (and the
// header's extra labels are NUL-delimited). Any length: the text area is the only bound. Checked by the
// writer at registration and again by every reader of shared memory and of the retired-totals state.
inline bool is_valid_metric_name(std::string_view name) {
  return !name.empty() && name.find('\0') == std::string_view::npos && is_valid_utf8(name);
}

inline bool is_valid_label_name(std::string_view name) {
  return is_valid_metric_name(name) && !name.starts_with("__");
}

// How many bytes the UTF-8 sequence that starts with `lead` takes (0: `lead` cannot start one). Whether the
// sequence is whole and well-formed is is_valid_utf8's to say.
constexpr std::size_t utf8_sequence_length(unsigned char lead) {
  return lead < 0x80                    ? 1
         : lead >= 0xC2 && lead <= 0xDF ? 2
         : lead >= 0xE0 && lead <= 0xEF ? 3
         : lead >= 0xF0 && lead <= 0xF4 ? 4
                                        : 0;
}

// `text` with each byte that is not part of a strict UTF-8 sequence replaced by U+FFFD: header strings
// are a writer's bytes, and a JSON document or a log line built from them must stay valid.
inline std::string replace_invalid_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t length = utf8_sequence_length(static_cast<unsigned char>(text[i]));
    if (length != 0 && i + length <= text.size() && is_valid_utf8(text.substr(i, length))) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER, one per invalid byte
      ++i;
    }
  }
  return out;
}

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

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

// A series' label list in the text area (layout.hpp, SeriesDescriptor): per label a u32 name length,
// the name, a u32 value length, the value. Values may hold any byte, NUL included.
inline std::uint64_t encoded_series_label_bytes(const LabelPairs& labels) {
  std::uint64_t bytes = 0;
  for (const auto& [name, value] : labels) bytes += 4 + name.size() + 4 + value.size();
  return bytes;
}

// Writes the list encoded_series_label_bytes(labels) long into `out`; every text is shorter than 4 GiB
// (the caller checked the list fits the text area).
inline void encode_series_labels(const LabelPairs& labels, char* out) {
  std::size_t at = 0;
  auto put = [&](std::string_view text) {
    const auto length = static_cast<std::uint32_t>(text.size());
    std::memcpy(out + at, &length, 4);
    if (!text.empty()) std::memcpy(out + at + 4, text.data(), text.size());
    at += 4 + text.size();
  };
  for (const auto& [name, value] : labels) {
    put(name);
    put(value);
  }
}

// Decodes a series' label list of exactly `size` bytes; nullopt unless every length stays inside it and
// every name is valid (the bytes come from shared memory: untrusted).
inline std::optional<LabelPairs> decode_series_labels(const char* bytes, std::size_t size) {
  LabelPairs labels;
  std::size_t at = 0;
  auto take = [&](std::string& text) {
    std::uint32_t length = 0;
    if (size - at < 4) return false;
    std::memcpy(&length, bytes + at, 4);
    at += 4;
    if (length > size - at) return false;
    text.assign(bytes + at, length);
    at += length;
    return true;
  };
  while (at < size) {
    std::string name;
    std::string value;
    if (!take(name) || !take(value) || !is_valid_label_name(name)) return std::nullopt;
    labels.emplace_back(std::move(name), std::move(value));
  }
  return labels;
}

// The segment header's extra labels: "name\0value\0...\0" in a fixed field (identity labels, which
// never hold a NUL). Their names are classic and not `__`-prefixed (an operator's setting on every series,
// like the daemon's constant labels: segment.hpp identity_label_problem), and a reader holds a header to
// the same rule. Encodes into `out` (capacity bytes).
inline bool is_extra_label_name(std::string_view name) {
  return is_classic_label_name(name) && !name.starts_with("__");
}

inline bool encode_label_pairs(const LabelPairs& labels, char* out, std::size_t capacity) {
  std::size_t used = 0;
  for (const auto& [name, value] : labels) {
    if (!is_extra_label_name(name) || value.find('\0') != std::string::npos) return false;
    const std::size_t need = name.size() + 1 + value.size() + 1;
    if (used + need + 1 > capacity) return false;
    std::memcpy(out + used, name.data(), name.size());
    used += name.size();
    out[used++] = '\0';
    std::memcpy(out + used, value.data(), value.size());
    used += value.size();
    out[used++] = '\0';
  }
  if (used + 1 > capacity) return false;
  out[used] = '\0';
  return true;
}

// Decodes what encode_label_pairs wrote; nullopt if the bytes are not a well-formed list (untrusted).
inline std::optional<LabelPairs> decode_label_pairs(const char* bytes, std::size_t capacity) {
  LabelPairs labels;
  std::size_t pos = 0;
  while (pos < capacity && bytes[pos] != '\0') {
    const void* name_end = std::memchr(bytes + pos, '\0', capacity - pos);
    if (name_end == nullptr) return std::nullopt;
    const auto name_len = static_cast<std::size_t>(static_cast<const char*>(name_end) - (bytes + pos));
    std::string name(bytes + pos, name_len);
    pos += name_len + 1;
    if (pos >= capacity) return std::nullopt;
    const void* value_end = std::memchr(bytes + pos, '\0', capacity - pos);
    if (value_end == nullptr) return std::nullopt;
    const auto value_len = static_cast<std::size_t>(static_cast<const char*>(value_end) - (bytes + pos));
    std::string value(bytes + pos, value_len);
    pos += value_len + 1;
    if (!is_extra_label_name(name)) return std::nullopt;
    labels.emplace_back(std::move(name), std::move(value));
  }
  if (pos >= capacity) return std::nullopt;  // no terminating empty name
  return labels;
}

struct CumulativeRegion {
  CumulativeHeader* header = nullptr;
  SeriesDescriptor* descriptors = nullptr;
  double* bounds = nullptr;
  std::uint64_t* values = nullptr;
  char* text = nullptr;
};

inline CumulativeRegion cumulative_region(std::uint8_t* base, const CumulativeGeometry& geometry) {
  CumulativeRegion region;
  region.header = reinterpret_cast<CumulativeHeader*>(base);
  region.descriptors = reinterpret_cast<SeriesDescriptor*>(base + geometry.descriptors_offset());
  region.bounds = reinterpret_cast<double*>(base + geometry.bounds_offset());
  region.values = reinterpret_cast<std::uint64_t*>(base + geometry.values_offset());
  region.text = reinterpret_cast<char*>(base + geometry.text_offset());
  return region;
}

inline void store_f64(std::uint64_t& word, double value,
                      std::memory_order order = std::memory_order_relaxed) {
  shared(word).store(std::bit_cast<std::uint64_t>(value), order);
}
inline double load_f64(std::uint64_t& word, std::memory_order order = std::memory_order_relaxed) {
  return std::bit_cast<double>(shared(word).load(order));
}

// kNoSpace: the block has capacity left but the shm directory had no page for the series (ENOSPC while
// reserving it); a later registration may succeed once space frees.
enum class RegisterStatus : std::uint8_t { kOk = 0, kInvalid = 1, kFull = 2, kNoSpace = 3 };

// The block's four regions, in file order.
enum class CumulativeArea : std::uint8_t { kDescriptors = 0, kBounds = 1, kValues = 2, kText = 3 };
inline constexpr std::size_t kCumulativeAreas = 4;

// Which pages of a segment's cumulative block hold tmpfs pages. The file has its full size from the
// start (ftruncate) and is mapped whole, but only the pages below each region's reserved mark are
// backed (posix_fallocate): the rest is a hole until a registration needs it. A write into a hole of a
// full tmpfs would raise SIGBUS in the engine, so the writer writes only below the marks and reserves
// (cold path, registration only) before it bumps a region's use past its mark. Readers read only below
// the published counts, which are below the marks, so they never fault a hole in either.
struct CumulativeSpace {
  int fd = -1;                     // -1: every page is backed already (heap memory, or reserved whole)
  std::uint64_t block_offset = 0;  // file offset of the cumulative header
  std::uint64_t reserved[kCumulativeAreas] = {};  // bytes reserved from each region's start

  // Growth doubles a region's reservation, by at most this much at a time.
  static constexpr std::uint64_t kMaxStepBytes = std::uint64_t{1} << 20;
};

inline std::uint64_t cumulative_area_offset(const CumulativeGeometry& g, CumulativeArea area) {
  switch (area) {
    case CumulativeArea::kDescriptors:
      return g.descriptors_offset();
    case CumulativeArea::kBounds:
      return g.bounds_offset();
    case CumulativeArea::kValues:
      return g.values_offset();
    case CumulativeArea::kText:
      break;
  }
  return g.text_offset();
}

inline std::uint64_t cumulative_area_bytes(const CumulativeGeometry& g, CumulativeArea area) {
  switch (area) {
    case CumulativeArea::kDescriptors:
      return std::uint64_t{g.series_capacity} * sizeof(SeriesDescriptor);
    case CumulativeArea::kBounds:
      return std::uint64_t{g.bounds_capacity} * 8;
    case CumulativeArea::kValues:
      return std::uint64_t{g.values_capacity} * 8;
    case CumulativeArea::kText:
      break;
  }
  return g.text_bytes();
}

// The reservation after growing region `area` (currently `reserved` bytes) to hold `needed` bytes:
// double, by at most kMaxStepBytes past what is needed, ending on a page boundary of the file
// (block_offset is page aligned), never past the region. From nothing (creation) it is the rest of the
// page the region starts in, or one page when it starts on one.
inline std::uint64_t grown_reservation(const CumulativeGeometry& g, CumulativeArea area,
                                       std::uint64_t reserved, std::uint64_t needed) {
  const std::uint64_t start = cumulative_area_offset(g, area);
  const std::uint64_t size = cumulative_area_bytes(g, area);
  std::uint64_t want = std::max({needed, reserved * 2, std::uint64_t{1}});
  want = std::min(want, needed + CumulativeSpace::kMaxStepBytes);
  const std::uint64_t end = align_up(start + want, 4096) - start;
  return std::min(end, size);
}

// Reserves [from, to) bytes of region `area` in the file; 0 or the errno (EINTR is retried).
inline int reserve_cumulative_pages(const CumulativeSpace& space, const CumulativeGeometry& g,
                                    CumulativeArea area, std::uint64_t from, std::uint64_t to) {
  if (space.fd < 0 || to <= from) return 0;
  const std::uint64_t at = space.block_offset + cumulative_area_offset(g, area) + from;
  int e = 0;
  do {
    e = posix_fallocate(space.fd, static_cast<off_t>(at), static_cast<off_t>(to - from));
  } while (e == EINTR);
  return e;
}

// Writer half. Not thread-safe: the owning rank thread registers and updates; registration may
// allocate nothing in shared memory beyond the block's fixed capacity (it allocates on the heap: the
// help-text table below). With a CumulativeSpace it reserves the block's pages as it fills them.
class CumulativeWriter {
 public:
  CumulativeWriter() = default;
  explicit CumulativeWriter(CumulativeRegion region, CumulativeSpace space = {})
      : region_(region), space_(space) {
    capacity_series_ = region.header->series_capacity;
    capacity_bounds_ = region.header->bounds_capacity;
    capacity_values_ = region.header->values_capacity;
    capacity_text_ = region.header->text_capacity;
    series_count_ = region.header->series_count;
    bounds_used_ = region.header->bounds_used;
    values_used_ = region.header->values_used;
    text_used_ = region.header->text_used;
    geometry_ = {capacity_series_, capacity_bounds_, capacity_values_, capacity_text_};
  }

  // errno of the last reservation that failed (0: none), for the caller's message.
  int last_reserve_error() const { return reserve_error_; }
  // Why the last registration refused its series (kInvalid), for the caller's message; kNone after one
  // that was not refused for its name, labels, help, kind, mode or bounds.
  const SeriesCheck& last_refusal() const { return last_refusal_; }
  // Bytes of region `area` reserved so far (its whole size without a CumulativeSpace).
  std::uint64_t reserved_bytes(CumulativeArea area) const {
    return space_.fd < 0 ? cumulative_area_bytes(geometry_, area)
                         : space_.reserved[static_cast<std::size_t>(area)];
  }

  // Registers a series; on success `out_index` names it for the update calls. `bounds` are the finite
  // upper bounds of a histogram, strictly increasing (the +Inf bucket is implicit). `help` is stored
  // once per family and text (series of one family share it). A series check_series refuses is kInvalid,
  // its reason in last_refusal().
  RegisterStatus register_series(SeriesKind kind, GaugeMode mode, std::string_view family,
                                 const LabelPairs& labels, std::span<const double> bounds,
                                 std::uint32_t& out_index, std::uint32_t flags = 0,
                                 std::string_view help = {}) {
    last_refusal_ = check_series(kind, mode, family, labels, bounds, help);
    if (last_refusal_) return fail(RegisterStatus::kInvalid);
    // Texts are bounded by the text area only (u64 sums: a list of huge texts cannot wrap).
    const std::uint64_t label_bytes = encoded_series_label_bytes(labels);
    const auto bucket_count = static_cast<std::uint16_t>(bounds.size());
    const std::uint32_t words = series_value_words(kind, bucket_count);
    if (series_count_ >= capacity_series_ || values_used_ + words > capacity_values_) {
      return fail(RegisterStatus::kFull);
    }
    // Family names and help texts are per family: store each name, and each (family, text), once.
    std::uint32_t family_offset = 0;
    bool store_family = false;
    family_key_.assign(family);
    const auto known_family = family_offsets_.find(family_key_);
    if (known_family != family_offsets_.end()) {
      family_offset = known_family->second;
    } else {
      store_family = true;
    }
    std::uint32_t help_offset = 0;
    bool store_help = false;
    if (!help.empty()) {
      help_key_.assign(family).push_back('\0');
      help_key_.append(help);
      const auto found = help_offsets_.find(help_key_);
      if (found != help_offsets_.end()) {
        help_offset = found->second;
      } else {
        store_help = true;
      }
    }
    const std::uint64_t text_needed =
        (store_family ? family.size() : 0) + (store_help ? help.size() : 0) + label_bytes;
    if (std::uint64_t{text_used_} + text_needed > capacity_text_) return fail(RegisterStatus::kFull);
    // Histograms of one family usually share bounds: reuse the last bounds written when equal.
    std::uint32_t bounds_offset = last_bounds_offset_;
    const bool reuse = !bounds.empty() && last_bounds_size_ == bounds.size() &&
                       std::equal(bounds.begin(), bounds.end(), region_.bounds + last_bounds_offset_);
    const bool new_bounds = !reuse && !bounds.empty();
    if (new_bounds && bounds_used_ + bounds.size() > capacity_bounds_) return fail(RegisterStatus::kFull);
    // Every page the series will be written to is reserved before anything is written: a refusal
    // leaves the block exactly as it was (what was reserved stays reserved, for the next series).
    const std::uint64_t ends[kCumulativeAreas] = {
        (std::uint64_t{series_count_} + 1) * sizeof(SeriesDescriptor),
        (std::uint64_t{bounds_used_} + (new_bounds ? bounds.size() : 0)) * 8,
        (std::uint64_t{values_used_} + words) * 8, std::uint64_t{text_used_} + text_needed};
    for (std::size_t area = 0; area < kCumulativeAreas; ++area) {
      if (!reserve(static_cast<CumulativeArea>(area), ends[area])) return fail(RegisterStatus::kNoSpace);
    }
    if (new_bounds) {
      bounds_offset = bounds_used_;
      std::copy(bounds.begin(), bounds.end(), region_.bounds + bounds_offset);
      bounds_used_ += static_cast<std::uint32_t>(bounds.size());
      last_bounds_offset_ = bounds_offset;
      last_bounds_size_ = bounds.size();
    }
    if (store_family) {
      family_offset = text_used_;
      std::memcpy(region_.text + text_used_, family.data(), family.size());
      text_used_ += static_cast<std::uint32_t>(family.size());
      family_offsets_.emplace(family_key_, family_offset);
    }
    if (store_help) {
      help_offset = text_used_;
      std::memcpy(region_.text + text_used_, help.data(), help.size());
      text_used_ += static_cast<std::uint32_t>(help.size());
      help_offsets_.emplace(help_key_, help_offset);
    }
    const std::uint32_t labels_offset = text_used_;
    encode_series_labels(labels, region_.text + labels_offset);
    text_used_ += static_cast<std::uint32_t>(label_bytes);

    SeriesDescriptor fresh{};
    fresh.kind = static_cast<std::uint8_t>(kind);
    fresh.gauge_mode = static_cast<std::uint8_t>(mode);
    fresh.bucket_count = bucket_count;
    fresh.values_offset = values_used_;
    fresh.bounds_offset = bounds.empty() ? 0 : bounds_offset;
    fresh.flags = flags & kSeriesWithoutIdentityLabels;
    fresh.labels_offset = labels_offset;
    fresh.labels_bytes = static_cast<std::uint32_t>(label_bytes);
    fresh.help_offset = help.empty() ? 0 : help_offset;
    fresh.help_bytes = static_cast<std::uint32_t>(help.size());
    fresh.family_offset = family_offset;
    fresh.family_bytes = static_cast<std::uint32_t>(family.size());
    region_.descriptors[series_count_] = fresh;
    values_used_ += words;
    out_index = series_count_++;
    shared(region_.header->bounds_used).store(bounds_used_, std::memory_order_relaxed);
    shared(region_.header->values_used).store(values_used_, std::memory_order_relaxed);
    shared(region_.header->text_used).store(text_used_, std::memory_order_relaxed);
    shared(region_.header->series_count).store(series_count_, std::memory_order_release);
    return RegisterStatus::kOk;
  }

  std::uint32_t series_count() const { return series_count_; }
  const SeriesDescriptor& descriptor(std::uint32_t index) const { return region_.descriptors[index]; }

  void counter_add(std::uint32_t index, double delta) {
    std::uint64_t& word = region_.values[region_.descriptors[index].values_offset];
    store_f64(word, load_f64(word) + delta);
  }

  // prometheus_client's Counter.reset(): this writer's total back to 0 (the daemon serves the drop as is).
  void counter_reset(std::uint32_t index) {
    store_f64(region_.values[region_.descriptors[index].values_offset], 0.0);
  }

  void gauge_set(std::uint32_t index, double value, std::uint64_t now_ns) {
    std::uint64_t* words = region_.values + region_.descriptors[index].values_offset;
    const std::uint64_t seq = shared(words[0]).load(std::memory_order_relaxed);
    shared(words[0]).store(seq + 1, std::memory_order_relaxed);
    store_f64(words[1], value, std::memory_order_release);
    shared(words[2]).store(now_ns == 0 ? 1 : now_ns, std::memory_order_release);
    shared(words[0]).store(seq + 2, std::memory_order_release);
  }

  // The gauge's value plus `delta`; returns the new value (the single writer owns the word).
  double gauge_add(std::uint32_t index, double delta, std::uint64_t now_ns) {
    std::uint64_t* words = region_.values + region_.descriptors[index].values_offset;
    const double value = load_f64(words[1]) + delta;
    gauge_set(index, value, now_ns);
    return value;
  }

  // Adds `count` observations of `value` (count > 1 is SGLang's bulk inter-token-latency observe) with
  // `sum_delta` added to the sum. A summary is a histogram without finite bounds: its one bucket is the
  // count.
  void histogram_observe(std::uint32_t index, double value, std::uint64_t count, double sum_delta) {
    const SeriesDescriptor& d = region_.descriptors[index];
    const double* bounds = region_.bounds + d.bounds_offset;
    const std::uint16_t n = d.bucket_count;
    // First bucket whose upper bound is >= value (le semantics); n is the +Inf bucket. NaN is <= no
    // bound, not even +Inf: as in prometheus_client, it lands in no bucket of a histogram (its count, the
    // +Inf bucket, does not move) and only its sum takes it; a summary counts it.
    if (std::isnan(value) && static_cast<SeriesKind>(d.kind) == SeriesKind::kHistogram) {
      histogram_update(d, n, 0, sum_delta);
      return;
    }
    const auto bucket = static_cast<std::uint32_t>(std::lower_bound(bounds, bounds + n, value) - bounds);
    histogram_update(d, bucket, count, sum_delta);
  }

  // prometheus_client's histogram-child internals: one bucket (`_buckets[i].inc(n)`), the sum alone
  // (`_sum.inc(x)`). `bucket` must be <= bucket_count (the +Inf bucket); the caller checks.
  void histogram_bucket_add(std::uint32_t index, std::uint32_t bucket, std::uint64_t count) {
    histogram_update(region_.descriptors[index], bucket, count, 0.0);
  }
  void histogram_add_sum(std::uint32_t index, double sum_delta) {
    const SeriesDescriptor& d = region_.descriptors[index];
    histogram_update(d, d.bucket_count, 0, sum_delta);
  }

  // What this writer last stored (it is the only writer, so no sequence check is needed).
  double value(std::uint32_t index) const {
    const SeriesDescriptor& d = region_.descriptors[index];
    std::uint64_t* words = region_.values + d.values_offset;
    switch (static_cast<SeriesKind>(d.kind)) {
      case SeriesKind::kCounter:
        return load_f64(words[0]);
      case SeriesKind::kGauge:
        return load_f64(words[1]);
      case SeriesKind::kHistogram:
      case SeriesKind::kSummary:
        return load_f64(words[1 + d.bucket_count + 1]);
    }
    return 0;
  }
  std::uint64_t bucket_count_value(std::uint32_t index, std::uint32_t bucket) const {
    const SeriesDescriptor& d = region_.descriptors[index];
    return shared(region_.values[d.values_offset + 1 + bucket]).load(std::memory_order_relaxed);
  }

 private:
  void histogram_update(const SeriesDescriptor& d, std::uint32_t bucket, std::uint64_t count,
                        double sum_delta) {
    std::uint64_t* words = region_.values + d.values_offset;
    const std::uint16_t n = d.bucket_count;
    const std::uint64_t seq = shared(words[0]).load(std::memory_order_relaxed);
    shared(words[0]).store(seq + 1, std::memory_order_relaxed);
    if (count != 0) {
      std::uint64_t& bucket_word = words[1 + bucket];
      shared(bucket_word)
          .store(shared(bucket_word).load(std::memory_order_relaxed) + count, std::memory_order_release);
    }
    if (sum_delta != 0.0) {
      std::uint64_t& sum_word = words[1 + n + 1];
      store_f64(sum_word, load_f64(sum_word) + sum_delta, std::memory_order_release);
    }
    shared(words[0]).store(seq + 2, std::memory_order_release);
  }

  RegisterStatus fail(RegisterStatus status) {
    shared(region_.header->registration_failures).fetch_add(1, std::memory_order_relaxed);
    if (status == RegisterStatus::kNoSpace)
      shared(region_.header->registrations_no_space).fetch_add(1, std::memory_order_relaxed);
    if (status == RegisterStatus::kFull)
      shared(region_.header->registrations_full).fetch_add(1, std::memory_order_relaxed);
    return status;
  }

  // Makes sure the first `end` bytes of region `area` are backed by pages; false (errno kept) if the
  // file system refused them. Cold: runs only when a registration crosses a region's mark.
  bool reserve(CumulativeArea area, std::uint64_t end) {
    if (space_.fd < 0) return true;
    std::uint64_t& reserved = space_.reserved[static_cast<std::size_t>(area)];
    if (end <= reserved) return true;
    const std::uint64_t target = grown_reservation(geometry_, area, reserved, end);
    if (reserve_cumulative_pages(space_, geometry_, area, reserved, target) == 0) {
      reserved = target;
      return true;
    }
    // Not the whole step: perhaps just what this series needs.
    const int e = reserve_cumulative_pages(space_, geometry_, area, reserved, end);
    if (e == 0) {
      reserved = end;
      return true;
    }
    reserve_error_ = e;
    return false;
  }

  CumulativeRegion region_;
  CumulativeSpace space_;
  CumulativeGeometry geometry_{};
  int reserve_error_ = 0;
  SeriesCheck last_refusal_;
  std::uint32_t capacity_series_ = 0;
  std::uint32_t capacity_bounds_ = 0;
  std::uint32_t capacity_values_ = 0;
  std::uint32_t capacity_text_ = 0;
  std::uint32_t series_count_ = 0;
  std::uint32_t bounds_used_ = 0;
  std::uint32_t values_used_ = 0;
  std::uint32_t text_used_ = 0;
  std::uint32_t last_bounds_offset_ = 0;
  std::size_t last_bounds_size_ = 0;
  std::unordered_map<std::string, std::uint32_t> family_offsets_;  // family -> text offset
  std::unordered_map<std::string, std::uint32_t> help_offsets_;    // "family\0help" -> text offset
  std::string family_key_;
  std::string help_key_;
};

// A descriptor copied out of shared memory and checked against the block's geometry.
struct SeriesInfo {
  SeriesKind kind = SeriesKind::kCounter;
  GaugeMode gauge_mode = GaugeMode::kMostRecent;
  std::string family;
  std::string help;  // as the writer declared it, unescaped; empty: none
  LabelPairs labels;
  std::vector<double> bounds;
  std::uint32_t values_offset = 0;
  std::uint32_t flags = 0;
};

struct SeriesValue {
  double value = 0;                   // counter total or gauge value
  std::uint64_t set_ns = 0;           // gauge: CLOCK_MONOTONIC of the last set (0 = never set)
  std::vector<std::uint64_t> counts;  // histogram: per bucket, non-cumulative, +Inf last; summary: count
  double sum = 0;                     // histogram, summary
  bool consistent = true;             // false if the seqlock never settled (writer died mid-update)
};

// Reader half: validates every descriptor before use. Not thread-safe; any number of readers may run
// in different processes since reading writes nothing.
class CumulativeReader {
 public:
  CumulativeReader() = default;
  CumulativeReader(CumulativeRegion region, CumulativeGeometry geometry)
      : region_(region), geometry_(geometry) {}

  std::uint32_t published_series() const {
    const std::uint32_t n = shared(region_.header->series_count).load(std::memory_order_acquire);
    return std::min(n, geometry_.series_capacity);
  }

  // Registrations the writer refused, by reason (the writer's own counts: any values).
  struct Refused {
    std::uint64_t no_space = 0;  // the shm directory had no page for the series
    std::uint64_t full = 0;      // the block's capacity was used up
    std::uint64_t other = 0;     // invalid names, labels or bounds
  };
  Refused refused_registrations() const {
    const CumulativeHeader& h = *region_.header;
    const std::uint64_t all = shared(h.registration_failures).load(std::memory_order_relaxed);
    Refused r;
    r.no_space = shared(h.registrations_no_space).load(std::memory_order_relaxed);
    r.full = shared(h.registrations_full).load(std::memory_order_relaxed);
    r.other = all > r.no_space + r.full ? all - r.no_space - r.full : 0;
    return r;
  }

  // Copies and validates descriptor `index` (< published_series()), its texts and bounds.
  std::optional<SeriesInfo> read_descriptor(std::uint32_t index) const {
    if (index >= geometry_.series_capacity) return std::nullopt;
    SeriesDescriptor d{};
    std::memcpy(&d, &region_.descriptors[index], sizeof d);
    SeriesInfo info;
    if (d.kind < 1 || d.kind > kSeriesKindMax || d.gauge_mode >= kGaugeModeCount ||
        d.bucket_count > kMaxHistogramBuckets) {
      return std::nullopt;
    }
    info.kind = static_cast<SeriesKind>(d.kind);
    info.gauge_mode = static_cast<GaugeMode>(d.gauge_mode);
    if (info.kind != SeriesKind::kHistogram && d.bucket_count != 0) return std::nullopt;
    // Every text must lie inside the text area (u64 sums: hostile offsets and lengths cannot wrap).
    const std::uint64_t text_bytes = geometry_.text_bytes();
    if (d.family_bytes == 0 || std::uint64_t{d.family_offset} + d.family_bytes > text_bytes ||
        std::uint64_t{d.labels_offset} + d.labels_bytes > text_bytes ||
        std::uint64_t{d.help_offset} + d.help_bytes > text_bytes) {
      return std::nullopt;
    }
    info.family.assign(region_.text + d.family_offset, d.family_bytes);
    if (!is_valid_metric_name(info.family)) return std::nullopt;
    // Copied out first: the text area is shared memory, and a hostile writer could change it between a
    // check and a use.
    text_scratch_.assign(region_.text + d.labels_offset, d.labels_bytes);
    auto labels = decode_series_labels(text_scratch_.data(), text_scratch_.size());
    if (!labels || !labels_allowed(info.kind, *labels)) return std::nullopt;
    info.labels = std::move(*labels);
    info.help.assign(region_.text + d.help_offset, d.help_bytes);
    if (!is_valid_utf8(info.help)) return std::nullopt;
    const std::uint64_t words = series_value_words(info.kind, d.bucket_count);
    if (std::uint64_t{d.values_offset} + words > geometry_.values_capacity) return std::nullopt;
    info.values_offset = d.values_offset;
    info.flags = d.flags & kSeriesWithoutIdentityLabels;
    if (info.kind == SeriesKind::kHistogram) {
      if (std::uint64_t{d.bounds_offset} + d.bucket_count > geometry_.bounds_capacity) return std::nullopt;
      info.bounds.resize(d.bucket_count);
      for (std::uint16_t i = 0; i < d.bucket_count; ++i) {
        info.bounds[i] = region_.bounds[d.bounds_offset + i];
        if (!std::isfinite(info.bounds[i]) || (i > 0 && !(info.bounds[i] > info.bounds[i - 1])))
          return std::nullopt;
      }
    }
    return info;
  }

  // Reads the current value of a validated series into `out` (reusing its storage).
  void read_value(const SeriesInfo& info, SeriesValue& out) const {
    std::uint64_t* words = region_.values + info.values_offset;
    out.consistent = true;
    switch (info.kind) {
      case SeriesKind::kCounter:
        out.value = load_f64(words[0]);
        return;
      case SeriesKind::kGauge:
        out.consistent = read_stable(words, [&] {
          out.value = load_f64(words[1], std::memory_order_acquire);
          out.set_ns = shared(words[2]).load(std::memory_order_acquire);
        });
        return;
      case SeriesKind::kHistogram:
      case SeriesKind::kSummary: {
        const std::size_t n = info.bounds.size() + 1;
        out.counts.resize(n);
        out.consistent = read_stable(words, [&] {
          for (std::size_t i = 0; i < n; ++i)
            out.counts[i] = shared(words[1 + i]).load(std::memory_order_acquire);
          out.sum = load_f64(words[1 + n], std::memory_order_acquire);
        });
        return;
      }
    }
  }

 private:
  // `copy` must load every word with acquire: that is what keeps the second sequence load after them.
  template <typename Copy>
  static bool read_stable(std::uint64_t* words, Copy&& copy) {
    for (int attempt = 0; attempt < 64; ++attempt) {
      const std::uint64_t before = shared(words[0]).load(std::memory_order_acquire);
      copy();
      const std::uint64_t after = shared(words[0]).load(std::memory_order_relaxed);
      if (before == after && (before & 1) == 0) return true;
    }
    return false;
  }

  CumulativeRegion region_;
  CumulativeGeometry geometry_{};
  mutable std::string text_scratch_;
};

}  // namespace rankstat::shm
