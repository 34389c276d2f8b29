// The cumulative block's writer: series registration (checks, capacity, page reservation, then the
// descriptor, published by series_count) and the value updates under the block's ordering protocol
// (cumulative.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "rankstat/shmproto/cumulative_pages.hpp"
#include "rankstat/shmproto/cumulative_region.hpp"
#include "rankstat/shmproto/label_lists.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/series_rules.hpp"

namespace rankstat::shm {

// kNoSpace: the block has capacity left but the shm directory had no page for the series (ENOSPC while
// reserving it); a later registration may succeed once space frees.
enum class RegisterStatus : std::uint8_t { kOk = 0, kInvalid = 1, kFull = 2, kNoSpace = 3 };

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
    family_key_.assign(family);
    StoredText family_text = look_up(family_offsets_, family_key_);
    StoredText help_text;
    if (!help.empty()) {
      help_key_.assign(family).push_back('\0');
      help_key_.append(help);
      help_text = look_up(help_offsets_, help_key_);
    }
    const std::uint64_t text_needed =
        (family_text.to_store ? family.size() : 0) + (help_text.to_store ? help.size() : 0) + label_bytes;
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
    if (family_text.to_store) family_text.offset = store_text(family_offsets_, family_key_, family);
    if (help_text.to_store) help_text.offset = store_text(help_offsets_, help_key_, help);
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
    fresh.help_offset = help.empty() ? 0 : help_text.offset;
    fresh.help_bytes = static_cast<std::uint32_t>(help.size());
    fresh.family_offset = family_text.offset;
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
  using TextOffsets = std::unordered_map<std::string, std::uint32_t>;

  // A text the block stores once per key (a family name; a family's help text): where it already is, or
  // that it is still to be stored.
  struct StoredText {
    std::uint32_t offset = 0;
    bool to_store = false;
  };
  static StoredText look_up(const TextOffsets& offsets, const std::string& key) {
    const auto found = offsets.find(key);
    return found != offsets.end() ? StoredText{found->second, false} : StoredText{0, true};
  }
  // Appends non-empty `text` to the text area (the caller reserved room for it) and remembers it by `key`.
  std::uint32_t store_text(TextOffsets& offsets, const std::string& key, std::string_view text) {
    const std::uint32_t offset = text_used_;
    std::memcpy(region_.text + offset, text.data(), text.size());
    text_used_ += static_cast<std::uint32_t>(text.size());
    offsets.emplace(key, offset);
    return offset;
  }

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
  TextOffsets family_offsets_;  // family -> text offset
  TextOffsets help_offsets_;    // "family\0help" -> text offset
  std::string family_key_;
  std::string help_key_;
};

}  // namespace rankstat::shm
