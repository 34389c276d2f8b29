// rankstatd's metrics about itself (rankstat_*): scrapes, drains, rejected segments, and per-rank ring
// health. Process-wide counters live in a prometheus-cpp Registry; per-rank families are rebuilt from
// the registry of segments at each scrape. Used only from the io thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "http/counters.hpp"
#include "segment_registry.hpp"

namespace rankstat {

// Every HTTP counter, the server's and the request handler's: one list in http/counters.hpp.
using HttpCounters = http::Counters;

class SelfMetrics {
 public:
  SelfMetrics();

  void observe_scrape(double seconds, std::size_t body_bytes);
  // Samples the last scrape dropped: family type/bucket conflicts and cross-instance collisions. Gauges,
  // since every scrape recomputes them from scratch.
  void set_scrape_drops(std::uint64_t conflicts, std::uint64_t collisions) {
    conflicts_->Set(static_cast<double>(conflicts));
    collisions_->Set(static_cast<double>(collisions));
  }
  // Samples the last scrape dropped because their labels cannot be written correctly
  // (FamilySet::unexposable()). A gauge, like the drops above.
  void set_unexposable_drops(std::uint64_t samples) { unexposable_->Set(static_cast<double>(samples)); }
  // Series of the last scrape whose own label replaced a constant label of the same name
  // (FamilySet::shadowed_constant_labels()).
  void set_shadowed_constant_labels(std::uint64_t series) { shadowed_->Set(static_cast<double>(series)); }
  void note_reload(bool ok) { (ok ? reloads_ok_ : reloads_failed_)->Increment(); }
  // The poll pacer's current delay between two timer drains (poll_pacer.hpp).
  void set_poll_interval(double seconds) { poll_interval_->Set(seconds); }

  // The self-metric families as of now, given the segments and the HTTP server's counters.
  std::vector<prometheus::MetricFamily> collect(const SegmentRegistry& registry, const HttpCounters& http,
                                                std::uint64_t now_ns);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* scrapes_ = nullptr;
  prometheus::Histogram* scrape_seconds_ = nullptr;
  prometheus::Gauge* last_body_bytes_ = nullptr;
  prometheus::Gauge* conflicts_ = nullptr;
  prometheus::Gauge* collisions_ = nullptr;
  prometheus::Gauge* unexposable_ = nullptr;
  prometheus::Gauge* shadowed_ = nullptr;
  prometheus::Counter* reloads_ok_ = nullptr;
  prometheus::Counter* reloads_failed_ = nullptr;
  prometheus::Gauge* poll_interval_ = nullptr;
};

}  // namespace rankstat
