#include "self_metrics.hpp"

#include <string>

#include "aggregation.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/schema.hpp"

namespace rankstat {

SelfMetrics::SelfMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  BuildGauge()
      .Name("rankstat_build_info")
      .Help("rankstatd build: version and the shared-memory layout it reads.")
      .Register(*registry_)
      .Add({{"version", RANKSTAT_VERSION},
            {"layout", std::to_string(shm::kLayoutMajor) + "." + std::to_string(shm::kLayoutMinor)}})
      .Set(1);
  scrapes_ = &BuildCounter()
                  .Name("rankstat_scrapes_total")
                  .Help("Metrics scrapes served.")
                  .Register(*registry_)
                  .Add({});
  scrape_seconds_ = &BuildHistogram()
                         .Name("rankstat_scrape_duration_seconds")
                         .Help("Time to build and serialize one metrics response.")
                         .Register(*registry_)
                         .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                                          0.025, 0.05, 0.1, 0.25, 0.5, 1});
  last_body_bytes_ = &BuildGauge()
                          .Name("rankstat_scrape_response_bytes")
                          .Help("Uncompressed size of the last metrics response.")
                          .Register(*registry_)
                          .Add({});
  conflicts_ = &BuildGauge()
                    .Name("rankstat_scrape_family_conflicts")
                    .Help("Samples the last scrape skipped because ranks disagreed on a family's buckets.")
                    .Register(*registry_)
                    .Add({});
  collisions_ =
      &BuildGauge()
           .Name("rankstat_scrape_instance_collisions")
           .Help("Samples the last scrape skipped because two engine instances had the same labels.")
           .Register(*registry_)
           .Add({});
  unexposable_ = &BuildGauge()
                      .Name("rankstat_scrape_unexposable_samples")
                      .Help(
                          "Samples the last scrape skipped because their labels cannot be written correctly "
                          "(invalid UTF-8, a reserved or repeated label name).")
                      .Register(*registry_)
                      .Add({});
  shadowed_ = &BuildGauge()
                   .Name("rankstat_scrape_shadowed_constant_labels")
                   .Help(
                       "Series of the last scrape that carry their own label named like a constant label "
                       "(--label.NAME): they keep their own value and go without the constant one.")
                   .Register(*registry_)
                   .Add({});
  poll_interval_ = &BuildGauge()
                        .Name("rankstat_poll_interval_seconds")
                        .Help(
                            "Current delay between two timed drains of the rings; paced by how fast they "
                            "fill, between --shm.poll-interval and --shm.poll-interval-max.")
                        .Register(*registry_)
                        .Add({});
  auto& reloads = BuildCounter()
                      .Name("rankstat_config_reloads_total")
                      .Help("Configuration reloads on SIGHUP, by result.")
                      .Register(*registry_);
  reloads_ok_ = &reloads.Add({{"result", "success"}});
  reloads_failed_ = &reloads.Add({{"result", "failure"}});
}

void SelfMetrics::observe_scrape(double seconds, std::size_t body_bytes) {
  scrapes_->Increment();
  scrape_seconds_->Observe(seconds);
  last_body_bytes_->Set(static_cast<double>(body_bytes));
}

namespace {

prometheus::MetricFamily make_family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void add_sample(prometheus::MetricFamily& f, Labels labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

}  // namespace

std::vector<prometheus::MetricFamily> SelfMetrics::collect(const SegmentRegistry& registry,
                                                           const HttpCounters& http, std::uint64_t now_ns) {
  const RegistryCounters& c = registry.counters();
  std::vector<prometheus::MetricFamily> out = registry_->Collect();

  using prometheus::MetricType;
  auto rejected =
      make_family("rankstat_segments_rejected_total", "Segments refused, by reason.", MetricType::Counter);
  for (int i = 1; i < shm::kRejectReasonCount; ++i) {
    const auto reason = static_cast<shm::RejectReason>(i);
    if (reason == shm::RejectReason::kNotReady) continue;
    add_sample(rejected, {{"reason", std::string(shm::reject_reason_name(reason))}},
               static_cast<double>(c.rejected_by_reason[static_cast<std::size_t>(i)]));
  }
  add_sample(rejected, {{"reason", "schema_conflict"}}, static_cast<double>(c.schema_conflicts));
  add_sample(rejected, {{"reason", "not_regular_file"}}, static_cast<double>(c.rejected_not_regular));
  add_sample(rejected, {{"reason", "world_writable"}}, static_cast<double>(c.rejected_world_writable));
  add_sample(rejected, {{"reason", "unexpected_owner"}}, static_cast<double>(c.rejected_unexpected_owner));
  add_sample(rejected, {{"reason", "hard_link"}}, static_cast<double>(c.rejected_hard_link));
  add_sample(rejected, {{"reason", "instance_mismatch"}}, static_cast<double>(c.rejected_instance_mismatch));
  // Segment-side families of issue 12 (fd pressure, trust re-checks, limits); pushed after the fixed ones.
  std::vector<prometheus::MetricFamily> segment_side;
  auto counter = [&](const char* name, const char* help, std::uint64_t value) {
    auto f = make_family(name, help, MetricType::Counter);
    add_sample(f, {}, static_cast<double>(value));
    segment_side.push_back(std::move(f));
  };
  counter("rankstat_records_drained_total",
          "Records drained from all rank rings, including the last drain of a rank that died or closed.",
          c.records_drained);
  counter("rankstat_segments_dropped_untrusted_total",
          "Segment generations dropped from the exposition because their file's mode or owner changed after "
          "they were opened (re-checked on every scan).",
          c.dropped_untrusted);
  counter("rankstat_fd_exhaustion_total",
          "EMFILE/ENFILE met by a liveness check, segment open or directory listing (never a verdict on a "
          "rank: it keeps its state, the open is retried).",
          c.fd_exhaustion);
  counter("rankstat_liveness_checks_unknown_total",
          "Liveness checks that could not tell whether the writer lives (the rank kept its previous state).",
          c.liveness_unknown);
  counter("rankstat_segment_open_retries_total",
          "Segment opens that failed for lack of descriptors or memory and are retried at the next scan.",
          c.open_retries);
  counter("rankstat_series_over_limit_total",
          "Series left out because a segment declared more than --shm.max-series-per-segment.",
          c.series_over_limit);
  counter(
      "rankstat_series_invalid_total",
      "Series descriptors left out because they failed validation (kind, name, labels, ranges or bounds).",
      c.series_invalid);
  counter("rankstat_state_entries_dropped_total",
          "Entries of the --state.dir state file dropped when loaded because they were invalid (never "
          "served).",
          registry.retired().invalid_entries());
  auto quarantined =
      make_family("rankstat_segments_quarantined_total",
                  "Segment generations whose memory or ring is no longer read (last good values kept), "
                  "by reason.",
                  MetricType::Counter);
  const auto add_fault = [&](SegmentFault fault, std::uint64_t count) {
    add_sample(quarantined, {{"reason", std::string(segment_fault_name(fault))}}, static_cast<double>(count));
  };
  add_fault(SegmentFault::kRingIndex, c.quarantined_ring_index);
  add_fault(SegmentFault::kRingRecord, c.quarantined_ring_record);
  add_fault(SegmentFault::kTruncated, c.quarantined_truncated);
  add_fault(SegmentFault::kBusError, c.quarantined_bus_error);
  auto suppressed =
      make_family("rankstat_log_messages_suppressed_total",
                  "Log lines about bad segments dropped by the rate limit.", MetricType::Counter);
  add_sample(suppressed, {}, static_cast<double>(c.log_lines_suppressed));
  auto lifecycle =
      make_family("rankstat_generation_events_total",
                  "Segment generation lifecycle events: replaced by a restarted rank, folded (a dead or "
                  "closed one's totals moved into the retired totals), recovered (one that ended while no "
                  "daemon ran, from the last checkpoint), retired (let go after the grace period), "
                  "unlinked, abandoned temporaries swept, rings quarantined.",
                  MetricType::Counter);
  add_sample(lifecycle, {{"event", "replaced"}}, static_cast<double>(c.generations_replaced));
  add_sample(lifecycle, {{"event", "folded"}}, static_cast<double>(c.generations_folded));
  add_sample(lifecycle, {{"event", "recovered"}}, static_cast<double>(c.generations_recovered));
  add_sample(lifecycle, {{"event", "retired"}}, static_cast<double>(c.generations_retired));
  add_sample(lifecycle, {{"event", "unlinked"}}, static_cast<double>(c.segments_unlinked));
  add_sample(lifecycle, {{"event", "temporary_swept"}}, static_cast<double>(c.temporaries_swept));
  add_sample(lifecycle, {{"event", "ring_quarantined"}}, static_cast<double>(c.corrupt_rings));
  auto retired_series =
      make_family("rankstat_retired_series", "Counter and histogram series held for retired generations.",
                  MetricType::Gauge);
  add_sample(retired_series, {}, static_cast<double>(registry.retired().series()));
  auto heartbeat_only = make_family("rankstat_rank_heartbeat_only",
                                    "1 when the rank's process is not visible to the daemon (another pid "
                                    "namespace): liveness by heartbeat only.",
                                    MetricType::Gauge);
  auto http_requests =
      make_family("rankstat_http_requests_total", "HTTP requests answered.", MetricType::Counter);
  add_sample(http_requests, {}, static_cast<double>(http.requests_total));
  auto http_rejected =
      make_family("rankstat_http_connections_rejected_total",
                  "Connections refused because the connection limit was reached.", MetricType::Counter);
  add_sample(http_rejected, {}, static_cast<double>(http.connections_rejected_total));
  auto http_bad = make_family("rankstat_http_bad_requests_total", "Malformed or oversized HTTP requests.",
                              MetricType::Counter);
  add_sample(http_bad, {}, static_cast<double>(http.bad_requests_total));
  auto http_active =
      make_family("rankstat_http_active_connections", "Open HTTP connections.", MetricType::Gauge);
  add_sample(http_active, {}, static_cast<double>(http.active_connections));
  auto http_evicted = make_family("rankstat_http_connections_evicted_total",
                                  "Connections closed at the connection limit to admit a new one, by what "
                                  "they were doing.",
                                  MetricType::Counter);
  add_sample(http_evicted, {{"reason", "idle"}}, static_cast<double>(http.connections_evicted_idle_total));
  add_sample(http_evicted, {{"reason", "reading_headers"}},
             static_cast<double>(http.connections_evicted_reading_headers_total));
  add_sample(http_evicted, {{"reason", "reading_body"}},
             static_cast<double>(http.connections_evicted_reading_body_total));
  auto http_per_peer = make_family(
      "rankstat_http_connections_refused_per_peer_total",
      "Connections refused because their address held --web.max-connections-per-peer.", MetricType::Counter);
  add_sample(http_per_peer, {}, static_cast<double>(http.connections_refused_per_peer_total));
  auto http_header_timeouts = make_family("rankstat_http_header_timeouts_total",
                                          "Connections closed because request headers were incomplete at "
                                          "--web.header-timeout.",
                                          MetricType::Counter);
  add_sample(http_header_timeouts, {}, static_cast<double>(http.header_timeouts_total));
  auto http_tls_failures =
      make_family("rankstat_http_tls_handshake_failures_total",
                  "TLS handshakes that failed or did not finish within --web.header-timeout "
                  "(no or untrusted client certificate, protocol mismatch).",
                  MetricType::Counter);
  add_sample(http_tls_failures, {}, static_cast<double>(http.tls_handshake_failures_total));
  auto http_auth_failures =
      make_family("rankstat_http_auth_failures_total",
                  "Requests refused with 401 by basic_auth_users of --web.config.file, by "
                  "reason: missing (no usable credentials) or wrong (unknown user or "
                  "wrong password).",
                  MetricType::Counter);
  add_sample(http_auth_failures, {{"reason", "missing"}},
             static_cast<double>(http.auth_failures_missing_total));
  add_sample(http_auth_failures, {{"reason", "wrong"}}, static_cast<double>(http.auth_failures_wrong_total));
  auto http_rate_limited =
      make_family("rankstat_http_rate_limited_total",
                  "Requests refused with 429 by rate_limit of --web.config.file.", MetricType::Counter);
  add_sample(http_rate_limited, {}, static_cast<double>(http.rate_limited_total));

  auto segments =
      make_family("rankstat_segments", "Current segment generations by liveness state.", MetricType::Gauge);
  std::array<int, kRankStateCount> by_state{};
  auto up = make_family("rankstat_rank_up", "1 while the rank's process is alive (LIVE or STALLED), else 0.",
                        MetricType::Gauge);
  auto state = make_family("rankstat_rank_state",
                           "Liveness state of the rank's current generation (one-hot).", MetricType::Gauge);
  auto heartbeat = make_family("rankstat_rank_heartbeat_age_seconds",
                               "Seconds since the rank's last append or heartbeat.", MetricType::Gauge);
  auto records = make_family("rankstat_ring_records_total", "Records the rank appended to its ring.",
                             MetricType::Counter);
  auto dropped = make_family("rankstat_ring_dropped_records_total",
                             "Records the rank dropped because its ring was full.", MetricType::Counter);
  auto fill = make_family("rankstat_ring_fill_ratio", "Fraction of the ring holding undrained records.",
                          MetricType::Gauge);
  auto gaps = make_family("rankstat_ring_sequence_gaps_total",
                          "Records missing between two drained ones (should stay 0).", MetricType::Counter);
  auto info =
      make_family("rankstat_rank_info", "Identity of the rank's current generation.", MetricType::Gauge);
  auto malformed = make_family("rankstat_ring_malformed_records_total",
                               "Records of a known type too short or of an unknown version (skipped).",
                               MetricType::Counter);
  for (const RankSegment* s : registry.current()) {
    const shm::SegmentHeader& h = s->identity();
    const shm::ProducerState p = s->producer();
    Labels labels{{"instance_id", h.instance},
                  {"role", std::string(shm::role_name(static_cast<shm::Role>(h.role)))},
                  {"rank", h.rank_key}};
    ++by_state[static_cast<std::size_t>(s->state())];
    add_sample(up, labels, is_live(s->state()) ? 1 : 0);
    add_sample(heartbeat_only, labels, registry.heartbeat_only(*s) ? 1 : 0);
    for (int i = 0; i < kRankStateCount; ++i) {
      Labels with_state = labels;
      with_state.push_back({"state", std::string(rank_state_name(static_cast<RankState>(i)))});
      add_sample(state, with_state, static_cast<int>(s->state()) == i ? 1 : 0);
    }
    const double age = now_ns > p.heartbeat_ns ? static_cast<double>(now_ns - p.heartbeat_ns) / 1e9 : 0;
    add_sample(heartbeat, labels, age);
    // Carried over the rank's earlier generations: a writer restarting under the same name never
    // resets these counters.
    const RingTotals totals = registry.ring_totals(*s);
    add_sample(records, labels, static_cast<double>(totals.records));
    add_sample(dropped, labels, static_cast<double>(totals.dropped));
    add_sample(fill, labels, s->ring_fill_ratio());
    add_sample(gaps, labels, static_cast<double>(totals.sequence_gaps));
    add_sample(malformed, labels, static_cast<double>(totals.malformed));
    Labels info_labels = labels;
    info_labels.push_back({"pid", std::to_string(h.pid)});
    // The header's bytes are the rank's to choose: never let them make the exposition invalid.
    info_labels.push_back({"model_name", shm::is_valid_utf8(h.model_name) ? std::string(h.model_name)
                                                                          : std::string("<invalid UTF-8>")});
    info_labels.push_back({"layout", shm::layout_version_text(h)});
    add_sample(info, info_labels, 1);
  }
  for (int i = 0; i < kRankStateCount; ++i) {
    add_sample(segments, {{"state", std::string(rank_state_name(static_cast<RankState>(i)))}},
               by_state[static_cast<std::size_t>(i)]);
  }
  for (auto* f : {&rejected,
                  &quarantined,
                  &suppressed,
                  &lifecycle,
                  &retired_series,
                  &http_requests,
                  &http_rejected,
                  &http_bad,
                  &http_active,
                  &http_evicted,
                  &http_per_peer,
                  &http_header_timeouts,
                  &http_tls_failures,
                  &http_auth_failures,
                  &http_rate_limited,
                  &segments,
                  &up,
                  &heartbeat_only,
                  &state,
                  &heartbeat,
                  &records,
                  &dropped,
                  &fill,
                  &gaps,
                  &malformed,
                  &info}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }
  for (auto& f : segment_side) out.push_back(std::move(f));
  return out;
}

}  // namespace rankstat
