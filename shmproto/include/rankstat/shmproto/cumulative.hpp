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

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// Family names follow the Prometheus rule [a-zA-Z_:][a-zA-Z0-9_:]*; label names [a-zA-Z_][a-zA-Z0-9_]*.
inline bool is_valid_metric_name(std::string_view name) {
  if (name.empty() || name.size() >= kFamilyNameBytes) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

inline bool is_valid_label_name(std::string_view name) {
  if (name.empty() || name.size() > 64 || name.starts_with("__")) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

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

// `text` with each byte that is not part of a strict UTF-8 sequence replaced by U+FFFD: header strings
// are a writer's bytes, and a JSON document or a log line built from them must stay valid.
inline std::string replace_invalid_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const std::size_t length = lead < 0x80                    ? 1
                               : lead >= 0xC2 && lead <= 0xDF ? 2
                               : lead >= 0xE0 && lead <= 0xEF ? 3
                               : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                              : 0;
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

// What a series of `kind` may carry as its own labels: valid names, each once, none the exposition
// reserves for the kind (`le` on histograms, `quantile` on summaries), values in UTF-8. Checked by the
// writer at registration and again by every reader, which trusts nothing it reads.
inline bool labels_allowed(SeriesKind kind, const LabelPairs& labels) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto& [name, value] = labels[i];
    if (!is_valid_label_name(name) || !is_valid_utf8(value)) return false;
    if ((kind == SeriesKind::kHistogram && name == "le") ||
        (kind == SeriesKind::kSummary && name == "quantile"))
      return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[j].first == name) return false;
    }
  }
  return true;
}

// Encoded size of a label list ("name\0value\0...\0" with the final \0).
inline std::size_t encoded_label_bytes(const LabelPairs& labels) {
  std::size_t bytes = 1;
  for (const auto& [name, value] : labels) bytes += name.size() + 1 + value.size() + 1;
  return bytes;
}

// Encodes "name\0value\0...\0" into `out` (capacity bytes). Label values may hold any byte but NUL.
inline bool encode_label_pairs(const LabelPairs& labels, char* out, std::size_t capacity) {
  std::size_t used = 0;
  for (const auto& [name, value] : labels) {
    if (!is_valid_label_name(name) || value.find('\0') != std::string::npos) return false;
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
    if (!is_valid_label_name(name)) return std::nullopt;
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

enum class RegisterStatus : std::uint8_t { kOk = 0, kInvalid = 1, kFull = 2 };

// Writer half. Not thread-safe: the owning rank thread registers and updates; registration may
// allocate nothing in shared memory beyond the block's fixed capacity (it allocates on the heap: the
// help-text table below).
class CumulativeWriter {
 public:
  CumulativeWriter() = default;
  explicit CumulativeWriter(CumulativeRegion region) : region_(region) {
    capacity_series_ = region.header->series_capacity;
    capacity_bounds_ = region.header->bounds_capacity;
    capacity_values_ = region.header->values_capacity;
    capacity_text_ = region.header->text_capacity;
    series_count_ = region.header->series_count;
    bounds_used_ = region.header->bounds_used;
    values_used_ = region.header->values_used;
    text_used_ = region.header->text_used;
  }

  // Registers a series; on success `out_index` names it for the update calls. `bounds` are the finite
  // upper bounds of a histogram, strictly increasing (the +Inf bucket is implicit). `help` is stored
  // once per family and text (series of one family share it).
  RegisterStatus register_series(SeriesKind kind, GaugeMode mode, std::string_view family,
                                 const LabelPairs& labels, std::span<const double> bounds,
                                 std::uint32_t& out_index, std::uint32_t flags = 0,
                                 std::string_view help = {}) {
    if (!is_valid_metric_name(family) || bounds.size() > kMaxHistogramBuckets ||
        static_cast<std::uint8_t>(kind) < 1 || static_cast<std::uint8_t>(kind) > kSeriesKindMax ||
        (kind != SeriesKind::kHistogram && !bounds.empty()) ||
        static_cast<std::uint8_t>(mode) >= kGaugeModeCount || !labels_allowed(kind, labels) ||
        help.size() > kHelpBytes || !is_valid_utf8(help)) {
      return fail(RegisterStatus::kInvalid);
    }
    for (const auto& [name, value] : labels) {
      if (value.find('\0') != std::string::npos) return fail(RegisterStatus::kInvalid);
    }
    const std::size_t label_bytes = encoded_label_bytes(labels);
    if (label_bytes > kSeriesLabelBytes) return fail(RegisterStatus::kInvalid);
    for (std::size_t i = 0; i < bounds.size(); ++i) {
      if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
        return fail(RegisterStatus::kInvalid);
    }
    const auto bucket_count = static_cast<std::uint16_t>(bounds.size());
    const std::uint32_t words = series_value_words(kind, bucket_count);
    if (series_count_ >= capacity_series_ || values_used_ + words > capacity_values_) {
      return fail(RegisterStatus::kFull);
    }
    // Help texts are per family: store each (family, text) once.
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
        help_offset = text_used_;
      }
    }
    const std::uint64_t text_needed = (store_help ? help.size() : 0) + label_bytes;
    if (std::uint64_t{text_used_} + text_needed > capacity_text_) return fail(RegisterStatus::kFull);
    // Histograms of one family usually share bounds: reuse the last bounds written when equal.
    std::uint32_t bounds_offset = last_bounds_offset_;
    const bool reuse = !bounds.empty() && last_bounds_size_ == bounds.size() &&
                       std::equal(bounds.begin(), bounds.end(), region_.bounds + last_bounds_offset_);
    if (!reuse && !bounds.empty()) {
      if (bounds_used_ + bounds.size() > capacity_bounds_) return fail(RegisterStatus::kFull);
      bounds_offset = bounds_used_;
      std::copy(bounds.begin(), bounds.end(), region_.bounds + bounds_offset);
      bounds_used_ += static_cast<std::uint32_t>(bounds.size());
      last_bounds_offset_ = bounds_offset;
      last_bounds_size_ = bounds.size();
    }
    if (store_help) {
      std::memcpy(region_.text + text_used_, help.data(), help.size());
      text_used_ += static_cast<std::uint32_t>(help.size());
      help_offsets_.emplace(help_key_, help_offset);
    }
    const std::uint32_t labels_offset = text_used_;
    encode_label_pairs(labels, region_.text + labels_offset, label_bytes);
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
    std::memcpy(fresh.family, family.data(), family.size());
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
    return status;
  }

  CumulativeRegion region_;
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
  std::unordered_map<std::string, std::uint32_t> help_offsets_;  // "family\0help" -> text offset
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
    const void* family_end = std::memchr(d.family, '\0', sizeof d.family);
    if (family_end == nullptr) return std::nullopt;
    info.family.assign(d.family, static_cast<std::size_t>(static_cast<const char*>(family_end) - d.family));
    if (!is_valid_metric_name(info.family)) return std::nullopt;
    const std::uint64_t text_bytes = geometry_.text_bytes();
    if (d.labels_bytes == 0 || d.labels_bytes > kSeriesLabelBytes ||
        std::uint64_t{d.labels_offset} + d.labels_bytes > text_bytes || d.help_bytes > kHelpBytes ||
        std::uint64_t{d.help_offset} + d.help_bytes > text_bytes) {
      return std::nullopt;
    }
    // Copied out first: the text area is shared memory, and a hostile writer could change it between a
    // check and a use.
    text_scratch_.assign(region_.text + d.labels_offset, d.labels_bytes);
    auto labels = decode_label_pairs(text_scratch_.data(), text_scratch_.size());
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
