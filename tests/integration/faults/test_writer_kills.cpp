// kill -9 of writers while they flood their rings at full speed, so most kills land in the middle of an
// append (between payload and commit included): no torn record ever reaches the daemon, the daemon stays
// up, each dead rank is detected, and its counters stay in the totals.
#include <signal.h>

#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "fault_support.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace rankstat::faults;
using namespace std::chrono_literals;

namespace {

constexpr int kRanks = 2;
constexpr int kRounds = 24;

std::string scrape(DaemonUnderTest& daemon) {
  auto r = daemon.get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

double total(const std::string& text, const std::string& family) {
  double sum = 0;
  for (const Sample& s : samples_of(text, family)) sum += s.value;
  return sum;
}

std::string rank_fragment(int dp) {
  return "dp_rank=\"" + std::to_string(dp) + "\"";
}

// Every snapshot the writer makes has num_queue_reqs == 3 * num_running_reqs + 1: a record torn between
// two appends, or half-copied, would break it. Returns the ranks that violate it.
std::vector<std::string> torn_snapshots(const std::string& text) {
  std::vector<std::string> torn;
  for (int dp = 0; dp < kRanks; ++dp) {
    const auto running = value_of(text, "sglang:num_running_reqs", {rank_fragment(dp)});
    const auto queue = value_of(text, "sglang:num_queue_reqs", {rank_fragment(dp)});
    if (!running || !queue) continue;
    if (*queue != 3 * *running + 1) {
      torn.push_back("dp" + std::to_string(dp) + ": running " + std::to_string(*running) + " queue " +
                     std::to_string(*queue));
    }
  }
  return torn;
}

std::string state_of(const std::string& text, int dp) {
  for (const char* state : {"LIVE", "STALLED", "DEAD", "CLOSED"}) {
    if (value_of(text, "rankstat_rank_state",
                 {"dp" + std::to_string(dp) + "\"", std::string("state=\"") + state + "\""}) == 1.0) {
      return state;
    }
  }
  return "ABSENT";
}

std::unique_ptr<FaultWriter> flood(const TempDir& shm, int dp) {
  auto w = std::make_unique<FaultWriter>(
      shm.path(), std::vector<std::string>{"--dp=" + std::to_string(dp), "--mode=flood", "--seconds=120",
                                           "--ring-bytes=16384"});
  REQUIRE(w->wait_ready());
  return w;
}

}  // namespace

TEST_CASE("writers killed with SIGKILL mid-append never leave a torn record and their counters survive") {
  TempDir shm;
  // A short grace, so dead generations are also retired (folded into the retired totals) under the kills.
  DaemonUnderTest daemon(
      shm.path(), {"--shm.scan-interval=100ms", "--liveness.interval=50ms", "--liveness.dead-grace=1s"});
  BackgroundScraper scraper({"sglang:"}, 5ms);
  scraper.set_port(daemon.port());
  std::vector<std::unique_ptr<FaultWriter>> writers;
  for (int dp = 0; dp < kRanks; ++dp) writers.push_back(flood(shm, dp));

  std::mt19937 random(6);
  std::uniform_int_distribution<int> flood_ms(20, 150);
  std::uint64_t kills = 0;
  std::uint64_t checks = 0;
  for (int round = 0; round < kRounds; ++round) {
    const int dp = round % kRanks;
    std::this_thread::sleep_for(std::chrono::milliseconds(flood_ms(random)));
    const double before =
        value_of(scrape(daemon), "sglang:test_events_total", {rank_fragment(dp)}).value_or(0);
    writers[static_cast<std::size_t>(dp)]->kill();
    ++kills;
    // The dead rank is detected (pidfd or the next liveness pass) and its totals stay.
    std::string text;
    REQUIRE(wait_until(
        [&] {
          text = scrape(daemon);
          return state_of(text, dp) == "DEAD";
        },
        5s));
    CHECK(value_of(text, "sglang:test_events_total", {rank_fragment(dp)}).value_or(0) >= before);
    for (const std::string& t : torn_snapshots(text)) FAIL_CHECK("torn snapshot " << t);
    CHECK(total(text, "rankstat_ring_sequence_gaps_total") == 0);
    CHECK(total(text, "rankstat_ring_malformed_records_total") == 0);
    CHECK(total(text, "rankstat_segments_quarantined_total") == 0);
    ++checks;
    // The rank restarts under the same name: a new generation.
    writers[static_cast<std::size_t>(dp)] = flood(shm, dp);
    REQUIRE(wait_until([&] { return state_of(scrape(daemon), dp) == "LIVE"; }, 5s));
  }
  for (auto& w : writers) REQUIRE(w->stop() == 0);
  // Past the grace, every generation (the killed ones and the two closed last) is retired into the totals.
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        return value_of(text, "rankstat_generation_events_total", {"event=\"retired\""}) ==
               Approx(kRounds + kRanks);
      },
      10s));
  CHECK(value_of(text, "rankstat_generation_events_total", {"event=\"ring_quarantined\""}) == Approx(0));
  CHECK(total(text, "rankstat_ring_sequence_gaps_total") == 0);
  CHECK(total(text, "rankstat_ring_malformed_records_total") == 0);
  CHECK(daemon.process().running());
  const auto violations = scraper.violations();
  for (const std::string& v : violations) UNSCOPED_INFO(v);
  CHECK(violations.empty());
  CHECK(scraper.scrapes_ok() > 0);
  if (scraper.rounding_decreases() != 0) {
    WARN(scraper.rounding_decreases() << " fractional totals dropped by an ulp when a generation retired "
                                         "(floating-point reordering; see MonotonicWatch)");
  }
  report_count("writer_kill_rounding_decreases", scraper.rounding_decreases());
  report_count("writer_kills_survived", kills);
  report_count("writer_kill_state_checks", checks);
  report_count("writer_kill_scrapes_checked", scraper.scrapes_ok());
}
