// What a load gauge did between scrapes, from every report a rank made (docs/metrics.md, "Between
// scrapes"): the gauge integrated over time, exported as a counter whose rate() is the exact
// time-weighted mean over any window, and its largest and smallest value over a fixed trailing window.
//
// A rank's gauge is piecewise constant: each report holds its value until the next one. Time is the
// writer's record timestamp (CLOCK_MONOTONIC, the daemon's clock too), never the time the daemon happened
// to drain or scrape, so the result does not depend on scrape interval, scraper count or drain pacing.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
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

// A double-ended queue of trivially copyable items in one growing ring buffer: unlike std::deque it
// allocates only when it outgrows its largest size so far, so the drain path that pushes and pops on
// every report allocates nothing once a window's worth of reports has been seen.
template <typename T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  T& front() { return items_[head_]; }
  T& back() { return items_[(head_ + size_ - 1) & (items_.size() - 1)]; }
  void pop_front() {
    head_ = (head_ + 1) & (items_.size() - 1);
    --size_;
  }
  void pop_back() { --size_; }
  void push_back(const T& item) {
    if (size_ == items_.size()) grow();
    items_[(head_ + size_) & (items_.size() - 1)] = item;
    ++size_;
  }
  void clear() { head_ = size_ = 0; }

 private:
  void grow() {
    std::vector<T> bigger(items_.empty() ? 8 : items_.size() * 2);  // a power of two: masks wrap
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = items_[(head_ + i) & (items_.size() - 1)];
    items_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<T> items_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

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

  // Largest and smallest value in effect during [now - window, min(now, last sign of life)]; false when
  // nothing was in effect then (no report yet, or the writer's last sign of life is older than the window).
  bool window_extrema(std::uint64_t now_ns, std::uint64_t window_ns, double& largest, double& smallest);

  // A daemon restart continues from what the previous daemon exported (RetiredTotals' checkpoint).
  void restore(double integral, double value, std::uint64_t until_ns);

 private:
  // A value and the stretch of time it held: [start, end); end is kOpen while it still holds.
  struct Piece {
    std::uint64_t start;
    std::uint64_t end;
    double value;
  };
  static constexpr std::uint64_t kOpen = ~std::uint64_t{0};
  // Pieces kept per queue at most. A queue holds at most the reports of one window (1,500 at 100 Hz over
  // 15 s, and only while values keep rising or falling); a writer that reports faster than that cannot
  // make the daemon allocate without bound: its oldest pieces go first, which shortens its window.
  static constexpr std::size_t kMaxPieces = 4096;
  void push_piece(std::uint64_t start, double value, std::uint64_t peak_window_ns);
  static void expire(RingQueue<Piece>& pieces, std::uint64_t cutoff_ns);

  bool has_value_ = false;
  double value_ = 0;
  double integral_ = 0;
  std::uint64_t until_ns_ = 0;
  // Monotonic queues over the trailing window: `largest_` holds decreasing values, `smallest_` increasing
  // ones; a later piece that dominates an earlier one makes it irrelevant (it ends later). Amortised
  // O(1) per report; memory bounded by the reports of one window.
  RingQueue<Piece> largest_;
  RingQueue<Piece> smallest_;
};

}  // namespace rankstat
