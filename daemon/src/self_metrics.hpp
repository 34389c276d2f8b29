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

#include "segment_registry.hpp"

namespace rankstat {

struct HttpCounters {
  std::uint64_t requests_total = 0;
  std::uint64_t connections_rejected_total = 0;
  std::uint64_t active_connections = 0;
  std::uint64_t bad_requests_total = 0;
  std::uint64_t connections_refused_per_peer_total = 0;
  std::uint64_t connections_evicted_idle_total = 0;
  std::uint64_t connections_evicted_reading_headers_total = 0;
  std::uint64_t connections_evicted_reading_body_total = 0;
  std::uint64_t header_timeouts_total = 0;
  std::uint64_t tls_handshake_failures_total = 0;
  // Requests refused with 401 by the web config's basic_auth_users: without (usable) credentials, and
  // with an unknown user or a wrong password.
  std::uint64_t auth_failures_missing_total = 0;
  std::uint64_t auth_failures_wrong_total = 0;
  std::uint64_t rate_limited_total = 0;  // refused with 429 by the web config's rate_limit
};

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
