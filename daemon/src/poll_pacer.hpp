// How long the daemon sleeps between two drains of every ring.
//
// Scrapes and API requests drain the rings themselves before they answer, so the timer only has to keep
// rings from filling up; polling faster buys no freshness and costs a wakeup per pass (at 64 ranks and
// a fixed 2 ms pass, most of the daemon's CPU). The pacer therefore aims to drain each ring when it is
// about kTargetFill full: it estimates the fastest ring's fill rate from every drain (timer, scrape or
// API), shortens the interval at once when rings fill faster, lengthens it by at most 2x per timer pass
// when they fill slower, and jumps to the fastest interval when a writer dropped a record or a ring was
// found half full. A new writer resets it to the fastest interval. What it cannot see coming is a writer
// that jumps from idle to a flood: that writer's ring must hold one slowest interval of its peak rate
// (docs/operations.md, "Drain pacing"). Not thread-safe: used from the daemon's io thread only.
#pragma once

#include <chrono>
#include <cstdint>

namespace rankstat {

class PollPacer {
 public:
  // A drain finds the fullest ring about this full at steady load: a writer may speed up 4x between two
  // passes before the ring is half full (when the pacer goes to `fastest`) and 8x before it drops.
  static constexpr double kTargetFill = 0.125;
  static constexpr double kUrgentFill = 0.5;

  // `fastest` <= `slowest`; the pacer starts at `fastest`.
  PollPacer(std::chrono::microseconds fastest, std::chrono::microseconds slowest);

  // After every drain of all rings, at `now_ns` (CLOCK_MONOTONIC): `fullest_fill` is the largest fraction
  // of a ring's bytes that this drain consumed, `drops` whether a writer dropped a record since the
  // previous drain, `from_timer` whether the poll timer (rather than a scrape or API request) drained.
  void observe(std::uint64_t now_ns, double fullest_fill, bool drops, bool from_timer);

  // Back to the fastest interval: a new writer appeared, and nothing is known of its rate yet.
  void hurry() { interval_ = fastest_; }

  // The delay before the next timer pass.
  std::chrono::microseconds interval() const { return interval_; }

  // New bounds (SIGHUP); the current interval is clamped into them.
  void set_bounds(std::chrono::microseconds fastest, std::chrono::microseconds slowest);

 private:
  std::chrono::microseconds fastest_;
  std::chrono::microseconds slowest_;
  std::chrono::microseconds interval_;
  std::uint64_t last_drain_ns_ = 0;
};

}  // namespace rankstat
