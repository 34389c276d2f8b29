// What a load gauge did between scrapes, from every report a rank made (docs/metrics.md, "Between
// scrapes"): the gauge integrated over time, exported as a counter whose rate() is the exact
// time-weighted mean over any window, and its largest and smallest value over a fixed trailing window.
//
// A rank's gauge is piecewise constant: each report holds its value until the next one. Time is the
// writer's record timestamp (CLOCK_MONOTONIC, the daemon's clock too), never the time the daemon happened
// to drain or scrape, so the result does not depend on scrape interval, scraper count or drain pacing.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rankstat {

// --aggregate.integrate and --aggregate.peak-window.
struct IntegralSettings {
  std::set<std::string, std::less<>> families;       // gauge families integrated; empty: off
  std::uint64_t peak_window_ns = 15'000'000'000ull;  // 0: no window extrema
  bool enabled() const { return !families.empty(); }
  bool wants(std::string_view family) const { return families.find(family) != families.end(); }
};

// The default --aggregate.integrate list is an engine rule: default_integrated_families(), engine_rules.hpp.

// Exported names: `<gauge>_time_weighted_seconds_total` (a counter, as node_exporter's
// node_disk_io_time_weighted_seconds_total), `<gauge>_window_max` and `<gauge>_window_min` (gauges).
std::string integral_family_name(std::string_view gauge_family);
std::string window_max_family_name(std::string_view gauge_family);
std::string window_min_family_name(std::string_view gauge_family);
std::string integral_help(std::string_view gauge_family);
std::string window_help(std::string_view gauge_family, bool largest, std::uint64_t window_ns);

// One gauge of one rank generation.
class GaugeTrack {
 public:
  // A report: `value` holds from `timestamp_ns` on. A report older than what is already integrated (a
  // record committed just before a heartbeat that was read first) changes the value from then on.
  // Inline: the daemon calls it for every changed gauge of every report it drains.
  void observe(std::uint64_t timestamp_ns, double value, std::uint64_t peak_window_ns) {
    if (!std::isfinite(value)) return;
    if (!has_value_) {
      start(timestamp_ns, value, peak_window_ns);
      return;
    }
    // Same value: the piece simply continues; nothing to integrate or note yet.
    if (value == value_) return;
    hold_until(timestamp_ns);
    if (peak_window_ns != 0) {
      const std::uint64_t at = timestamp_ns > until_ns_ ? timestamp_ns : until_ns_;
      Bucket& b = bucket_at(at, peak_window_ns);
      // Where the old value ends, unless it was already noted in this bucket (it started here: the usual
      // case at report rates above one per bucket), and where the new one starts.
      if (value_bucket_ != b.index) b.take(value_);
      b.take(value);
      value_bucket_ = b.index;
    }
    value_ = value;
  }
  // A later sign of life of the writer (its heartbeat): the last value held at least until then.
  void hold_until(std::uint64_t timestamp_ns) {
    if (!has_value_ || timestamp_ns <= until_ns_) return;
    if (value_ > 0) integral_ += value_ * (static_cast<double>(timestamp_ns - until_ns_) * 1e-9);
    until_ns_ = timestamp_ns;
  }

  bool has_value() const { return has_value_; }
  // The integral in value x seconds; negative values count as 0, so the counter never decreases.
  double integral() const { return integral_; }
  double value() const { return value_; }
  std::uint64_t integrated_until_ns() const { return until_ns_; }

  // Largest and smallest value in effect during the trailing window ending at `now_ns`, whose start is
  // rounded down to a bucket boundary (window_bucket_ns): a value stays in the extrema for at most one
  // bucket longer than the window. False when nothing was in effect then (no report yet, or the writer's
  // last sign of life is older than the window).
  bool window_extrema(std::uint64_t now_ns, std::uint64_t window_ns, double& largest, double& smallest) const;
  // The resolution of the window: 1/kWindowBuckets of it.
  static std::uint64_t window_bucket_ns(std::uint64_t window_ns);
  static constexpr std::uint64_t kWindowBuckets = 16;

  // A daemon restart continues from what the previous daemon exported (RetiredTotals' checkpoint).
  void restore(double integral, double value, std::uint64_t until_ns);

 private:
  // The largest and smallest value in effect during one bucket of the window's resolution. A value is
  // noted in the bucket where it starts and, when it is replaced, in the bucket where it ends; a value
  // that spans a whole window is the current one. So buckets inside the window plus the current value
  // hold every value in effect during it, in O(1) per report and fixed memory.
  struct Bucket {
    std::uint64_t index = kNoBucket;  // which bucket of time this slot holds
    double largest = 0;
    double smallest = 0;
    void take(double value) {
      largest = value > largest ? value : largest;
      smallest = value < smallest ? value : smallest;
    }
  };
  static constexpr std::uint64_t kNoBucket = ~std::uint64_t{0};
  void start(std::uint64_t timestamp_ns, double value, std::uint64_t peak_window_ns);
  // The slot of the bucket holding `timestamp_ns`, emptied first if it held an older bucket. The last
  // bucket's bounds are kept, so reports inside it (nearly all of them) cost no division.
  Bucket& bucket_at(std::uint64_t timestamp_ns, std::uint64_t peak_window_ns) {
    if (timestamp_ns - cached_start_ns_ >= cached_width_ns_ || peak_window_ns != cached_window_ns_)
      locate_bucket(timestamp_ns, peak_window_ns);
    return buckets_[cached_slot_];
  }
  void locate_bucket(std::uint64_t timestamp_ns, std::uint64_t peak_window_ns);

  bool has_value_ = false;
  double value_ = 0;
  double integral_ = 0;
  std::uint64_t until_ns_ = 0;
  std::uint64_t value_bucket_ = kNoBucket;  // the bucket where value_ was last noted
  // The bucket of the last note: its start, width, slot, and the window it was computed for.
  std::uint64_t cached_start_ns_ = 0;
  std::uint64_t cached_width_ns_ = 0;  // 0: nothing cached (every timestamp misses)
  std::uint64_t cached_window_ns_ = 0;
  std::size_t cached_slot_ = 0;
  // A window spans kWindowBuckets buckets plus its partial edges: two more slots than that.
  std::array<Bucket, kWindowBuckets + 2> buckets_{};
};

}  // namespace rankstat
