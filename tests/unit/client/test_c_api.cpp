// The C ABI of librankstat.so, called the way a binding calls it: through rankstat.h only, with the
// shm directory taken from RANKSTAT_SHM_DIR.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "rankstat/rankstat.h"
#include "rankstat/shmproto/reader.hpp"
#include "testkit.hpp"

namespace {

namespace shm = rankstat::shm;
using rankstat::testkit::TempDir;

// Points RANKSTAT_SHM_DIR at a private directory for the lifetime of a test.
class ShmDirEnv {
 public:
  explicit ShmDirEnv(const std::string& path) { ::setenv("RANKSTAT_SHM_DIR", path.c_str(), 1); }
  ~ShmDirEnv() { ::unsetenv("RANKSTAT_SHM_DIR"); }
  ShmDirEnv(const ShmDirEnv&) = delete;
  ShmDirEnv& operator=(const ShmDirEnv&) = delete;
};

rankstat_identity test_identity() {
  rankstat_identity identity;
  rankstat_identity_init(&identity);
  identity.instance = "capi";
  identity.model_name = "qwen";
  return identity;
}

rankstat_geometry small_geometry(std::uint64_t ring_bytes = 64 * 1024) {
  rankstat_geometry geometry{};
  geometry.struct_size = sizeof geometry;
  geometry.ring_bytes = ring_bytes;
  geometry.series_capacity = 16;
  return geometry;
}

struct ReporterDeleter {
  void operator()(rankstat_reporter* reporter) const { rankstat_close(reporter); }
};
using ReporterHandle = std::unique_ptr<rankstat_reporter, ReporterDeleter>;

ReporterHandle open_reporter(std::uint64_t ring_bytes = 64 * 1024) {
  const rankstat_identity identity = test_identity();
  const rankstat_geometry geometry = small_geometry(ring_bytes);
  rankstat_reporter* raw = nullptr;
  const int rc = rankstat_open(&identity, &geometry, &raw);
  INFO(rankstat_last_error());
  REQUIRE(rc == RANKSTAT_OK);
  REQUIRE(raw != nullptr);
  return ReporterHandle(raw);
}

std::string only_segment(const TempDir& dir) {
  const auto names = dir.list();
  REQUIRE(names.size() == 1);
  return dir.path() + "/" + names[0];
}

// The consumer side, as in rankstatd.
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
  shm::CumulativeReader cumulative() const {
    return shm::CumulativeReader(opened_.cumulative(), opened_.cumulative_geometry);
  }
  std::vector<std::vector<std::uint8_t>> drain() {
    std::vector<std::vector<std::uint8_t>> out;
    reader_->drain([&](const shm::RecordHeader& h, std::span<const std::uint8_t> payload) {
      CHECK(h.type == static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot));
      out.emplace_back(payload.begin(), payload.end());
    });
    return out;
  }

 private:
  shm::OpenedSegment opened_;
  std::unique_ptr<shm::RingReader> reader_;
};

}  // namespace

TEST_CASE("rankstat_open creates the segment in RANKSTAT_SHM_DIR", "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  rankstat_identity identity = test_identity();
  identity.tp_rank = 3;
  identity.dp_rank = 1;
  identity.tp_size = 4;
  identity.flags = RANKSTAT_FLAG_PRIORITY_SCHEDULING;
  const char* names[] = {"region", "pool"};
  const char* values[] = {"eu", "a"};
  identity.extra_label_count = 2;
  identity.extra_label_names = names;
  identity.extra_label_values = values;
  rankstat_reporter* raw = nullptr;
  SECTION("with the default geometry") {
    REQUIRE(rankstat_open(&identity, nullptr, &raw) == RANKSTAT_OK);
  }
  SECTION("with a geometry whose zero fields take the defaults") {
    rankstat_geometry geometry{};
    geometry.struct_size = sizeof geometry;
    REQUIRE(rankstat_open(&identity, &geometry, &raw) == RANKSTAT_OK);
  }
  ReporterHandle reporter(raw);
  REQUIRE(reporter);
  CHECK(dir.list() == std::vector<std::string>{"rankstat.capi.scheduler.tp3-pp0-ep0-dp1"});

  SegmentView view(only_segment(dir));
  const shm::SegmentHeader& h = view.opened().identity;
  CHECK(std::string(h.model_name) == "qwen");
  CHECK(std::string(h.engine_type) == "unified");
  CHECK(h.tp_rank == 3);
  CHECK(h.dp_rank == 1);
  CHECK(h.attn_tp_rank == 3);
  CHECK(h.tp_size == 4);
  CHECK(h.flags == RANKSTAT_FLAG_PRIORITY_SCHEDULING);
  CHECK(h.ring_bytes == shm::SegmentGeometry{}.ring_bytes);
  CHECK(shm::decode_label_pairs(h.extra_labels, sizeof h.extra_labels) ==
        shm::LabelPairs{{"region", "eu"}, {"pool", "a"}});
}

TEST_CASE("rankstat_identity_init fills the defaults of SegmentIdentity", "[c_api]") {
  rankstat_identity identity;
  std::memset(&identity, 0x5A, sizeof identity);
  rankstat_identity_init(&identity);
  const shm::SegmentIdentity defaults;
  CHECK(identity.struct_size == sizeof(rankstat_identity));
  CHECK(identity.role == RANKSTAT_ROLE_SCHEDULER);
  CHECK(identity.instance == nullptr);
  CHECK(identity.rank_key == nullptr);
  CHECK(identity.model_name == nullptr);
  CHECK(identity.engine_type == nullptr);
  CHECK(identity.tp_rank == defaults.tp_rank);
  CHECK(identity.pp_rank == defaults.pp_rank);
  CHECK(identity.dp_rank == RANKSTAT_RANK_UNSET);
  CHECK(identity.moe_ep_rank == defaults.moe_ep_rank);
  CHECK(identity.attn_tp_rank == RANKSTAT_RANK_UNSET);
  CHECK(identity.attn_dp_rank == RANKSTAT_RANK_UNSET);
  CHECK(identity.attn_cp_rank == defaults.attn_cp_rank);
  CHECK(identity.tp_size == 1);
  CHECK(identity.pp_size == 1);
  CHECK(identity.dp_size == 1);
  CHECK(identity.flags == 0);
  CHECK(identity.extra_label_count == 0);
  CHECK(identity.extra_label_names == nullptr);
  rankstat_identity_init(nullptr);  // tolerated
}

TEST_CASE("rankstat_open reports bad arguments with RANKSTAT_ERR_INVALID_ARGUMENT and a message", "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  rankstat_identity identity = test_identity();
  rankstat_geometry geometry = small_geometry();
  const rankstat_geometry* geometry_arg = &geometry;
  rankstat_reporter* raw = reinterpret_cast<rankstat_reporter*>(&identity);  // must be reset to NULL
  const char* names[] = {"ok", nullptr};
  const char* values[] = {"v", "w"};

  SECTION("a ring that is not a power of two") {
    geometry.ring_bytes = 5000;
  }
  SECTION("a ring below the minimum") {
    geometry.ring_bytes = 1024;
  }
  SECTION("an identity struct_size older than v1") {
    identity.struct_size = 8;
  }
  SECTION("a geometry struct_size older than v1") {
    geometry.struct_size = 4;
  }
  SECTION("an unknown role") {
    identity.role = 0;
  }
  SECTION("a role past the last one") {
    identity.role = RANKSTAT_ROLE_OTHER + 1;
  }
  SECTION("an instance id with a dot") {
    identity.instance = "a.b";
  }
  SECTION("a NULL extra label name") {
    identity.extra_label_count = 2;
    identity.extra_label_names = names;
    identity.extra_label_values = values;
  }
  SECTION("extra labels without arrays") {
    identity.extra_label_count = 1;
  }
  SECTION("a model name that does not fit") {
    static const std::string long_name(200, 'm');
    identity.model_name = long_name.c_str();
  }
  const int rc = rankstat_open(&identity, geometry_arg, &raw);
  CHECK(rc == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(raw == nullptr);
  CHECK(std::strlen(rankstat_last_error()) > 0);
  CHECK(dir.list().empty());
}

TEST_CASE("rankstat_open with NULL identity or out pointer fails cleanly", "[c_api]") {
  rankstat_reporter* raw = nullptr;
  CHECK(rankstat_open(nullptr, nullptr, &raw) == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(raw == nullptr);
  const rankstat_identity identity = test_identity();
  CHECK(rankstat_open(&identity, nullptr, nullptr) == RANKSTAT_ERR_INVALID_ARGUMENT);
}

TEST_CASE("rankstat_open in a directory that does not exist returns an error code and a message", "[c_api]") {
  TempDir dir;
  const std::string missing = dir.path() + "/does-not-exist";
  ShmDirEnv env(missing);
  const rankstat_identity identity = test_identity();
  rankstat_reporter* raw = nullptr;
  CHECK(rankstat_open(&identity, nullptr, &raw) == RANKSTAT_ERR_IO);
  CHECK(raw == nullptr);
  CHECK_THAT(std::string(rankstat_last_error()), Catch::Contains(missing));
}

TEST_CASE("A NULL reporter is a no-op returning RANKSTAT_ERR_CLOSED everywhere", "[c_api]") {
  shm::SchedulerSnapshot snapshot{};
  std::uint32_t id = 0;
  const double bounds[] = {1};
  CHECK(rankstat_report_scheduler(nullptr, &snapshot, sizeof snapshot, nullptr, 0) == RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_heartbeat(nullptr) == RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_register_counter(nullptr, "c", 0, nullptr, nullptr, &id) == RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_register_gauge(nullptr, "g", RANKSTAT_MODE_ALL, 0, nullptr, nullptr, &id) ==
        RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_register_histogram(nullptr, "h", 0, nullptr, nullptr, bounds, 1, &id) ==
        RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_counter_add(nullptr, 0, 1) == RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_gauge_set(nullptr, 0, 1) == RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_histogram_observe(nullptr, 0, 1) == RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_histogram_observe_many(nullptr, 0, 1, 2, 2) == RANKSTAT_ERR_CLOSED);
  CHECK(rankstat_dropped_records(nullptr) == 0);
  CHECK(std::strlen(rankstat_last_error()) > 0);
  rankstat_close(nullptr);
}

TEST_CASE("Scheduler snapshots reported through the C ABI arrive intact", "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter();
  SegmentView view(only_segment(dir));

  shm::SchedulerSnapshot snapshot{};
  snapshot.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kPrefill);
  snapshot.num_running_reqs = 5;
  snapshot.cache_hit_rate = 0.875;
  snapshot.priority_count = 1234;  // ignored: the count argument wins
  const shm::PriorityCount entries[] = {{1, 0, 0, 0, 3}, {2, 1, 0, 0, 4}};
  // Bindings hand over unaligned buffers: place both one byte off alignment.
  std::vector<std::uint8_t> unaligned(1 + sizeof snapshot + sizeof entries);
  std::memcpy(unaligned.data() + 1, &snapshot, sizeof snapshot);
  std::memcpy(unaligned.data() + 1 + sizeof snapshot, entries, sizeof entries);

  REQUIRE(rankstat_report_scheduler(reporter.get(), unaligned.data() + 1, rankstat_scheduler_snapshot_bytes(),
                                    unaligned.data() + 1 + sizeof snapshot, 2) == RANKSTAT_OK);
  CHECK(snapshot.priority_count == 1234);
  REQUIRE(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot, nullptr, 0) == RANKSTAT_OK);

  const auto records = view.drain();
  REQUIRE(records.size() == 2);
  REQUIRE(records[0].size() == sizeof snapshot + sizeof entries);
  shm::SchedulerSnapshot fixed{};
  std::memcpy(&fixed, records[0].data(), sizeof fixed);
  CHECK(fixed.priority_count == 2);
  CHECK(fixed.report_kind == static_cast<std::uint32_t>(shm::ReportKind::kPrefill));
  CHECK(fixed.num_running_reqs == 5);
  CHECK(fixed.cache_hit_rate == 0.875);
  CHECK(std::memcmp(records[0].data() + sizeof fixed, entries, sizeof entries) == 0);
  REQUIRE(records[1].size() == sizeof snapshot);
  std::memcpy(&fixed, records[1].data(), sizeof fixed);
  CHECK(fixed.priority_count == 0);

  SECTION("a snapshot of the wrong size is rejected") {
    CHECK(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot - 8, nullptr, 0) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot + 8, nullptr, 0) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_report_scheduler(reporter.get(), nullptr, sizeof snapshot, nullptr, 0) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(std::strlen(rankstat_last_error()) > 0);
  }
  SECTION("too many or missing priority entries are rejected") {
    std::vector<shm::PriorityCount> many(shm::kMaxPriorityCounts + 1);
    CHECK(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot, many.data(),
                                    static_cast<std::uint32_t>(many.size())) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot, nullptr, 1) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
  }
  CHECK(view.drain().empty());
  CHECK(rankstat_heartbeat(reporter.get()) == RANKSTAT_OK);
}

TEST_CASE("A full ring returns RANKSTAT_ERR_RING_FULL and rankstat_dropped_records counts exactly",
          "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter(4096);
  const shm::SchedulerSnapshot snapshot{};
  int accepted = 0;
  while (rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot, nullptr, 0) == RANKSTAT_OK) {
    ++accepted;
    REQUIRE(accepted < 100);
  }
  CHECK(accepted == 6);  // 640-byte slots in a 4 KiB ring
  CHECK(rankstat_dropped_records(reporter.get()) == 1);
  CHECK_THAT(std::string(rankstat_last_error()), Catch::Contains("ring full"));
  for (int i = 0; i < 25; ++i) {
    CHECK(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot, nullptr, 0) ==
          RANKSTAT_ERR_RING_FULL);
  }
  CHECK(rankstat_dropped_records(reporter.get()) == 26);
  SegmentView view(only_segment(dir));
  CHECK(shm::shared(view.live().dropped_records).load() == 26);
  CHECK(view.drain().size() == 6);
  CHECK(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot, nullptr, 0) == RANKSTAT_OK);
  CHECK(rankstat_dropped_records(reporter.get()) == 26);
}

TEST_CASE("Counters, gauges and histograms work through the C ABI", "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter();
  const char* names[] = {"model_name", "engine_type"};
  const char* values[] = {"qwen", "unified"};
  std::uint32_t counter = 0;
  std::uint32_t gauge = 0;
  std::uint32_t histogram = 0;
  const double bounds[] = {0.5, 1, 2};
  REQUIRE(rankstat_register_counter(reporter.get(), "sglang:prompt_tokens_total", 2, names, values,
                                    &counter) == RANKSTAT_OK);
  REQUIRE(rankstat_register_gauge(reporter.get(), "sglang:num_used_tokens", RANKSTAT_MODE_LIVEMAX, 0, nullptr,
                                  nullptr, &gauge) == RANKSTAT_OK);
  REQUIRE(rankstat_register_histogram(reporter.get(), "sglang:e2e_request_latency_seconds", 1, names, values,
                                      bounds, 3, &histogram) == RANKSTAT_OK);
  CHECK(rankstat_counter_add(reporter.get(), counter, 100) == RANKSTAT_OK);
  CHECK(rankstat_counter_add(reporter.get(), counter, 23) == RANKSTAT_OK);
  CHECK(rankstat_gauge_set(reporter.get(), gauge, 4096) == RANKSTAT_OK);
  CHECK(rankstat_histogram_observe(reporter.get(), histogram, 1) == RANKSTAT_OK);
  CHECK(rankstat_histogram_observe(reporter.get(), histogram, 3) == RANKSTAT_OK);
  CHECK(rankstat_histogram_observe_many(reporter.get(), histogram, 0.1, 5, 0.5) == RANKSTAT_OK);

  SegmentView view(only_segment(dir));
  const shm::CumulativeReader reader = view.cumulative();
  REQUIRE(reader.published_series() == 3);
  shm::SeriesValue value;
  const auto counter_info = reader.read_descriptor(counter);
  REQUIRE(counter_info);
  CHECK(counter_info->labels == shm::LabelPairs{{"model_name", "qwen"}, {"engine_type", "unified"}});
  reader.read_value(*counter_info, value);
  CHECK(value.value == 123);
  const auto gauge_info = reader.read_descriptor(gauge);
  REQUIRE(gauge_info);
  CHECK(gauge_info->gauge_mode == shm::GaugeMode::kLiveMax);
  reader.read_value(*gauge_info, value);
  CHECK(value.value == 4096);
  const auto histogram_info = reader.read_descriptor(histogram);
  REQUIRE(histogram_info);
  CHECK(histogram_info->labels == shm::LabelPairs{{"model_name", "qwen"}});
  reader.read_value(*histogram_info, value);
  CHECK(value.counts == std::vector<std::uint64_t>{5, 1, 0, 1});
  CHECK(value.sum == Approx(4.5));

  SECTION("an update of the wrong kind is rejected") {
    CHECK(rankstat_gauge_set(reporter.get(), counter, 1) == RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_counter_add(reporter.get(), gauge, 1) == RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_histogram_observe(reporter.get(), counter, 1) == RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_histogram_observe_many(reporter.get(), gauge, 1, 1, 1) == RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_counter_add(reporter.get(), 3, 1) == RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(std::strlen(rankstat_last_error()) > 0);
    reader.read_value(*counter_info, value);
    CHECK(value.value == 123);
  }
  SECTION("bad registrations are rejected with a message naming the family") {
    std::uint32_t id = 77;
    CHECK(rankstat_register_counter(reporter.get(), "bad\xff", 0, nullptr, nullptr, &id) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);  // a family name that is not UTF-8
    CHECK_THAT(std::string(rankstat_last_error()), Catch::Contains("cannot register counter 'bad"));
    CHECK(rankstat_register_gauge(reporter.get(), "g", 10, 0, nullptr, nullptr, &id) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_register_gauge(reporter.get(), "g", 256 + RANKSTAT_MODE_SUM, 0, nullptr, nullptr, &id) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_register_counter(reporter.get(), nullptr, 0, nullptr, nullptr, &id) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_register_counter(reporter.get(), "c", 0, nullptr, nullptr, nullptr) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_register_counter(reporter.get(), "c", 1, nullptr, nullptr, &id) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(rankstat_register_histogram(reporter.get(), "h", 0, nullptr, nullptr, nullptr, 2, &id) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    const double unsorted[] = {2, 1};
    CHECK(rankstat_register_histogram(reporter.get(), "h", 0, nullptr, nullptr, unsorted, 2, &id) ==
          RANKSTAT_ERR_INVALID_ARGUMENT);
    CHECK(id == 77);
    CHECK(reader.published_series() == 3);
  }
  SECTION("a full registry returns RANKSTAT_ERR_REGISTRY_FULL") {
    std::uint32_t id = 0;
    int rc = RANKSTAT_OK;
    for (int i = 0; i < 100 && rc == RANKSTAT_OK; ++i) {
      const std::string family = "extra_" + std::to_string(i);
      rc = rankstat_register_counter(reporter.get(), family.c_str(), 0, nullptr, nullptr, &id);
    }
    CHECK(rc == RANKSTAT_ERR_REGISTRY_FULL);
    CHECK(reader.published_series() == 16);
    CHECK_THAT(std::string(rankstat_last_error()), Catch::Contains("full"));
  }
}

TEST_CASE("rankstat_scheduler_field enumerates every scalar field at its offsetof offset", "[c_api]") {
  const auto fields = std::span(shm::kSchedulerScalarFields);
  std::uint32_t index = 0;
  for (;; ++index) {
    const char* name = nullptr;
    std::uint32_t offset = 0;
    std::uint32_t type = 0;
    if (rankstat_scheduler_field(index, &name, &offset, &type) != RANKSTAT_OK) break;
    REQUIRE(index < fields.size());
    REQUIRE(name != nullptr);
    CHECK(std::string(name) == fields[index].name);
    CHECK(offset == fields[index].offset);
    CHECK(type == static_cast<std::uint32_t>(fields[index].type));
    CHECK(offset + 8 <= sizeof(shm::SchedulerSnapshot));
  }
  CHECK(index == fields.size());
  CHECK(rankstat_scheduler_field(index, nullptr, nullptr, nullptr) == RANKSTAT_ERR_INVALID_ARGUMENT);

  // Spot checks against offsetof: the table must describe the real struct.
  const auto offset_of = [](const char* wanted) {
    for (std::uint32_t i = 0;; ++i) {
      const char* name = nullptr;
      std::uint32_t offset = 0;
      if (rankstat_scheduler_field(i, &name, &offset, nullptr) != RANKSTAT_OK) return ~0u;
      if (std::strcmp(name, wanted) == 0) return offset;
    }
  };
  CHECK(offset_of("num_running_reqs") == offsetof(shm::SchedulerSnapshot, num_running_reqs));
  CHECK(offset_of("gen_throughput") == offsetof(shm::SchedulerSnapshot, gen_throughput));
  CHECK(offset_of("kv_transfer_latency_ms") == offsetof(shm::SchedulerSnapshot, kv_transfer_latency_ms));
  CHECK(offset_of("fwd_occupancy") == offsetof(shm::SchedulerSnapshot, fwd_occupancy));
  CHECK(offset_of("num_unique_running_routing_keys") ==
        offsetof(shm::SchedulerSnapshot, num_unique_running_routing_keys));
}

TEST_CASE("The library reports the contract it was built against", "[c_api]") {
  CHECK(rankstat_layout_major() == shm::kLayoutMajor);
  CHECK(rankstat_layout_minor() == shm::kLayoutMinor);
  CHECK(rankstat_layout_hash() == shm::kLayoutHash);
  CHECK(rankstat_scheduler_snapshot_bytes() == sizeof(shm::SchedulerSnapshot));
}

TEST_CASE("After rankstat_close the segment says closed", "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter();
  SegmentView view(only_segment(dir));
  const shm::SchedulerSnapshot snapshot{};
  REQUIRE(rankstat_report_scheduler(reporter.get(), &snapshot, sizeof snapshot, nullptr, 0) == RANKSTAT_OK);
  CHECK(shm::shared(view.live().closed).load() == 0);
  reporter.reset();
  CHECK(shm::shared(view.live().closed).load() == 1);
  CHECK(shm::read_producer_state(view.live()).records_written == 1);
  CHECK(dir.list().size() == 1);  // the daemon retires it after folding in the final totals
}

namespace {

double counter_total(const SegmentView& view, std::uint32_t id) {
  const shm::CumulativeReader reader = view.cumulative();
  const auto info = reader.read_descriptor(id);
  REQUIRE(info);
  shm::SeriesValue value;
  reader.read_value(*info, value);
  return value.value;
}

}  // namespace

TEST_CASE("rankstat_abandon frees the reporter and leaves its segment exactly as the writer left it",
          "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  rankstat_reporter* raw = open_reporter().release();
  std::uint32_t counter = 0;
  REQUIRE(rankstat_register_counter(raw, "abandoned_total", 0, nullptr, nullptr, &counter) == RANKSTAT_OK);
  REQUIRE(rankstat_counter_add(raw, counter, 5) == RANKSTAT_OK);
  REQUIRE(rankstat_heartbeat(raw) == RANKSTAT_OK);
  SegmentView view(only_segment(dir));
  const std::uint64_t heartbeat = shm::shared(view.live().heartbeat_ns).load();
  rankstat_abandon(raw);
  rankstat_abandon(nullptr);
  CHECK(shm::shared(view.live().closed).load() == 0);
  CHECK(shm::shared(view.live().heartbeat_ns).load() == heartbeat);
  CHECK(dir.list().size() == 1);
  CHECK(counter_total(view, counter) == 5);
}

TEST_CASE(
    "a forked child releasing its copy of the parent's reporter leaves the parent's segment open and "
    "the parent counting",
    "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter();
  std::uint32_t counter = 0;
  REQUIRE(rankstat_register_counter(reporter.get(), "forked_total", 0, nullptr, nullptr, &counter) ==
          RANKSTAT_OK);
  REQUIRE(rankstat_counter_add(reporter.get(), counter, 1) == RANKSTAT_OK);
  SegmentView view(only_segment(dir));
  bool with_close = false;
  SECTION("with rankstat_abandon") {
    with_close = false;
  }
  SECTION("with rankstat_close, which abandons in any process but the opener") {
    with_close = true;
  }
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child's copy of the handle: released the way a binding's at-fork hook (or a careless child)
    // would. _exit: no test-framework teardown in the child.
    rankstat_reporter* inherited = reporter.release();
    if (with_close) {
      rankstat_close(inherited);
    } else {
      rankstat_abandon(inherited);
    }
    ::_exit(0);
  }
  int status = -1;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(shm::shared(view.live().closed).load() == 0);
  CHECK(dir.list().size() == 1);
  CHECK(rankstat_counter_add(reporter.get(), counter, 2) == RANKSTAT_OK);
  CHECK(counter_total(view, counter) == 3);
  reporter.reset();  // the opener's own close still marks it closed
  CHECK(shm::shared(view.live().closed).load() == 1);
}

TEST_CASE("The last error is per thread", "[c_api]") {
  CHECK(rankstat_counter_add(nullptr, 0, 1) == RANKSTAT_ERR_CLOSED);
  const std::string mine = rankstat_last_error();
  REQUIRE_FALSE(mine.empty());
  std::string theirs = "unset";
  std::string theirs_after = "unset";
  std::thread other([&] {
    theirs = rankstat_last_error();
    rankstat_reporter* raw = nullptr;
    rankstat_open(nullptr, nullptr, &raw);
    theirs_after = rankstat_last_error();
  });
  other.join();
  CHECK(theirs.empty());
  CHECK_FALSE(theirs_after.empty());
  CHECK(theirs_after != mine);
  CHECK(std::string(rankstat_last_error()) == mine);
}

TEST_CASE(
    "rankstat_open_ex creates the segment in the directory it is given and leaves RANKSTAT_SHM_DIR alone") {
  TempDir from_environment;
  TempDir given;
  ShmDirEnv env(from_environment.path());
  const rankstat_identity identity = test_identity();
  const rankstat_geometry geometry = small_geometry();
  rankstat_permissions permissions{};
  permissions.struct_size = sizeof permissions;
  permissions.shm_dir = given.path().c_str();
  rankstat_reporter* raw = nullptr;
  const int rc = rankstat_open_ex(&identity, &geometry, &permissions, &raw);
  INFO(rankstat_last_error());
  REQUIRE(rc == RANKSTAT_OK);
  ReporterHandle reporter(raw);
  CHECK(given.list().size() == 1);
  CHECK(from_environment.list().empty());
  REQUIRE(std::getenv("RANKSTAT_SHM_DIR") != nullptr);
  CHECK(std::string(std::getenv("RANKSTAT_SHM_DIR")) == from_environment.path());
}

TEST_CASE(
    "a caller built before rankstat_permissions had shm_dir still opens its segment in RANKSTAT_SHM_DIR") {
  TempDir from_environment;
  TempDir elsewhere;
  ShmDirEnv env(from_environment.path());
  const rankstat_identity identity = test_identity();
  // The first version of the struct ended before shm_dir: bytes beyond its struct_size are never read,
  // whatever they hold.
  rankstat_permissions permissions{};
  permissions.struct_size = offsetof(rankstat_permissions, shm_dir);
  permissions.mode = 0640;
  permissions.shm_dir = elsewhere.path().c_str();
  rankstat_reporter* raw = nullptr;
  const int rc = rankstat_open_ex(&identity, nullptr, &permissions, &raw);
  INFO(rankstat_last_error());
  REQUIRE(rc == RANKSTAT_OK);
  ReporterHandle reporter(raw);
  CHECK(from_environment.list().size() == 1);
  CHECK(elsewhere.list().empty());
}

TEST_CASE(
    "A series spec with text lengths carries NUL and long texts, and a spec of the older size still works",
    "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  const rankstat_identity identity = test_identity();
  rankstat_geometry geometry = small_geometry();
  geometry.text_capacity = 1u << 16;  // room for the long texts below (16 series × 192 bytes is not)
  rankstat_reporter* raw = nullptr;
  REQUIRE(rankstat_open(&identity, &geometry, &raw) == RANKSTAT_OK);
  ReporterHandle reporter(raw);
  const std::string family = "lengths_" + std::string(192, 'f');
  const std::string help = std::string(10000, 'h') + std::string("\0nul", 4);
  const std::string name = "v";
  const std::string nul_b("a\0b", 3);
  const std::string nul_c("a\0c", 3);
  const std::string long_value(5000, 'x');
  auto register_with_lengths = [&](const std::string& value, std::uint32_t& id) {
    const char* names[] = {name.data()};
    const char* values[] = {value.data()};
    const size_t name_lengths[] = {name.size()};
    const size_t value_lengths[] = {value.size()};
    rankstat_series_spec spec{};
    spec.struct_size = sizeof spec;
    spec.kind = RANKSTAT_KIND_COUNTER;
    spec.flags = RANKSTAT_SERIES_OWN_LABELS_ONLY | RANKSTAT_SERIES_TEXT_LENGTHS;
    spec.family = family.data();
    spec.family_length = family.size();
    spec.help = help.data();
    spec.help_length = help.size();
    spec.label_count = 1;
    spec.label_names = names;
    spec.label_values = values;
    spec.label_name_lengths = name_lengths;
    spec.label_value_lengths = value_lengths;
    return rankstat_register_series(reporter.get(), &spec, &id);
  };
  std::uint32_t b = 0;
  std::uint32_t c = 0;
  std::uint32_t x = 0;
  REQUIRE(register_with_lengths(nul_b, b) == RANKSTAT_OK);
  REQUIRE(register_with_lengths(nul_c, c) == RANKSTAT_OK);
  REQUIRE(register_with_lengths(long_value, x) == RANKSTAT_OK);
  CHECK(b != c);

  // A caller built against the header of layout 2 passes the older struct_size and NUL-terminated texts.
  const char* old_names[] = {"v"};
  const char* old_values[] = {"old"};
  rankstat_series_spec old{};
  old.struct_size = offsetof(rankstat_series_spec, family_length);
  old.kind = RANKSTAT_KIND_GAUGE;
  old.mode = RANKSTAT_MODE_LIVESUM;
  old.family = "lengths_old_gauge";
  old.help = "Old help.";
  old.label_count = 1;
  old.label_names = old_names;
  old.label_values = old_values;
  std::uint32_t g = 0;
  REQUIRE(rankstat_register_series(reporter.get(), &old, &g) == RANKSTAT_OK);
  // The length flag with the older size is refused, naming the size it needs.
  old.flags = RANKSTAT_SERIES_TEXT_LENGTHS;
  std::uint32_t refused = 0;
  CHECK(rankstat_register_series(reporter.get(), &old, &refused) == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(rankstat_last_error()).find("struct_size") != std::string::npos);

  SegmentView view(only_segment(dir));
  const shm::CumulativeReader reader = view.cumulative();
  const auto bi = reader.read_descriptor(b);
  const auto ci = reader.read_descriptor(c);
  const auto xi = reader.read_descriptor(x);
  const auto gi = reader.read_descriptor(g);
  REQUIRE(bi);
  REQUIRE(ci);
  REQUIRE(xi);
  REQUIRE(gi);
  CHECK(bi->family == family);
  CHECK(bi->help == help);
  CHECK(bi->labels == shm::LabelPairs{{"v", nul_b}});
  CHECK(ci->labels == shm::LabelPairs{{"v", nul_c}});
  CHECK(xi->labels == shm::LabelPairs{{"v", long_value}});
  CHECK(gi->family == "lengths_old_gauge");
  CHECK(gi->help == "Old help.");
  CHECK(gi->labels == shm::LabelPairs{{"v", "old"}});
}

namespace {

// Sets or clears RANKSTAT_INSTANCE for the lifetime of a test.
class InstanceEnv {
 public:
  explicit InstanceEnv(const char* value) {
    if (value != nullptr) {
      ::setenv("RANKSTAT_INSTANCE", value, 1);
    } else {
      ::unsetenv("RANKSTAT_INSTANCE");
    }
  }
  ~InstanceEnv() { ::unsetenv("RANKSTAT_INSTANCE"); }
  InstanceEnv(const InstanceEnv&) = delete;
  InstanceEnv& operator=(const InstanceEnv&) = delete;
};

std::vector<std::pair<std::string, std::string>> identity_labels_of(const rankstat_reporter* reporter) {
  std::vector<std::pair<std::string, std::string>> labels;
  const char* name = nullptr;
  const char* value = nullptr;
  for (std::uint32_t i = 0; rankstat_identity_label(reporter, i, &name, &value) == RANKSTAT_OK; ++i)
    labels.emplace_back(name, value);
  return labels;
}

}  // namespace

TEST_CASE("An identity without an instance takes $RANKSTAT_INSTANCE, else \"default\"", "[c_api]") {
  struct Case {
    const char* what;
    const char* variable;  // nullptr: unset
    const char* instance;
    const char* expected;  // the segment name's start
  };
  const Case cases[] = {
      {"NULL with the variable set", "fromenv", nullptr, "rankstat.fromenv."},
      {"an empty string with the variable set", "fromenv", "", "rankstat.fromenv."},
      {"NULL with the variable empty", "", nullptr, "rankstat.default."},
      {"NULL without the variable", nullptr, nullptr, "rankstat.default."},
      {"an instance given beats the variable", "fromenv", "given", "rankstat.given."},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    TempDir dir;
    ShmDirEnv env(dir.path());
    InstanceEnv instance(c.variable);
    rankstat_identity identity = test_identity();
    identity.instance = c.instance;
    const rankstat_geometry geometry = small_geometry();
    rankstat_reporter* raw = nullptr;
    REQUIRE(rankstat_open(&identity, &geometry, &raw) == RANKSTAT_OK);
    const ReporterHandle reporter(raw);
    const auto names = dir.list();
    REQUIRE(names.size() == 1);
    CHECK(names[0].rfind(c.expected, 0) == 0);
  }
}

TEST_CASE("A refused series' message gives the reason shmproto found and names the label at fault",
          "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  const ReporterHandle reporter = open_reporter();
  std::uint32_t id = 77;
  const char* twice_names[] = {"pool", "pool"};
  const char* twice_values[] = {"a", "b"};
  CHECK(rankstat_register_counter(reporter.get(), "c_total", 2, twice_names, twice_values, &id) ==
        RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(rankstat_last_error()) ==
        "cannot register counter 'c_total': label 'pool' is given twice");

  const char* le_name[] = {"le"};
  const char* le_value[] = {"1"};
  const double bounds[] = {1, 2};
  CHECK(rankstat_register_histogram(reporter.get(), "h", 1, le_name, le_value, bounds, 2, &id) ==
        RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(rankstat_last_error()) ==
        "cannot register histogram 'h': label 'le' is reserved for histogram buckets");

  const char* value_name[] = {"v"};
  const char* bad_value[] = {"\xff"};
  CHECK(rankstat_register_gauge(reporter.get(), "g", RANKSTAT_MODE_SUM, 1, value_name, bad_value, &id) ==
        RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(rankstat_last_error()) ==
        "cannot register gauge 'g': label 'v' has a value that is not valid UTF-8");

  const double unsorted[] = {2, 1};
  CHECK(rankstat_register_histogram(reporter.get(), "h", 0, nullptr, nullptr, unsorted, 2, &id) ==
        RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(rankstat_last_error()) ==
        "cannot register histogram 'h': " +
            std::string(shm::series_refusal_text(shm::SeriesRefusal::kBoundsOrder)));

  rankstat_series_spec spec{};
  spec.struct_size = sizeof spec;
  spec.kind = RANKSTAT_KIND_COUNTER;
  spec.family = "c_total";
  spec.help = "\xc3";
  CHECK(rankstat_register_series(reporter.get(), &spec, &id) == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(std::string(rankstat_last_error()) ==
        "cannot register series 'c_total': the help text is not valid UTF-8");
  CHECK(id == 77);
}

TEST_CASE("Every series refusal has a text of its own in shmproto's one table", "[c_api]") {
  std::vector<std::string_view> seen;
  for (std::size_t i = 1; i < std::size(shm::kSeriesRefusalTexts); ++i) {
    const std::string_view text = shm::series_refusal_text(static_cast<shm::SeriesRefusal>(i));
    CHECK(!text.empty());
    CHECK(std::find(seen.begin(), seen.end(), text) == seen.end());
    seen.push_back(text);
  }
  CHECK(shm::series_refusal_text(shm::SeriesRefusal::kNone).empty());
}

TEST_CASE("rankstat_identity_label lists the labels the daemon adds to the segment's series, in order",
          "[c_api]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  rankstat_identity identity = test_identity();
  const char* extra_names[] = {"region"};
  const char* extra_values[] = {"eu"};
  using Labels = std::vector<std::pair<std::string, std::string>>;
  Labels expected;
  SECTION("a scheduler with a dp rank, priority scheduling and an extra label") {
    identity.tp_rank = 1;
    identity.dp_rank = 2;
    identity.flags = RANKSTAT_FLAG_PRIORITY_SCHEDULING;
    identity.extra_label_count = 1;
    identity.extra_label_names = extra_names;
    identity.extra_label_values = extra_values;
    expected = {{"model_name", "qwen"}, {"engine_type", "unified"}, {"tp_rank", "1"}, {"pp_rank", "0"},
                {"moe_ep_rank", "0"},   {"priority", ""},           {"dp_rank", "2"}, {"region", "eu"}};
  }
  SECTION("a scheduler without a dp rank") {
    expected = {{"model_name", "qwen"},
                {"engine_type", "unified"},
                {"tp_rank", "0"},
                {"pp_rank", "0"},
                {"moe_ep_rank", "0"}};
  }
  SECTION("a tokenizer: no rank labels") {
    identity.role = RANKSTAT_ROLE_TOKENIZER;
    identity.dp_rank = 3;
    expected = {{"model_name", "qwen"}, {"engine_type", "unified"}};
  }
  const rankstat_geometry geometry = small_geometry();
  rankstat_reporter* raw = nullptr;
  INFO(rankstat_last_error());
  REQUIRE(rankstat_open(&identity, &geometry, &raw) == RANKSTAT_OK);
  const ReporterHandle reporter(raw);
  CHECK(identity_labels_of(reporter.get()) == expected);
  const char* name = nullptr;
  CHECK(rankstat_identity_label(reporter.get(), static_cast<std::uint32_t>(expected.size()), &name,
                                nullptr) == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(rankstat_identity_label(nullptr, 0, &name, nullptr) == RANKSTAT_ERR_CLOSED);
}
