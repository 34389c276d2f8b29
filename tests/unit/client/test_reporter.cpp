// rankstat::Reporter against the real segment files, read back the way rankstatd reads them.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "testkit.hpp"

namespace {

namespace shm = rankstat::shm;
using rankstat::Reporter;
using rankstat::ReporterOptions;
using rankstat::Status;
using rankstat::testkit::TempDir;

ReporterOptions options_in(const TempDir& dir, std::uint64_t ring_bytes = 64 * 1024) {
  ReporterOptions options;
  options.shm_dir = dir.path();
  options.identity.instance = "unit";
  options.identity.model_name = "m";
  options.geometry.ring_bytes = ring_bytes;
  options.geometry.series_capacity = 16;
  options.geometry.bounds_capacity = 64;
  options.geometry.values_capacity = 512;
  return options;
}

// The daemon's view of one segment: a validated mapping plus a consumer that publishes head.
class SegmentView {
 public:
  explicit SegmentView(const std::string& path) : opened_(shm::open_segment(path, true)) {
    INFO(opened_.message);
    REQUIRE(opened_.reason == shm::RejectReason::kNone);
    reader_ = std::make_unique<shm::RingReader>(opened_.file.header(), opened_.ring(),
                                                opened_.identity.ring_bytes, true);
  }

  shm::SegmentHeader& live() { return *opened_.file.header(); }
  const shm::OpenedSegment& opened() const { return opened_; }

  struct Record {
    shm::RecordHeader header;
    std::vector<std::uint8_t> payload;
  };
  std::vector<Record> drain() {
    std::vector<Record> out;
    const shm::DrainStats stats =
        reader_->drain([&](const shm::RecordHeader& h, std::span<const std::uint8_t> p) {
          out.push_back({h, std::vector<std::uint8_t>(p.begin(), p.end())});
        });
    CHECK(stats.status == shm::DrainStatus::kOk);
    return out;
  }

  shm::CumulativeReader cumulative() const {
    return shm::CumulativeReader(opened_.cumulative(), opened_.cumulative_geometry);
  }

 private:
  shm::OpenedSegment opened_;
  std::unique_ptr<shm::RingReader> reader_;
};

shm::SchedulerSnapshot sample_snapshot() {
  shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kDecode);
  s.groups = shm::kGroupSpeculative;
  s.num_running_reqs = 12;
  s.num_queue_reqs = 3;
  s.gen_throughput = 1234.5;
  s.token_usage = 0.75;
  s.spec_accept_length = 2.5;
  s.utilization = -1;
  s.routing_key_all_req_counts[10] = 77;
  return s;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (previous_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, previous_.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string previous_;
};

}  // namespace

TEST_CASE("A reporter creates its segment in the configured directory", "[reporter]") {
  TempDir dir;
  Reporter reporter;
  CHECK_FALSE(reporter.is_open());
  REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
  CHECK(reporter.is_open());
  CHECK(reporter.error_message().empty());
  CHECK(reporter.path() == dir.path() + "/rankstat.unit.scheduler.tp0-pp0-ep0");
  CHECK(dir.list() == std::vector<std::string>{"rankstat.unit.scheduler.tp0-pp0-ep0"});

  SegmentView view(reporter.path());
  CHECK(std::string(view.opened().identity.model_name) == "m");
  CHECK(view.opened().identity.ring_bytes == 64 * 1024);
  CHECK(view.opened().identity.max_record_bytes == shm::kSchedulerRecordMaxBytes);
  CHECK(view.opened().cumulative_geometry.series_capacity == 16);
}

TEST_CASE("The shm directory defaults to RANKSTAT_SHM_DIR, then /dev/shm", "[reporter]") {
  TempDir dir;
  {
    ScopedEnv env("RANKSTAT_SHM_DIR", dir.path());
    CHECK(rankstat::default_shm_dir() == dir.path());
    ReporterOptions options = options_in(dir);
    options.shm_dir.clear();
    Reporter reporter;
    REQUIRE(reporter.open(options) == Status::kOk);
    CHECK(reporter.path().rfind(dir.path() + "/", 0) == 0);
  }
  {
    ScopedEnv env("RANKSTAT_SHM_DIR", "");
    CHECK(rankstat::default_shm_dir() == "/dev/shm");
  }
}

TEST_CASE("The instance defaults to RANKSTAT_INSTANCE, then \"default\", for options that name none",
          "[reporter]") {
  TempDir dir;
  ReporterOptions options = options_in(dir);
  CHECK(ReporterOptions{}.identity.instance.empty());
  options.identity.instance.clear();
  {
    ScopedEnv env("RANKSTAT_INSTANCE", "fromenv");
    CHECK(rankstat::default_instance() == "fromenv");
    Reporter reporter;
    REQUIRE(reporter.open(options) == Status::kOk);
    CHECK(reporter.path() == dir.path() + "/rankstat.fromenv.scheduler.tp0-pp0-ep0");
    SegmentView view(reporter.path());
    CHECK(std::string(view.opened().identity.instance) == "fromenv");

    ReporterOptions given = options;
    given.identity.instance = "given";
    Reporter named;
    REQUIRE(named.open(given) == Status::kOk);
    CHECK(named.path() == dir.path() + "/rankstat.given.scheduler.tp0-pp0-ep0");
  }
  {
    ScopedEnv env("RANKSTAT_INSTANCE", "");
    CHECK(rankstat::default_instance() == "default");
    Reporter reporter;
    REQUIRE(reporter.open(options) == Status::kOk);
    CHECK(reporter.path() == dir.path() + "/rankstat.default.scheduler.tp0-pp0-ep0");
  }
  {
    ScopedEnv env("RANKSTAT_INSTANCE", "not.valid");
    Reporter reporter;
    CHECK(reporter.open(options) == Status::kInvalidArgument);
    CHECK_THAT(reporter.error_message(), Catch::Contains("not.valid"));
  }
}

TEST_CASE("report_scheduler round-trips the fixed fields and priority entries with priority_count patched",
          "[reporter]") {
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
  SegmentView view(reporter.path());

  shm::SchedulerSnapshot snapshot = sample_snapshot();
  snapshot.priority_count = 99;  // stale garbage from the caller: the record must say 3
  const shm::PriorityCount priorities[] = {
      {0, static_cast<std::uint8_t>(shm::QueueId::kRunning), 0, 0, 7},
      {5, static_cast<std::uint8_t>(shm::QueueId::kWaiting), 0, 0, 2},
      {0, static_cast<std::uint8_t>(shm::QueueId::kRunning), shm::kPriorityIsNone, 0, 5},
  };
  const std::uint64_t before = shm::coarse_monotonic_ns();  // writers stamp with the coarse clock
  REQUIRE(reporter.report_scheduler(snapshot, priorities) == Status::kOk);
  CHECK(snapshot.priority_count == 99);  // the caller's struct is untouched

  snapshot.priority_count = 0;
  REQUIRE(reporter.report_scheduler(snapshot) == Status::kOk);
  CHECK(reporter.records_written() == 2);

  const auto records = view.drain();
  REQUIRE(records.size() == 2);
  const auto& first = records[0];
  CHECK(first.header.type == static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot));
  CHECK(first.header.type_version == shm::kSchedulerSnapshotVersion);
  CHECK(first.header.sequence == 0);
  CHECK(first.header.timestamp_ns >= before);
  CHECK(first.header.timestamp_ns <= shm::monotonic_ns());
  REQUIRE(first.payload.size() == sizeof(shm::SchedulerSnapshot) + sizeof priorities);

  shm::SchedulerSnapshot fixed{};
  std::memcpy(&fixed, first.payload.data(), sizeof fixed);
  shm::SchedulerSnapshot expected = sample_snapshot();
  expected.priority_count = 3;
  CHECK(std::memcmp(&fixed, &expected, sizeof fixed) == 0);
  CHECK(fixed.priority_count == 3);
  CHECK(fixed.num_running_reqs == 12);
  CHECK(fixed.gen_throughput == 1234.5);
  CHECK(fixed.routing_key_all_req_counts[10] == 77);

  shm::PriorityCount entries[3];
  std::memcpy(entries, first.payload.data() + sizeof fixed, sizeof entries);
  CHECK(std::memcmp(entries, priorities, sizeof entries) == 0);
  CHECK(entries[2].flags == shm::kPriorityIsNone);
  CHECK(entries[2].count == 5);

  const auto& second = records[1];
  CHECK(second.header.sequence == 1);
  REQUIRE(second.payload.size() == sizeof(shm::SchedulerSnapshot));
  std::memcpy(&fixed, second.payload.data(), sizeof fixed);
  CHECK(fixed.priority_count == 0);
  CHECK(shm::shared(view.live().heartbeat_ns).load() == second.header.timestamp_ns);
}

TEST_CASE("More priority entries than a record may carry is an invalid argument", "[reporter]") {
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
  std::vector<shm::PriorityCount> priorities(shm::kMaxPriorityCounts + 1);
  const shm::SchedulerSnapshot snapshot = sample_snapshot();
  CHECK(reporter.report_scheduler(snapshot, priorities) == Status::kInvalidArgument);
  priorities.pop_back();
  CHECK(reporter.report_scheduler(snapshot, priorities) == Status::kOk);  // exactly the maximum fits
  CHECK(reporter.records_written() == 1);
}

TEST_CASE("append_record carries any record type but refuses padding and oversize records", "[reporter]") {
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
  SegmentView view(reporter.path());
  const std::uint8_t head[] = {1, 2, 3};
  const std::uint8_t tail[] = {4, 5};
  CHECK(reporter.append_record(static_cast<shm::RecordType>(2), 7, head, tail) == Status::kOk);
  CHECK(reporter.append_record(shm::RecordType::kPadding, 1, head, {}) == Status::kInvalidArgument);
  std::vector<std::uint8_t> huge(shm::kSchedulerRecordMaxBytes);
  CHECK(reporter.append_record(static_cast<shm::RecordType>(2), 7, huge, {}) == Status::kOversize);
  CHECK(shm::shared(view.live().oversize_records).load() == 1);

  const auto records = view.drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].header.type == 2);
  CHECK(records[0].header.type_version == 7);
  CHECK(records[0].payload == std::vector<std::uint8_t>{1, 2, 3, 4, 5});
}

TEST_CASE("A full ring returns kRingFull and counts every dropped record", "[reporter]") {
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir, 4096)) == Status::kOk);
  const shm::SchedulerSnapshot snapshot = sample_snapshot();
  // 24 + 576 bytes = a 640-byte slot: six fit in 4 KiB, the seventh would need padding it has no room for.
  for (int i = 0; i < 6; ++i) REQUIRE(reporter.report_scheduler(snapshot) == Status::kOk);
  for (int i = 0; i < 10; ++i) CHECK(reporter.report_scheduler(snapshot) == Status::kRingFull);
  CHECK(reporter.dropped_records() == 10);
  CHECK(reporter.records_written() == 6);

  SegmentView view(reporter.path());
  CHECK(shm::shared(view.live().dropped_records).load() == 10);
  CHECK(view.drain().size() == 6);
  CHECK(reporter.report_scheduler(snapshot) == Status::kOk);
  CHECK(reporter.dropped_records() == 10);
}

TEST_CASE("Counters, gauges and histograms registered through a reporter reach the cumulative block",
          "[reporter]") {
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
  std::uint32_t counter = 0;
  std::uint32_t gauge = 0;
  std::uint32_t histogram = 0;
  const double bounds[] = {0.01, 0.1, 1};
  REQUIRE(reporter.register_counter("sglang:generation_tokens_total", {{"model_name", "m"}}, counter) ==
          Status::kOk);
  REQUIRE(reporter.register_gauge("sglang:cache_hit_rate", shm::GaugeMode::kMostRecent, {}, gauge) ==
          Status::kOk);
  REQUIRE(reporter.register_histogram("sglang:time_to_first_token_seconds", {}, bounds, histogram) ==
          Status::kOk);

  CHECK(reporter.counter_add(counter, 10) == Status::kOk);
  CHECK(reporter.counter_add(counter, 0.5) == Status::kOk);
  const std::uint64_t before = shm::monotonic_ns();  // gauge sets are stamped with the precise clock
  CHECK(reporter.gauge_set(gauge, 0.25) == Status::kOk);
  CHECK(reporter.histogram_observe(histogram, 0.05) == Status::kOk);
  CHECK(reporter.histogram_observe(histogram, 0.1) == Status::kOk);
  CHECK(reporter.histogram_observe_many(histogram, 2.0, 4, 9.0) == Status::kOk);

  SegmentView view(reporter.path());
  const shm::CumulativeReader reader = view.cumulative();
  REQUIRE(reader.published_series() == 3);
  shm::SeriesValue value;
  const auto counter_info = reader.read_descriptor(counter);
  REQUIRE(counter_info);
  CHECK(counter_info->family == "sglang:generation_tokens_total");
  reader.read_value(*counter_info, value);
  CHECK(value.value == 10.5);
  const auto gauge_info = reader.read_descriptor(gauge);
  REQUIRE(gauge_info);
  CHECK(gauge_info->gauge_mode == shm::GaugeMode::kMostRecent);
  reader.read_value(*gauge_info, value);
  CHECK(value.value == 0.25);
  CHECK(value.set_ns >= before);
  const auto histogram_info = reader.read_descriptor(histogram);
  REQUIRE(histogram_info);
  reader.read_value(*histogram_info, value);
  CHECK(value.counts == std::vector<std::uint64_t>{0, 2, 0, 4});
  CHECK(value.sum == Approx(0.05 + 0.1 + 9.0));
}

TEST_CASE(
    "Gauge sets a few microseconds apart get strictly increasing nanosecond stamps, the same in the "
    "cumulative block and the update record",
    "[reporter]") {
  // mostrecent orders two processes' sets by these stamps: a timer-tick clock (CLOCK_MONOTONIC_COARSE)
  // would give both sets of a pair microseconds apart one stamp, and the tie-break would pick a side.
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir, 1024 * 1024)) == Status::kOk);
  std::uint32_t gauge = 0;
  REQUIRE(reporter.register_gauge("engine:load", shm::GaugeMode::kMostRecent, {}, gauge) == Status::kOk);
  SegmentView view(reporter.path());
  const shm::CumulativeReader reader = view.cumulative();
  const auto info = reader.read_descriptor(gauge);
  REQUIRE(info);

  constexpr int kSets = 200;
  constexpr std::uint64_t kApartNs = 5'000;
  std::vector<std::uint64_t> stamps;
  for (int i = 0; i < kSets; ++i) {
    const std::uint64_t before = shm::monotonic_ns();
    REQUIRE(reporter.gauge_set(gauge, static_cast<double>(i)) == Status::kOk);
    shm::SeriesValue value;
    reader.read_value(*info, value);
    REQUIRE(value.value == static_cast<double>(i));
    CHECK(value.set_ns >= before);
    CHECK(value.set_ns <= shm::monotonic_ns());
    stamps.push_back(value.set_ns);
    // Busy-wait: a sleep lasts 50 µs or more (timer slack), and the point is sets only microseconds apart.
    while (shm::monotonic_ns() - before < kApartNs) {
    }
  }
  for (std::size_t i = 1; i < stamps.size(); ++i) {
    INFO("set " << i);
    CHECK(stamps[i] > stamps[i - 1]);
  }
  const auto records = view.drain();
  REQUIRE(records.size() == stamps.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(records[i].header.type == static_cast<std::uint16_t>(shm::RecordType::kSeriesUpdate));
    CHECK(records[i].header.timestamp_ns == stamps[i]);
  }
}

TEST_CASE("Updates with the wrong kind, an unknown id or a negative counter delta are rejected",
          "[reporter]") {
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
  std::uint32_t counter = 0;
  std::uint32_t gauge = 0;
  REQUIRE(reporter.register_counter("c_total", {}, counter) == Status::kOk);
  REQUIRE(reporter.register_gauge("g", shm::GaugeMode::kAll, {}, gauge) == Status::kOk);
  CHECK(reporter.gauge_set(counter, 1) == Status::kInvalidArgument);
  CHECK(reporter.counter_add(gauge, 1) == Status::kInvalidArgument);
  CHECK(reporter.histogram_observe(gauge, 1) == Status::kInvalidArgument);
  CHECK(reporter.counter_add(2, 1) == Status::kInvalidArgument);
  CHECK(reporter.counter_add(0xFFFFFFFFu, 1) == Status::kInvalidArgument);
  CHECK(reporter.counter_add(counter, -1) == Status::kInvalidArgument);

  SegmentView view(reporter.path());
  const shm::CumulativeReader reader = view.cumulative();
  shm::SeriesValue value;
  reader.read_value(*reader.read_descriptor(counter), value);
  CHECK(value.value == 0);
  // NaN is taken as prometheus_client takes it (NaN < 0 is false), and reset() brings the total back.
  CHECK(reporter.counter_add(counter, std::nan("")) == Status::kOk);
  reader.read_value(*reader.read_descriptor(counter), value);
  CHECK(std::isnan(value.value));
  CHECK(reporter.counter_reset(counter) == Status::kOk);
  CHECK(reporter.counter_reset(gauge) == Status::kInvalidArgument);
  reader.read_value(*reader.read_descriptor(counter), value);
  CHECK(value.value == 0);
  reader.read_value(*reader.read_descriptor(gauge), value);
  CHECK(value.set_ns == 0);
}

TEST_CASE("Registration failures map to kInvalidArgument and kRegistryFull", "[reporter]") {
  TempDir dir;
  ReporterOptions options = options_in(dir);
  options.geometry.series_capacity = 2;
  Reporter reporter;
  REQUIRE(reporter.open(options) == Status::kOk);
  std::uint32_t id = 0;
  CHECK(reporter.register_counter("bad\xff", {}, id) == Status::kInvalidArgument);  // not UTF-8
  CHECK(reporter.last_refusal().refusal == shm::SeriesRefusal::kFamilyName);
  CHECK(reporter.register_gauge("g", shm::GaugeMode::kAll, {{"__x", "v"}}, id) == Status::kInvalidArgument);
  CHECK(reporter.last_refusal().refusal == shm::SeriesRefusal::kLabelName);
  CHECK(reporter.last_refusal().label == 0);
  const double unsorted[] = {2, 1};
  CHECK(reporter.register_histogram("h", {}, unsorted, id) == Status::kInvalidArgument);
  CHECK(reporter.register_counter("a_total", {}, id) == Status::kOk);
  CHECK(reporter.register_counter("b_total", {}, id) == Status::kOk);
  CHECK(reporter.register_counter("c_total", {}, id) == Status::kRegistryFull);
  CHECK(id == 1);
}

TEST_CASE("A closed or never-opened reporter turns every call into kClosed", "[reporter]") {
  TempDir dir;
  Reporter reporter;
  SECTION("never opened") {}
  SECTION("closed after use") {
    REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
    reporter.close();
    CHECK_FALSE(reporter.is_open());
  }
  SECTION("failed to open") {
    ReporterOptions options = options_in(dir);
    options.geometry.ring_bytes = 1000;
    CHECK(reporter.open(options) == Status::kInvalidArgument);
  }
  std::uint32_t id = 0;
  const shm::SchedulerSnapshot snapshot = sample_snapshot();
  CHECK(reporter.report_scheduler(snapshot) == Status::kClosed);
  CHECK(reporter.append_record(static_cast<shm::RecordType>(2), 1, {}, {}) == Status::kClosed);
  CHECK(reporter.register_counter("c", {}, id) == Status::kClosed);
  CHECK(reporter.register_gauge("g", shm::GaugeMode::kAll, {}, id) == Status::kClosed);
  CHECK(reporter.register_histogram("h", {}, {}, id) == Status::kClosed);
  CHECK(reporter.counter_add(0, 1) == Status::kClosed);
  CHECK(reporter.gauge_set(0, 1) == Status::kClosed);
  CHECK(reporter.histogram_observe(0, 1) == Status::kClosed);
  CHECK(reporter.histogram_observe_many(0, 1, 2, 2) == Status::kClosed);
  reporter.heartbeat();
  reporter.close();
  CHECK_FALSE(reporter.is_open());
}

TEST_CASE("Closing marks the segment closed and unlinks it only when asked", "[reporter]") {
  TempDir dir;
  ReporterOptions options = options_in(dir);
  const bool unlink = GENERATE(false, true);
  options.unlink_on_close = unlink;
  Reporter reporter;
  REQUIRE(reporter.open(options) == Status::kOk);
  const std::string path = reporter.path();
  SegmentView view(path);
  REQUIRE(reporter.report_scheduler(sample_snapshot()) == Status::kOk);
  CHECK_FALSE(shm::read_producer_state(view.live()).closed);
  reporter.close();
  CHECK(shm::read_producer_state(view.live()).closed);
  CHECK(shm::read_producer_state(view.live()).records_written == 1);
  CHECK(reporter.records_written() == 1);  // the counts stay readable after close
  CHECK(dir.list().size() == (unlink ? 0u : 1u));
  reporter.close();  // idempotent
}

TEST_CASE("Heartbeat stamps the segment with the (coarse) monotonic clock", "[reporter]") {
  TempDir dir;
  Reporter reporter;
  REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
  SegmentView view(reporter.path());
  const std::uint64_t before = shm::coarse_monotonic_ns();  // writers stamp with the coarse clock
  reporter.heartbeat();
  const std::uint64_t stamped = shm::shared(view.live().heartbeat_ns).load();
  CHECK(stamped >= before);
  CHECK(stamped <= shm::monotonic_ns());
}

TEST_CASE("A moved reporter keeps writing into the same segment and the source is closed", "[reporter]") {
  TempDir dir;
  Reporter original;
  REQUIRE(original.open(options_in(dir)) == Status::kOk);
  std::uint32_t counter = 0;
  REQUIRE(original.register_counter("c_total", {}, counter) == Status::kOk);
  REQUIRE(original.report_scheduler(sample_snapshot()) == Status::kOk);
  const std::string path = original.path();
  SegmentView view(path);

  Reporter moved(std::move(original));
  CHECK_FALSE(original.is_open());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  CHECK(original.report_scheduler(sample_snapshot()) == Status::kClosed);
  CHECK(original.records_written() == 0);
  CHECK(moved.is_open());
  CHECK(moved.path() == path);
  CHECK(moved.records_written() == 1);
  CHECK(moved.report_scheduler(sample_snapshot()) == Status::kOk);
  CHECK(moved.counter_add(counter, 3) == Status::kOk);

  Reporter assigned;
  SECTION("into an empty reporter") {}
  SECTION("over an open reporter, which is closed first") {
    TempDir other_dir;
    REQUIRE(assigned.open(options_in(other_dir)) == Status::kOk);
    SegmentView other_view(assigned.path());
    assigned = std::move(moved);
    CHECK(shm::read_producer_state(other_view.live()).closed);
  }
  if (!assigned.is_open()) assigned = std::move(moved);
  CHECK_FALSE(moved.is_open());  // NOLINT(bugprone-use-after-move)
  CHECK(assigned.report_scheduler(sample_snapshot()) == Status::kOk);
  CHECK(assigned.counter_add(counter, 4) == Status::kOk);
  CHECK(assigned.records_written() == 3);

  CHECK(view.drain().size() == 3);
  const shm::CumulativeReader reader = view.cumulative();
  shm::SeriesValue value;
  reader.read_value(*reader.read_descriptor(counter), value);
  CHECK(value.value == 7);
  assigned.close();
  CHECK(shm::read_producer_state(view.live()).closed);
}

TEST_CASE("Open failures map to statuses and keep the message", "[reporter]") {
  TempDir dir;
  Reporter reporter;
  SECTION("a geometry the contract does not allow") {
    ReporterOptions options = options_in(dir);
    options.geometry.ring_bytes = 3000;
    CHECK(reporter.open(options) == Status::kInvalidArgument);
    CHECK_THAT(reporter.error_message(), Catch::Contains("power of two"));
  }
  SECTION("a cumulative block larger than the contract allows") {
    ReporterOptions options = options_in(dir);
    options.geometry.series_capacity = (1u << 20) + 1;
    CHECK(reporter.open(options) == Status::kInvalidArgument);
  }
  SECTION("an unknown role") {
    ReporterOptions options = options_in(dir);
    options.identity.role = static_cast<shm::Role>(42);
    CHECK(reporter.open(options) == Status::kInvalidArgument);
    CHECK_FALSE(reporter.error_message().empty());
  }
  SECTION("a directory that does not exist") {
    ReporterOptions options = options_in(dir);
    options.shm_dir = dir.path() + "/nope";
    CHECK(reporter.open(options) == Status::kIo);
    CHECK_THAT(reporter.error_message(), Catch::Contains(options.shm_dir));
  }
  SECTION("a directory without write permission") {
    if (::geteuid() == 0) {
      WARN("running as root: permission checks do not apply");
      return;
    }
    REQUIRE(::chmod(dir.path().c_str(), 0500) == 0);
    CHECK(reporter.open(options_in(dir)) == Status::kPermission);
    ::chmod(dir.path().c_str(), 0700);
  }
  CHECK_FALSE(reporter.is_open());
  CHECK(reporter.path().empty());
  CHECK(dir.list().empty());

  SECTION("a later successful open clears the message") {
    REQUIRE(reporter.open(options_in(dir)) == Status::kOk);
    CHECK(reporter.error_message().empty());
  }
}

TEST_CASE("Identity strings and extra labels that cannot become Prometheus labels are refused by name",
          "[reporter]") {
  TempDir dir;
  const struct {
    const char* what;
    shm::LabelPairs extra;
    std::string model_name;
    const char* named;
  } cases[] = {
      {"le", {{"le", "1"}}, "m", "extra label 'le' is reserved"},
      {"quantile", {{"quantile", "0.5"}}, "m", "extra label 'quantile' is reserved"},
      {"pid", {{"pid", "7"}}, "m", "extra label 'pid' is reserved"},
      {"a __ prefix", {{"__name__", "x"}}, "m", "extra label '__name__' is not a valid label name"},
      {"an invalid name", {{"bad-name", "x"}}, "m", "extra label 'bad-name' is not a valid label name"},
      {"an identity label", {{"model_name", "x"}}, "m", "extra label 'model_name' repeats an identity label"},
      {"a repeat", {{"pool", "a"}, {"pool", "b"}}, "m", "extra label 'pool' is given twice"},
      {"a non-UTF-8 value",
       {{"pool", "\xff"}},
       "m",
       "extra label 'pool' has a value that is not valid UTF-8"},
      {"a non-UTF-8 model name", {}, "m\xc3", "model name 'm\\xc3' is not valid UTF-8"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    ReporterOptions options = options_in(dir);
    options.identity.extra_labels = c.extra;
    options.identity.model_name = c.model_name;
    Reporter reporter;
    CHECK(reporter.open(options) == Status::kInvalidArgument);
    CHECK_THAT(reporter.error_message(), Catch::Contains(c.named));
    CHECK(dir.list().empty());
  }
}

TEST_CASE("Every status has a distinct name", "[reporter]") {
  CHECK(rankstat::status_name(Status::kOk) == "ok");
  CHECK(rankstat::status_name(Status::kRingFull) == "ring_full");
  CHECK(rankstat::status_name(Status::kRegistryFull) == "registry_full");
  CHECK(rankstat::status_name(static_cast<Status>(100)) == "unknown");
  std::set<std::string_view> names;
  for (const char* name : rankstat::kStatusNames) names.insert(name);
  CHECK(names.size() == std::size(rankstat::kStatusNames));
}

TEST_CASE("Every status has its C ABI message in the same list as its name", "[reporter]") {
  STATIC_REQUIRE(std::size(rankstat::kStatusMessages) == std::size(rankstat::kStatusNames));
  STATIC_REQUIRE(std::size(rankstat::kStatusNames) == static_cast<std::size_t>(Status::kRegistryFull) + 1);
  CHECK(std::string_view(rankstat::status_message(Status::kOk)).empty());
  CHECK(std::string_view(rankstat::status_message(Status::kRingFull)) ==
        "ring full: record dropped and counted (the daemon is slow or absent)");
  CHECK(std::string_view(rankstat::status_message(static_cast<Status>(100))) == "unknown error");
  for (std::size_t i = 1; i < std::size(rankstat::kStatusMessages); ++i) {
    CHECK_FALSE(std::string_view(rankstat::kStatusMessages[i]).empty());
  }
}
