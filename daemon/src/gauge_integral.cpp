#include "gauge_integral.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rankstat {

std::string integral_family_name(std::string_view gauge_family) {
  return std::string(gauge_family).append("_time_weighted_seconds_total");
}

std::string window_max_family_name(std::string_view gauge_family) {
  return std::string(gauge_family).append("_window_max");
}

std::string window_min_family_name(std::string_view gauge_family) {
  return std::string(gauge_family).append("_window_min");
}

std::string integral_help(std::string_view gauge_family) {
  return "Integral over time of " + std::string(gauge_family) +
         " (value x seconds, held from each report of the rank to the next); rate() over a window is its "
         "exact time-weighted mean.";
}

std::string window_help(std::string_view gauge_family, bool largest, std::uint64_t window_ns) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(window_ns) / 1e9);
  return std::string(largest ? "Largest" : "Smallest") + " value of " + std::string(gauge_family) +
         " over the trailing " + seconds + " s, from every report of the rank.";
}

void GaugeTrack::start(std::uint64_t timestamp_ns, double value, std::uint64_t peak_window_ns) {
  has_value_ = true;
  value_ = value;
  until_ns_ = timestamp_ns;
  if (peak_window_ns == 0) return;
  Bucket& b = bucket_at(timestamp_ns, peak_window_ns);
  b.take(value);
  value_bucket_ = b.index;
}

std::uint64_t GaugeTrack::window_bucket_ns(std::uint64_t window_ns) {
  return std::max<std::uint64_t>(window_ns / kWindowBuckets, 1);
}

void GaugeTrack::locate_bucket(std::uint64_t timestamp_ns, std::uint64_t peak_window_ns) {
  const std::uint64_t width = window_bucket_ns(peak_window_ns);
  const std::uint64_t index = timestamp_ns / width;
  cached_start_ns_ = index * width;
  cached_width_ns_ = width;
  cached_window_ns_ = peak_window_ns;
  cached_slot_ = static_cast<std::size_t>(index % buckets_.size());
  Bucket& b = buckets_[cached_slot_];
  // A slot still holding an older bucket starts over; each bucket starts empty (+/-inf), so the first
  // value taken sets both extrema.
  if (b.index != index) b = Bucket{index, -HUGE_VAL, HUGE_VAL};
}

bool GaugeTrack::window_extrema(std::uint64_t now_ns, std::uint64_t window_ns, double& largest,
                                double& smallest) const {
  if (!has_value_ || window_ns == 0) return false;
  const std::uint64_t cutoff = now_ns > window_ns ? now_ns - window_ns : 0;
  // The last value held until the writer's last sign of life; a writer silent for a whole window (dead,
  // or stalled) has nothing in it.
  if (until_ns_ < cutoff) return false;
  const std::uint64_t width = window_bucket_ns(window_ns);
  const std::uint64_t first = cutoff / width;
  const std::uint64_t last = now_ns / width;
  largest = value_;
  smallest = value_;
  for (const Bucket& b : buckets_) {
    if (b.index == kNoBucket || b.index < first || b.index > last) continue;
    largest = std::max(largest, b.largest);
    smallest = std::min(smallest, b.smallest);
  }
  return true;
}

void GaugeTrack::restore(double integral, double value, std::uint64_t until_ns) {
  if (!std::isfinite(integral) || integral < 0 || !std::isfinite(value)) return;
  integral_ = integral;
  value_ = value;
  until_ns_ = until_ns;
  has_value_ = true;
  buckets_ = {};
  value_bucket_ = kNoBucket;
  cached_width_ns_ = 0;
}

}  // namespace rankstat
