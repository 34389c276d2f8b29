#include "poll_pacer.hpp"

#include <algorithm>

namespace rankstat {

PollPacer::PollPacer(std::chrono::microseconds fastest, std::chrono::microseconds slowest)
    : fastest_(fastest), slowest_(std::max(fastest, slowest)), interval_(fastest) {}

void PollPacer::set_bounds(std::chrono::microseconds fastest, std::chrono::microseconds slowest) {
  fastest_ = fastest;
  slowest_ = std::max(fastest, slowest);
  interval_ = std::clamp(interval_, fastest_, slowest_);
}

void PollPacer::observe(std::uint64_t now_ns, double fullest_fill, bool drops, bool from_timer) {
  const std::uint64_t elapsed_ns = now_ns > last_drain_ns_ ? now_ns - last_drain_ns_ : 0;
  const bool first = last_drain_ns_ == 0;
  last_drain_ns_ = now_ns;
  if (drops || fullest_fill >= kUrgentFill) {
    interval_ = fastest_;
    return;
  }
  // Growth is bounded per timer pass, so a burst that starts right after a quiet spell finds the pacer at
  // most one doubling behind; scrapes never lengthen the interval (they may come back to back).
  std::chrono::microseconds proposed = from_timer ? interval_ * 2 : interval_;
  if (fullest_fill > 0 && elapsed_ns > 0 && !first) {
    // The fill rate seen over `elapsed`, extrapolated to the interval that reaches kTargetFill.
    const double target_us = static_cast<double>(elapsed_ns) / 1e3 * kTargetFill / fullest_fill;
    if (target_us < static_cast<double>(proposed.count())) {
      proposed = std::chrono::microseconds(static_cast<std::int64_t>(target_us));
    }
  }
  interval_ = std::clamp(proposed, fastest_, slowest_);
}

}  // namespace rankstat
