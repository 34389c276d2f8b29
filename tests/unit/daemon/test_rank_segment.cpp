// RankSegment (daemon/src/rank_segment.hpp) on real segments written by the client library: what a drain
// makes of each record type, what the cumulative block gives for every series kind and gauge mode, and
// how the gauge modes come out of the aggregation when one of two real ranks has exited.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_collect.hpp"
#include "rank_segment.hpp"
#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "small_segment.hpp"
#include "testkit.hpp"

using rankstat::RankSegment;
using rankstat::Reporter;
using rankstat::Status;
using rankstat::testkit::TempDir;
namespace shm = rankstat::shm;

namespace {

// The daemon's view of `writer`'s segment, opened as the registry opens it (consumer, read-write).
std::unique_ptr<RankSegment> attach(const Reporter& writer) {
  shm::OpenedSegment opened = shm::open_segment(writer.path(), /*consumer=*/true);
  INFO(opened.message);
  REQUIRE(opened.reason == shm::RejectReason::kNone);
  const std::string name = writer.path().substr(writer.path().rfind('/') + 1);
  return std::make_unique<RankSegment>(name, writer.path(), std::move(opened), shm::monotonic_ns());
}

void open_writer(Reporter& writer, const TempDir& dir, int dp_rank = 0, std::uint64_t ring_bytes = 0) {
  auto options = rankstat::testkit::small_segment_options(dir, "seg", dp_rank);
  if (ring_bytes != 0) options.geometry.ring_bytes = ring_bytes;
  REQUIRE(writer.open(options) == Status::kOk);
}

std::uint32_t series_with_mode(Reporter& writer, std::string_view family, shm::GaugeMode mode) {
  Reporter::SeriesSpec spec;
  spec.kind = shm::SeriesKind::kGauge;
  spec.mode = mode;
  spec.family = family;
  spec.flags = shm::kSeriesWithoutIdentityLabels;
  std::uint32_t id = 0;
  REQUIRE(writer.register_series(spec, id) == Status::kOk);
  return id;
}

const rankstat::SeriesState& series_named(const RankSegment& segment, const std::string& family) {
  const auto& all = segment.series();
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const auto& s) { return s.info.family == family; });
  REQUIRE(it != all.end());
  return *it;
}

}  // namespace

TEST_CASE("a drained scheduler snapshot gives its fields, its priority counts and its sequence",
          "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  open_writer(writer, dir);
  auto segment = attach(writer);
  CHECK_FALSE(segment->scheduler().present);

  shm::SchedulerSnapshot snapshot{};
  snapshot.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kDecode);
  snapshot.num_running_reqs = 7;
  snapshot.num_queue_reqs = 3;
  snapshot.gen_throughput = 1234.5;
  const std::array<shm::PriorityCount, 2> priorities{{
      {5, static_cast<std::uint8_t>(shm::QueueId::kRunning), 0, 0, 4},
      {0, static_cast<std::uint8_t>(shm::QueueId::kWaiting), shm::kPriorityIsNone, 0, 3},
  }};
  REQUIRE(writer.report_scheduler(snapshot, priorities) == Status::kOk);
  REQUIRE(segment->drain(shm::monotonic_ns()));

  const auto& view = segment->scheduler();
  REQUIRE(view.present);
  CHECK(view.fixed.num_running_reqs == 7);
  CHECK(view.fixed.num_queue_reqs == 3);
  CHECK(view.fixed.gen_throughput == 1234.5);
  REQUIRE(view.priorities.size() == 2);
  CHECK(view.priorities[0].count == 4);
  CHECK(view.priorities[1].flags == shm::kPriorityIsNone);
  CHECK(segment->seen_priorities().size() == 2);
  CHECK(segment->drained().records == 1);
  CHECK(segment->drained().malformed == 0);
  const std::uint64_t first_sequence = view.sequence;

  // A later snapshot replaces the fields; a priority once seen stays seen (SGLang exports it as 0).
  snapshot.num_queue_reqs = 9;
  REQUIRE(writer.report_scheduler(snapshot) == Status::kOk);
  REQUIRE(segment->drain(shm::monotonic_ns()));
  CHECK(segment->scheduler().fixed.num_queue_reqs == 9);
  CHECK(segment->scheduler().priorities.empty());
  CHECK(segment->seen_priorities().size() == 2);
  CHECK(segment->scheduler().sequence > first_sequence);
  CHECK(segment->drained().records == 2);
  CHECK(segment->drained().sequence_gaps == 0);
}

TEST_CASE("every gauge update record is drained and counted, and the cumulative block holds the last value",
          "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  open_writer(writer, dir);
  const std::uint32_t gauge = series_with_mode(writer, "engine:queue", shm::GaugeMode::kMostRecent);
  auto segment = attach(writer);
  for (const double v : {1.0, 5.0, 2.0}) REQUIRE(writer.gauge_set(gauge, v) == Status::kOk);
  REQUIRE(segment->drain(shm::monotonic_ns()));
  CHECK(segment->drained().gauge_updates == 3);
  CHECK(segment->drained().records == 3);
  segment->refresh_cumulative();
  const auto& series = series_named(*segment, "engine:queue");
  CHECK(series.value.value == 2.0);
  CHECK(series.value.set_ns != 0);
  CHECK(series.value.consistent);
}

TEST_CASE("records of an unknown type are skipped and short or version-0 records are counted as malformed",
          "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  open_writer(writer, dir);
  auto segment = attach(writer);
  const std::array<std::uint8_t, 24> bytes{};
  // A record type this build does not know (a newer writer's): skipped, not an error.
  REQUIRE(writer.append_record(static_cast<shm::RecordType>(77), 1, bytes, {}) == Status::kOk);
  // A snapshot shorter than the fixed part, and a gauge update of version 0.
  REQUIRE(writer.append_record(shm::RecordType::kSchedulerSnapshot, 1, bytes, {}) == Status::kOk);
  REQUIRE(writer.append_record(shm::RecordType::kSeriesUpdate, 0, bytes, {}) == Status::kOk);
  REQUIRE(segment->drain(shm::monotonic_ns()));
  CHECK(segment->drained().records == 3);
  CHECK(segment->drained().malformed == 2);
  CHECK(segment->drained().gauge_updates == 0);
  CHECK_FALSE(segment->scheduler().present);
  CHECK_FALSE(segment->ring_corrupt());
  CHECK(segment->ring_fault() == rankstat::SegmentFault::kNone);
}

TEST_CASE("a ring that wraps many times is drained record by record without gaps", "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  open_writer(writer, dir);  // a 16 KiB ring: a few dozen snapshots fill it
  auto segment = attach(writer);
  shm::SchedulerSnapshot snapshot{};
  for (int i = 1; i <= 500; ++i) {
    snapshot.num_running_reqs = i;
    REQUIRE(writer.report_scheduler(snapshot) == Status::kOk);
    if (i % 7 == 0) REQUIRE(segment->drain(shm::monotonic_ns()));
  }
  REQUIRE(segment->drain(shm::monotonic_ns()));
  CHECK(segment->drained().records == 500);
  CHECK(segment->drained().sequence_gaps == 0);
  CHECK(segment->scheduler().fixed.num_running_reqs == 500);
  CHECK(writer.dropped_records() == 0);
}

TEST_CASE("a full ring's drops are noticed by the next drain only", "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  open_writer(writer, dir);
  auto segment = attach(writer);
  shm::SchedulerSnapshot snapshot{};
  Status status = Status::kOk;
  for (int i = 0; i < 1000 && status == Status::kOk; ++i) status = writer.report_scheduler(snapshot);
  REQUIRE(status == Status::kRingFull);
  REQUIRE(segment->drain(shm::monotonic_ns()));
  CHECK(segment->drained().dropped_before_last);
  CHECK(segment->drained().last_fill > 0.5);
  REQUIRE(segment->drain(shm::monotonic_ns()));
  CHECK_FALSE(segment->drained().dropped_before_last);
  CHECK(segment->producer().dropped_records == 1);
}

TEST_CASE("a daemon attaching after another drained the ring still sees the newest snapshot",
          "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  // The newest record is only read back while no write in flight can reach it: two of the largest
  // records must fit behind it, which a 16 KiB ring never allows.
  open_writer(writer, dir, 0, 64 * 1024);
  shm::SchedulerSnapshot snapshot{};
  snapshot.num_queue_reqs = 42;
  REQUIRE(writer.report_scheduler(snapshot) == Status::kOk);
  {
    auto before_restart = attach(writer);
    REQUIRE(before_restart->drain(shm::monotonic_ns()));
    REQUIRE(before_restart->scheduler().present);
  }
  auto after_restart = attach(writer);
  REQUIRE(after_restart->scheduler().present);
  CHECK(after_restart->scheduler().fixed.num_queue_reqs == 42);
  REQUIRE(after_restart->drain(shm::monotonic_ns()));
  CHECK(after_restart->drained().records == 0);  // recovered by peeking, not drained twice
}

TEST_CASE("counters, histograms and summaries are read from the cumulative block with their totals",
          "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  open_writer(writer, dir);
  std::uint32_t counter = 0;
  std::uint32_t histogram = 0;
  std::uint32_t summary = 0;
  REQUIRE(writer.register_counter("engine:requests", {}, counter) == Status::kOk);
  const std::array<double, 2> bounds{1.0, 2.0};
  REQUIRE(writer.register_histogram("engine:latency_seconds", {}, bounds, histogram) == Status::kOk);
  Reporter::SeriesSpec spec;
  spec.kind = shm::SeriesKind::kSummary;
  spec.family = "engine:size_bytes";
  REQUIRE(writer.register_series(spec, summary) == Status::kOk);
  auto segment = attach(writer);

  REQUIRE(writer.counter_add(counter, 2.5) == Status::kOk);
  REQUIRE(writer.counter_add(counter, 2.5) == Status::kOk);
  for (const double v : {0.5, 1.5, 5.0}) REQUIRE(writer.histogram_observe(histogram, v) == Status::kOk);
  REQUIRE(writer.histogram_observe(summary, 100) == Status::kOk);
  REQUIRE(writer.histogram_observe(summary, 300) == Status::kOk);
  segment->refresh_cumulative();

  const auto& c = series_named(*segment, "engine:requests");
  CHECK(c.info.kind == shm::SeriesKind::kCounter);
  CHECK(c.value.value == 5.0);
  const auto& h = series_named(*segment, "engine:latency_seconds");
  CHECK(h.info.kind == shm::SeriesKind::kHistogram);
  CHECK(h.info.bounds == std::vector<double>{1.0, 2.0});
  CHECK(h.value.counts == std::vector<std::uint64_t>{1, 1, 1});  // per bucket, +Inf last
  CHECK(h.value.sum == 7.0);
  const auto& s = series_named(*segment, "engine:size_bytes");
  CHECK(s.info.kind == shm::SeriesKind::kSummary);
  CHECK(s.value.counts == std::vector<std::uint64_t>{2});
  CHECK(s.value.sum == 400.0);

  // Values only grow while the generation lives; a later refresh reads the new totals.
  REQUIRE(writer.counter_add(counter, 1) == Status::kOk);
  segment->refresh_cumulative();
  CHECK(series_named(*segment, "engine:requests").value.value == 6.0);
}

TEST_CASE("each gauge carries the mode its engine declared, and a gauge never set has no value time",
          "[rank_segment]") {
  TempDir dir;
  Reporter writer;
  open_writer(writer, dir);
  std::map<std::string, shm::GaugeMode> declared;
  for (std::uint8_t m = 0; m < shm::kGaugeModeCount; ++m) {
    const auto mode = static_cast<shm::GaugeMode>(m);
    const std::string family = "engine:gauge_" + std::string(shm::gauge_mode_name(mode));
    const std::uint32_t id = series_with_mode(writer, family, mode);
    if (m % 2 == 0) REQUIRE(writer.gauge_set(id, m) == Status::kOk);
    declared[family] = mode;
  }
  auto segment = attach(writer);
  segment->refresh_cumulative();
  REQUIRE(segment->series().size() == shm::kGaugeModeCount);
  for (const auto& [family, mode] : declared) {
    INFO(family);
    const auto& series = series_named(*segment, family);
    CHECK(series.info.kind == shm::SeriesKind::kGauge);
    CHECK(series.info.gauge_mode == mode);
    const auto m = static_cast<std::uint8_t>(mode);
    if (m % 2 == 0) {
      CHECK(series.value.set_ns != 0);
      CHECK(series.value.value == m);
    } else {
      CHECK(series.value.set_ns == 0);
    }
  }
}

namespace {

// The value of `family`'s single series in `families`, or -1 when it is absent.
double single_value(const std::vector<prometheus::MetricFamily>& families, const std::string& family) {
  for (const auto& f : families) {
    if (f.name != family) continue;
    if (f.metric.size() != 1) return -2;
    return f.type == prometheus::MetricType::Counter ? f.metric[0].counter.value : f.metric[0].gauge.value;
  }
  return -1;
}

}  // namespace

TEST_CASE("the gauge modes of two real ranks aggregate as declared once one of them has exited",
          "[rank_segment]") {
  TempDir dir;
  Reporter live;
  Reporter exited;
  open_writer(live, dir, 0);
  open_writer(exited, dir, 1);
  const std::vector<std::pair<std::string, shm::GaugeMode>> modes{
      {"engine:g_sum", shm::GaugeMode::kSum},
      {"engine:g_livesum", shm::GaugeMode::kLiveSum},
      {"engine:g_max", shm::GaugeMode::kMax},
      {"engine:g_livemax", shm::GaugeMode::kLiveMax},
      {"engine:g_min", shm::GaugeMode::kMin},
      {"engine:g_livemin", shm::GaugeMode::kLiveMin},
      {"engine:g_mostrecent", shm::GaugeMode::kMostRecent},
      {"engine:g_livemostrecent", shm::GaugeMode::kLiveMostRecent},
  };
  // The live rank sets 10 everywhere first; the rank that then exits sets 100 later (so it is the most
  // recent), then closes.
  for (const auto& [family, mode] : modes) {
    REQUIRE(live.gauge_set(series_with_mode(live, family, mode), 10) == Status::kOk);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (const auto& [family, mode] : modes) {
    REQUIRE(exited.gauge_set(series_with_mode(exited, family, mode), 100) == Status::kOk);
  }

  rankstat::RetiredTotals retired("");
  rankstat::RegistryOptions options;
  options.directory = dir.path();
  options.fd_budget = 1000;
  rankstat::SegmentRegistry registry(options, retired);
  REQUIRE(registry.scan(shm::monotonic_ns()) == 2);
  exited.close();
  registry.check_liveness(shm::monotonic_ns(), std::chrono::seconds(30));
  const auto generations = registry.generations();
  REQUIRE(generations.size() == 2);
  const auto states = std::count_if(generations.begin(), generations.end(), [](const RankSegment* s) {
    return s->state() == rankstat::RankState::kClosed;
  });
  REQUIRE(states == 1);
  registry.drain_all(shm::monotonic_ns());
  registry.refresh_cumulative();
  rankstat::FamilySet set;
  rankstat::CollectOptions collect;
  collect.now_ns = shm::monotonic_ns();
  collect.dead_grace_ns = 60'000'000'000ull;
  rankstat::collect_engine_metrics(registry.generations(), collect, set);
  const auto families = set.finish();

  CHECK(single_value(families, "engine:g_sum") == 110);
  CHECK(single_value(families, "engine:g_livesum") == 10);
  CHECK(single_value(families, "engine:g_max") == 100);
  CHECK(single_value(families, "engine:g_livemax") == 10);
  CHECK(single_value(families, "engine:g_min") == 10);
  CHECK(single_value(families, "engine:g_livemin") == 10);
  CHECK(single_value(families, "engine:g_mostrecent") == 100);
  CHECK(single_value(families, "engine:g_livemostrecent") == 10);
}
