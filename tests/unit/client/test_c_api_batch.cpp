// The C ABI entries that bindings (the Python package) use besides the single-update calls:
// rankstat_apply_updates, and the layout self-description (aux fields, routing-key bounds, entry sizes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/rankstat.h"
#include "rankstat/shmproto/reader.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "testkit.hpp"

namespace {

namespace shm = rankstat::shm;
using rankstat::testkit::TempDir;

class ShmDirEnv {
 public:
  explicit ShmDirEnv(const std::string& path) { ::setenv("RANKSTAT_SHM_DIR", path.c_str(), 1); }
  ~ShmDirEnv() { ::unsetenv("RANKSTAT_SHM_DIR"); }
  ShmDirEnv(const ShmDirEnv&) = delete;
  ShmDirEnv& operator=(const ShmDirEnv&) = delete;
};

struct ReporterDeleter {
  void operator()(rankstat_reporter* reporter) const { rankstat_close(reporter); }
};
using ReporterHandle = std::unique_ptr<rankstat_reporter, ReporterDeleter>;

ReporterHandle open_reporter() {
  rankstat_identity identity;
  rankstat_identity_init(&identity);
  identity.instance = "batch";
  identity.model_name = "qwen";
  rankstat_geometry geometry{};
  geometry.struct_size = sizeof geometry;
  geometry.ring_bytes = 64 * 1024;
  geometry.series_capacity = 16;
  rankstat_reporter* raw = nullptr;
  const int rc = rankstat_open(&identity, &geometry, &raw);
  INFO(rankstat_last_error());
  REQUIRE(rc == RANKSTAT_OK);
  return ReporterHandle(raw);
}

struct Series {
  std::uint32_t counter = 0;
  std::uint32_t gauge = 0;
  std::uint32_t histogram = 0;
};

Series register_three(rankstat_reporter* reporter) {
  Series s;
  const double bounds[] = {0.01, 0.1, 1};
  REQUIRE(rankstat_register_counter(reporter, "sglang:prompt_tokens_total", 0, nullptr, nullptr,
                                    &s.counter) == RANKSTAT_OK);
  REQUIRE(rankstat_register_gauge(reporter, "sglang:http_requests_active", RANKSTAT_MODE_LIVESUM, 0, nullptr,
                                  nullptr, &s.gauge) == RANKSTAT_OK);
  REQUIRE(rankstat_register_histogram(reporter, "sglang:inter_token_latency_seconds", 0, nullptr, nullptr,
                                      bounds, 3, &s.histogram) == RANKSTAT_OK);
  return s;
}

rankstat_update op(std::uint32_t kind, std::uint32_t id, double value, std::uint64_t count = 0,
                   double sum_delta = 0) {
  rankstat_update u;
  std::memset(&u, 0, sizeof u);
  u.op = kind;
  u.id = id;
  u.value = value;
  u.count = count;
  u.sum_delta = sum_delta;
  return u;
}

struct Read {
  double counter = 0;
  double gauge = 0;
  std::vector<std::uint64_t> counts;
  double sum = 0;
};

Read read_back(const TempDir& dir, const Series& s) {
  const auto names = dir.list();
  REQUIRE(names.size() == 1);
  shm::OpenedSegment opened = shm::open_segment(dir.path() + "/" + names[0], false);
  REQUIRE(opened.reason == shm::RejectReason::kNone);
  const shm::CumulativeReader reader(opened.cumulative(), opened.cumulative_geometry);
  Read out;
  shm::SeriesValue value;
  const auto counter = reader.read_descriptor(s.counter);
  const auto gauge = reader.read_descriptor(s.gauge);
  const auto histogram = reader.read_descriptor(s.histogram);
  REQUIRE((counter && gauge && histogram));
  reader.read_value(*counter, value);
  out.counter = value.value;
  reader.read_value(*gauge, value);
  out.gauge = value.value;
  reader.read_value(*histogram, value);
  out.counts = value.counts;
  out.sum = value.sum;
  return out;
}

}  // namespace

TEST_CASE("rankstat_apply_updates applies counter, gauge and histogram updates in one call",
          "[c_api][batch]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter();
  const Series s = register_three(reporter.get());
  // The ITL bulk observe: 4 tokens in 0.2 s put 4 samples in the bucket of 0.05 and 0.2 into the sum.
  const rankstat_update updates[] = {
      op(RANKSTAT_OP_COUNTER_ADD, s.counter, 100),
      op(RANKSTAT_OP_GAUGE_SET, s.gauge, 3),
      op(RANKSTAT_OP_HISTOGRAM_OBSERVE, s.histogram, 0.05, 4, 0.2),
      op(RANKSTAT_OP_HISTOGRAM_OBSERVE, s.histogram, 5, 1, 5),
      op(RANKSTAT_OP_COUNTER_ADD, s.counter, 20),
      op(RANKSTAT_OP_GAUGE_SET, s.gauge, 2),
  };
  std::uint32_t applied = 99;
  REQUIRE(rankstat_apply_updates(reporter.get(), updates, 6, &applied) == RANKSTAT_OK);
  CHECK(applied == 6);
  const Read r = read_back(dir, s);
  CHECK(r.counter == 120);
  CHECK(r.gauge == 2);  // applied in order: the later set wins
  CHECK(r.counts == std::vector<std::uint64_t>{0, 4, 0, 1});
  CHECK(r.sum == Approx(5.2));
}

TEST_CASE("rankstat_apply_updates skips bad entries, applies the rest and reports the first failure",
          "[c_api][batch]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter();
  const Series s = register_three(reporter.get());
  const rankstat_update updates[] = {
      op(RANKSTAT_OP_COUNTER_ADD, s.counter, 1),
      op(RANKSTAT_OP_COUNTER_ADD, s.gauge, 1),     // wrong kind
      op(99, s.counter, 1),                        // unknown op
      op(RANKSTAT_OP_COUNTER_ADD, s.counter, -5),  // counters never decrease
      op(RANKSTAT_OP_GAUGE_SET, 1000, 1),          // no such series
      op(RANKSTAT_OP_COUNTER_ADD, s.counter, 2),
  };
  std::uint32_t applied = 0;
  CHECK(rankstat_apply_updates(reporter.get(), updates, 6, &applied) == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(applied == 2);
  CHECK(std::strlen(rankstat_last_error()) > 0);
  CHECK(read_back(dir, s).counter == 3);
}

TEST_CASE("rankstat_apply_updates accepts an unaligned buffer, an empty batch and NULL arguments safely",
          "[c_api][batch]") {
  TempDir dir;
  ShmDirEnv env(dir.path());
  ReporterHandle reporter = open_reporter();
  const Series s = register_three(reporter.get());
  std::vector<unsigned char> buffer(3 * sizeof(rankstat_update) + 1);
  const rankstat_update updates[] = {
      op(RANKSTAT_OP_COUNTER_ADD, s.counter, 7),
      op(RANKSTAT_OP_HISTOGRAM_OBSERVE, s.histogram, 0.001, 1, 0.001),
      op(RANKSTAT_OP_GAUGE_SET, s.gauge, -1),
  };
  std::memcpy(buffer.data() + 1, updates, sizeof updates);
  const auto* unaligned = reinterpret_cast<const rankstat_update*>(buffer.data() + 1);
  std::uint32_t applied = 0;
  CHECK(rankstat_apply_updates(reporter.get(), unaligned, 3, &applied) == RANKSTAT_OK);
  CHECK(applied == 3);
  CHECK(rankstat_apply_updates(reporter.get(), nullptr, 0, &applied) == RANKSTAT_OK);
  CHECK(applied == 0);
  CHECK(rankstat_apply_updates(reporter.get(), nullptr, 2, nullptr) == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(rankstat_apply_updates(nullptr, updates, 3, &applied) == RANKSTAT_ERR_CLOSED);
  CHECK(applied == 0);
  const Read r = read_back(dir, s);
  CHECK(r.counter == 7);
  CHECK(r.gauge == -1);
  CHECK(r.counts == std::vector<std::uint64_t>{1, 0, 0, 0});
}

TEST_CASE("The aux fields, routing-key bounds and entry sizes describe the snapshot a binding packs",
          "[c_api][batch]") {
  const char* name = nullptr;
  std::uint32_t offset = 0;
  std::uint32_t type = 0;
  std::uint32_t count = 0;
  std::vector<std::string> names;
  for (std::uint32_t i = 0; rankstat_scheduler_aux_field(i, &name, &offset, &type, &count) == RANKSTAT_OK;
       ++i) {
    names.emplace_back(name);
    if (names.back() == "report_kind") {
      CHECK(offset == offsetof(shm::SchedulerSnapshot, report_kind));
      CHECK((type == 3 && count == 1));
    } else if (names.back() == "priority_count") {
      CHECK(offset == offsetof(shm::SchedulerSnapshot, priority_count));
      CHECK((type == 3 && count == 1));
    } else if (names.back() == "groups") {
      CHECK(offset == offsetof(shm::SchedulerSnapshot, groups));
      CHECK((type == 4 && count == 1));
    } else if (names.back() == "routing_key_running_req_counts") {
      CHECK(offset == offsetof(shm::SchedulerSnapshot, routing_key_running_req_counts));
      CHECK((type == 4 && count == shm::kRoutingKeyBins));
    } else if (names.back() == "routing_key_all_req_counts") {
      CHECK(offset == offsetof(shm::SchedulerSnapshot, routing_key_all_req_counts));
      CHECK((type == 4 && count == shm::kRoutingKeyBins));
    }
  }
  CHECK(names == std::vector<std::string>{"report_kind", "priority_count", "groups",
                                          "routing_key_running_req_counts", "routing_key_all_req_counts"});
  CHECK(rankstat_scheduler_aux_field(5, &name, nullptr, nullptr, nullptr) == RANKSTAT_ERR_INVALID_ARGUMENT);

  const double* bounds = nullptr;
  REQUIRE(rankstat_routing_key_bounds(&bounds, &count) == RANKSTAT_OK);
  REQUIRE(count + 1 == shm::kRoutingKeyBins);
  CHECK(std::vector<double>(bounds, bounds + count) ==
        std::vector<double>{1, 2, 3, 5, 7, 10, 20, 50, 100, 200});
  CHECK(rankstat_priority_count_bytes() == sizeof(shm::PriorityCount));
  CHECK(rankstat_max_priority_counts() == shm::kMaxPriorityCounts);
}
