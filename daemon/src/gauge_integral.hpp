// What a load gauge did between scrapes, from every report a rank made (docs/metrics.md, "Between
// scrapes"): the gauge integrated over time, exported as a counter whose rate() is the exact
// time-weighted mean over any window, and its largest and smallest value over a fixed trailing window.
//
// A rank's gauge is piecewise constant: each report holds its value until the next one. Time is the
// writer's record timestamp (CLOCK_MONOTONIC, the daemon's clock too), never the time the daemon happened
// to drain or scrape, so the result does not depend on scrape interval, scraper count or drain pacing.
#pragma once

#include <array>
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

// The default --aggregate.integrate list: the gauges operators watch for saturation (running and queued
// requests per queue kind, KV usage and KV tokens held), in SGLang's and vLLM's spelling; typed snapshot
// fields are matched by their exported family name (sglang:<field>).
const std::vector<std::string>& default_integrated_families();

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
  void observe(std::uint64_t timestamp_ns, double value, std::uint64_t peak_window_ns);
  // A later sign of life of the writer (its heartbeat): the last value held at least until then.
  void hold_until(std::uint64_t timestamp_ns);

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
    std::uint64_t index = ~std::uint64_t{0};  // which bucket of time this slot holds; ~0: none yet
    double largest = 0;
    double smallest = 0;
  };
  void note(std::uint64_t timestamp_ns, double value, std::uint64_t peak_window_ns);

  bool has_value_ = false;
  double value_ = 0;
  double integral_ = 0;
  std::uint64_t until_ns_ = 0;
  // A window spans kWindowBuckets buckets plus its partial edges: two more slots than that.
  std::array<Bucket, kWindowBuckets + 2> buckets_{};
};

}  // namespace rankstat
