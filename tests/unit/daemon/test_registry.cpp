// SegmentRegistry under descriptor exhaustion, in-process: the soft RLIMIT_NOFILE is lowered to the
// lowest free descriptor for the duration of one call, so every open() in it fails with EMFILE. A failed
// check is "unknown", never DEAD; a segment that could not be opened is retried although unchanged.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "rankstat/reporter.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "small_segment.hpp"
#include "testkit.hpp"

using rankstat::RankState;
using rankstat::testkit::TempDir;

namespace {

rankstat::ReporterOptions small_segment(const TempDir& dir, int dp) {
  return rankstat::testkit::small_segment_options(dir, "reg", dp);
}

// Runs `call` with no descriptor left to open, then restores the limit.
void without_free_descriptors(const std::function<void()>& call) {
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  const int lowest_free = ::dup(0);
  REQUIRE(lowest_free >= 0);
  ::close(lowest_free);
  // UBSan's vptr check probes memory through a pipe(2), which fails without descriptors and turns into
  // a false "invalid vptr" report; have the logger's type checked once while a pipe can still be made.
  spdlog::info("running {}: {}", std::string("without"), std::string("free descriptors"));
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
  call();
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
}

rankstat::RegistryOptions options_for(const TempDir& dir) {
  rankstat::RegistryOptions o;
  o.directory = dir.path();
  o.fd_budget = 1000;
  return o;
}

}  // namespace

TEST_CASE("a liveness check that fails with EMFILE keeps a live rank LIVE and counts the fd pressure",
          "[registry]") {
  TempDir dir;
  rankstat::Reporter writer;
  REQUIRE(writer.open(small_segment(dir, 0)) == rankstat::Status::kOk);
  rankstat::RetiredTotals retired("");
  rankstat::SegmentRegistry registry(options_for(dir), retired);
  REQUIRE(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  without_free_descriptors([&] {
    for (int pass = 0; pass < 3; ++pass)
      registry.check_liveness(rankstat::shm::monotonic_ns(), std::chrono::seconds(30));
  });
  REQUIRE(registry.current().size() == 1);
  CHECK(registry.current().front()->state() == RankState::kLive);
  CHECK(registry.counters().liveness_unknown == 3);
  CHECK(registry.counters().fd_exhaustion == 3);
  registry.check_liveness(rankstat::shm::monotonic_ns(), std::chrono::seconds(30));
  CHECK(registry.current().front()->state() == RankState::kLive);
  CHECK(registry.counters().liveness_unknown == 3);
}

TEST_CASE("a scan that fails for lack of descriptors refuses nothing and the next scan opens the segment",
          "[registry]") {
  TempDir dir;
  rankstat::Reporter writer;
  REQUIRE(writer.open(small_segment(dir, 0)) == rankstat::Status::kOk);
  rankstat::RetiredTotals retired("");
  rankstat::SegmentRegistry registry(options_for(dir), retired);
  // With no descriptor at all the listing itself fails (the segment's own open under EMFILE is exercised
  // with real processes in test_liveness_attacks).
  int opened = -1;
  without_free_descriptors([&] { opened = registry.scan(rankstat::shm::monotonic_ns()); });
  CHECK(opened == 0);
  CHECK(registry.current().empty());
  CHECK(registry.counters().fd_exhaustion >= 1);
  CHECK(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  CHECK(registry.current().size() == 1);
  CHECK(registry.counters()
            .rejected_by_reason[static_cast<std::size_t>(rankstat::shm::RejectReason::kOpenFailed)] == 0);
}

TEST_CASE("segments beyond the descriptor budget wait and are opened once others are let go", "[registry]") {
  TempDir dir;
  rankstat::Reporter a;
  rankstat::Reporter b;
  REQUIRE(a.open(small_segment(dir, 0)) == rankstat::Status::kOk);
  REQUIRE(b.open(small_segment(dir, 1)) == rankstat::Status::kOk);
  rankstat::RetiredTotals retired("");
  auto options = options_for(dir);
  options.fd_budget = 2;  // one generation
  options.dead_grace = std::chrono::milliseconds(0);
  rankstat::SegmentRegistry registry(options, retired);
  CHECK(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  CHECK(registry.counters().open_retries == 1);
  a.close();
  registry.check_liveness(rankstat::shm::monotonic_ns(), std::chrono::seconds(30));
  registry.retire_expired(rankstat::shm::monotonic_ns() + 1'000'000);
  CHECK(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  REQUIRE(registry.current().size() == 1);
  CHECK(registry.current().front()->identity().dp_rank == 1);
}

TEST_CASE(
    "a segment declaring more series than --shm.max-series-per-segment is read up to the limit and the "
    "rest are counted",
    "[registry]") {
  TempDir dir;
  rankstat::Reporter writer;
  REQUIRE(writer.open(small_segment(dir, 0)) == rankstat::Status::kOk);
  for (int i = 0; i < 12; ++i) {
    std::uint32_t id = 0;
    REQUIRE(writer.register_counter("sglang:many_total", {{"n", std::to_string(i)}}, id) ==
            rankstat::Status::kOk);
  }
  rankstat::RetiredTotals retired("");
  auto options = options_for(dir);
  options.max_series_per_segment = 5;
  rankstat::SegmentRegistry registry(options, retired);
  REQUIRE(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  registry.refresh_cumulative();
  registry.refresh_cumulative();  // counted once, not at every refresh
  REQUIRE(registry.current().size() == 1);
  CHECK(registry.current().front()->series().size() == 5);
  CHECK(registry.counters().series_over_limit == 7);
}

TEST_CASE("series descriptors that fail validation are left out, counted and logged once", "[registry]") {
  TempDir dir;
  rankstat::Reporter writer;
  const rankstat::ReporterOptions options_used = small_segment(dir, 0);
  REQUIRE(writer.open(options_used) == rankstat::Status::kOk);
  for (int i = 0; i < 3; ++i) {
    std::uint32_t id = 0;
    REQUIRE(writer.register_counter("sglang:checked_total", {{"n", std::to_string(i)}}, id) ==
            rankstat::Status::kOk);
  }
  // Someone with write access to the segment scribbles an unknown kind over the second descriptor.
  const std::string path =
      dir.path() + "/" +
      rankstat::shm::segment_name("reg", rankstat::shm::Role::kScheduler, "tp0-pp0-ep0-dp0");
  rankstat::shm::SegmentHeader header{};
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, &header, sizeof header, 0) == static_cast<ssize_t>(sizeof header));
  const std::uint64_t second = header.cumulative_offset +
                               options_used.geometry.cumulative().descriptors_offset() +
                               sizeof(rankstat::shm::SeriesDescriptor);
  const std::uint8_t bad_kind = 200;
  REQUIRE(::pwrite(fd, &bad_kind, 1, static_cast<off_t>(second)) == 1);
  ::close(fd);
  rankstat::RetiredTotals retired("");
  rankstat::SegmentRegistry registry(options_for(dir), retired);
  REQUIRE(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  registry.refresh_cumulative();
  registry.refresh_cumulative();  // counted once, not at every refresh
  REQUIRE(registry.current().size() == 1);
  CHECK(registry.current().front()->series().size() == 2);
  CHECK(registry.counters().series_invalid == 1);
}
