// The hot-path promise of reporter.hpp and rankstat.h: report, add, set, observe and heartbeat never
// allocate, and neither do their failure paths (ring full, oversize, wrong kind, NULL reporter). This
// binary replaces the global operator new to count allocations; librankstat.so resolves to it too.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/rankstat.h"
#include "rankstat/reporter.hpp"
#include "testkit.hpp"

namespace {

std::atomic<std::uint64_t> g_allocations{0};

void* counted_allocation(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

std::uint64_t allocations() {
  return g_allocations.load(std::memory_order_relaxed);
}

}  // namespace

void* operator new(std::size_t size) {
  return counted_allocation(size);
}
void* operator new[](std::size_t size) {
  return counted_allocation(size);
}
// The nothrow forms too: sanitizer runtimes define their own, which would not pair with the deletes here.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {

namespace shm = rankstat::shm;
using rankstat::Status;
using rankstat::testkit::TempDir;

}  // namespace

TEST_CASE("The allocation counter sees allocations made inside librankstat.so", "[hot_path]") {
  TempDir dir;
  rankstat_identity identity;
  rankstat_identity_init(&identity);
  const std::uint64_t before = allocations();
  rankstat_reporter* raw = nullptr;
  ::setenv("RANKSTAT_SHM_DIR", dir.path().c_str(), 1);
  REQUIRE(rankstat_open(&identity, nullptr, &raw) == RANKSTAT_OK);
  ::unsetenv("RANKSTAT_SHM_DIR");
  CHECK(allocations() > before);  // otherwise the zero counts below would prove nothing
  rankstat_close(raw);
}

TEST_CASE("The C ABI hot path never allocates, on success or failure", "[hot_path]") {
  TempDir dir;
  ::setenv("RANKSTAT_SHM_DIR", dir.path().c_str(), 1);
  rankstat_identity identity;
  rankstat_identity_init(&identity);
  rankstat_geometry geometry{};
  geometry.struct_size = sizeof geometry;
  geometry.ring_bytes = 4096;  // small, so the loop below spends most of its time on the ring-full path
  rankstat_reporter* raw = nullptr;
  REQUIRE(rankstat_open(&identity, &geometry, &raw) == RANKSTAT_OK);
  ::unsetenv("RANKSTAT_SHM_DIR");
  std::uint32_t counter = 0;
  std::uint32_t gauge = 0;
  std::uint32_t histogram = 0;
  const double bounds[] = {0.1, 1, 10};
  REQUIRE(rankstat_register_counter(raw, "c_total", 0, nullptr, nullptr, &counter) == RANKSTAT_OK);
  REQUIRE(rankstat_register_gauge(raw, "g", RANKSTAT_MODE_MOSTRECENT, 0, nullptr, nullptr, &gauge) ==
          RANKSTAT_OK);
  REQUIRE(rankstat_register_histogram(raw, "h", 0, nullptr, nullptr, bounds, 3, &histogram) == RANKSTAT_OK);
  const shm::SchedulerSnapshot snapshot{};
  const shm::PriorityCount priorities[4]{};

  const std::uint64_t before = allocations();
  int ring_full = 0;
  int failures = 0;
  for (int i = 0; i < 1000; ++i) {
    if (rankstat_report_scheduler(raw, &snapshot, sizeof snapshot, priorities, 4) == RANKSTAT_ERR_RING_FULL) {
      ++ring_full;
    }
    failures += rankstat_report_scheduler(raw, &snapshot, sizeof snapshot - 1, nullptr, 0) != RANKSTAT_OK;
    failures += rankstat_counter_add(raw, counter, 1) != RANKSTAT_OK;
    failures += rankstat_counter_add(raw, gauge, 1) != RANKSTAT_OK;  // wrong kind
    failures += rankstat_gauge_set(raw, gauge, i) != RANKSTAT_OK;
    failures += rankstat_histogram_observe(raw, histogram, 0.5) != RANKSTAT_OK;
    failures += rankstat_histogram_observe_many(raw, histogram, 2, 3, 6) != RANKSTAT_OK;
    failures += rankstat_heartbeat(raw) != RANKSTAT_OK;
    failures += rankstat_counter_add(nullptr, 0, 1) != RANKSTAT_OK;
    (void)rankstat_last_error();
    (void)rankstat_dropped_records(raw);
  }
  const std::uint64_t during = allocations() - before;
  CHECK(during == 0);
  CHECK(ring_full > 900);
  CHECK(failures == 3 * 1000);
  // Every snapshot refused for room is a counted drop; so is every gauge update record that found the ring
  // full (the gauge's value itself is in the cumulative block either way).
  CHECK(rankstat_dropped_records(raw) >= static_cast<std::uint64_t>(ring_full));
  CHECK(rankstat_dropped_records(raw) <= static_cast<std::uint64_t>(ring_full) + 1000);
  rankstat_close(raw);
}

TEST_CASE("The Reporter hot path never allocates, on success or failure", "[hot_path]") {
  TempDir dir;
  rankstat::ReporterOptions options;
  options.shm_dir = dir.path();
  options.geometry.ring_bytes = 4096;
  rankstat::Reporter reporter;
  REQUIRE(reporter.open(options) == Status::kOk);
  std::uint32_t counter = 0;
  std::uint32_t histogram = 0;
  REQUIRE(reporter.register_counter("c_total", {}, counter) == Status::kOk);
  REQUIRE(reporter.register_histogram("h", {}, {}, histogram) == Status::kOk);
  shm::SchedulerSnapshot snapshot{};
  snapshot.priority_count = 17;  // forces the patched copy
  const std::vector<shm::PriorityCount> priorities(3);
  const std::vector<shm::PriorityCount> too_many(shm::kMaxPriorityCounts + 1);
  const std::vector<std::uint8_t> oversize(shm::kSchedulerRecordMaxBytes);

  const std::uint64_t before = allocations();
  for (int i = 0; i < 1000; ++i) {
    (void)reporter.report_scheduler(snapshot, priorities);
    (void)reporter.report_scheduler(snapshot, too_many);
    (void)reporter.append_record(static_cast<shm::RecordType>(2), 1, oversize, {});
    (void)reporter.counter_add(counter, 1);
    (void)reporter.counter_add(histogram, 1);
    (void)reporter.histogram_observe(histogram, 1);
    reporter.heartbeat();
  }
  CHECK(allocations() - before == 0);
  CHECK(reporter.dropped_records() > 900);
}
