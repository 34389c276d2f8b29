// The cumulative block's reader: copies each published descriptor out of shared memory and validates it
// against the block's geometry and the contract's rules, then reads values under the block's ordering
// protocol (cumulative.hpp). Nothing it reads is trusted.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rankstat/shmproto/cumulative_region.hpp"
#include "rankstat/shmproto/label_lists.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/series_rules.hpp"
#include "rankstat/shmproto/text_rules.hpp"

namespace rankstat::shm {

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
