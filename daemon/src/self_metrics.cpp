#include "self_metrics.hpp"

#include <string>

#include "family_set.hpp"
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

// The rankstat_http_* families: one sample per row of http/counters.hpp, in its order.
std::vector<prometheus::MetricFamily> http_families(const HttpCounters& http) {
  std::vector<prometheus::MetricFamily> families;
  for (const http::CounterInfo& row : http::kCounterInfo) {
    if (families.empty() || families.back().name != row.family) {
      const auto type = row.type == http::CounterType::kGauge ? prometheus::MetricType::Gauge
                                                              : prometheus::MetricType::Counter;
      families.push_back(make_family(std::string(row.family), std::string(row.help), type));
    }
    Labels labels;
    if (!row.label_name.empty())
      labels.push_back({std::string(row.label_name), std::string(row.label_value)});
    add_sample(families.back(), std::move(labels), static_cast<double>(http.*row.member));
  }
  return families;
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
  for (std::size_t i = 0; i < shm::kTrustRefusalCount; ++i) {
    add_sample(rejected, {{"reason", std::string(shm::kTrustRefusalNames[i])}},
               static_cast<double>(c.rejected_untrusted[i]));
  }
  add_sample(rejected, {{"reason", "hard_link"}}, static_cast<double>(c.rejected_hard_link));
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
  counter("rankstat_family_conflicts_total",
          "Families declared with another type, gauge mode or buckets than the winning declaration (the "
          "newest live one) by a segment generation or the retired totals; each (family, generation) "
          "counted and logged once. Only that family's series of the losing side are left out.",
          c.family_conflicts);
  {
    auto f = make_family("rankstat_family_conflict_series",
                         "Series left out now because their family's declaration lost to another "
                         "generation's (rankstat_family_conflicts_total).",
                         MetricType::Gauge);
    add_sample(f, {}, static_cast<double>(c.family_conflict_series));
    segment_side.push_back(std::move(f));
  }
  counter("rankstat_state_entries_dropped_total",
          "Entries of the --state.dir state file dropped when loaded because they were invalid (never "
          "served).",
          registry.retired().invalid_entries());
  auto refused = make_family("rankstat_series_registrations_refused_total",
                             "Series registrations writers refused, as their segments count them, by reason: "
                             "no_space (the shm directory had no room for the series' pages), full (a "
                             "segment capacity used up), invalid (a name, label or bounds). The writer logs "
                             "each with its family's name; the series' updates are dropped.",
                             MetricType::Counter);
  add_sample(refused, {{"reason", "no_space"}}, static_cast<double>(c.registrations_refused_no_space));
  add_sample(refused, {{"reason", "full"}}, static_cast<double>(c.registrations_refused_full));
  add_sample(refused, {{"reason", "invalid"}}, static_cast<double>(c.registrations_refused_other));
  segment_side.push_back(std::move(refused));
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
  std::vector<prometheus::MetricFamily> http_side = http_families(http);

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
  for (auto* f : {&rejected, &quarantined, &suppressed, &lifecycle, &retired_series}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }
  for (auto& f : http_side) out.push_back(std::move(f));
  for (auto* f : {&segments, &up, &heartbeat_only, &state, &heartbeat, &records, &dropped, &fill, &gaps,
                  &malformed, &info}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }
  for (auto& f : segment_side) out.push_back(std::move(f));
  return out;
}

}  // namespace rankstat
