// Gauges integrated over time and their trailing-window extrema (gauge_integral.hpp), first on a known
// schedule of reports, then through the registry from a real Reporter segment, across a daemon restart.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_collect.hpp"
#include "gauge_integral.hpp"
#include "rankstat/reporter.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "testkit.hpp"

using rankstat::GaugeTrack;
using rankstat::testkit::TempDir;

namespace {

constexpr std::uint64_t kSecond = 1'000'000'000ull;
constexpr std::uint64_t kWindow = 15 * kSecond;

}  // namespace

TEST_CASE("a piecewise-constant schedule integrates to value times seconds from each report to the next") {
  GaugeTrack track;
  track.observe(100 * kSecond, 20, kWindow);
  track.observe(110 * kSecond, 500, kWindow);  // a 2 s burst
  track.observe(112 * kSecond, 20, kWindow);
  track.hold_until(130 * kSecond);
  // 20 x 10 s + 500 x 2 s + 20 x 18 s
  CHECK(track.integral() == Approx(200 + 1000 + 360));
  CHECK(track.integrated_until_ns() == 130 * kSecond);
}

TEST_CASE("repeated reports of the same value and a heartbeat in between change nothing but the end") {
  GaugeTrack track;
  track.observe(1 * kSecond, 4, kWindow);
  track.observe(2 * kSecond, 4, kWindow);
  track.hold_until(3 * kSecond);
  track.observe(3 * kSecond, 4, kWindow);
  track.observe(5 * kSecond, 0, kWindow);
  CHECK(track.integral() == Approx(16));
}

TEST_CASE("a report older than the heartbeat already integrated changes the value from then on") {
  GaugeTrack track;
  track.observe(1 * kSecond, 10, kWindow);
  track.hold_until(3 * kSecond);
  track.observe(2 * kSecond, 0, kWindow);  // committed before the heartbeat, drained after it
  track.hold_until(10 * kSecond);
  CHECK(track.integral() == Approx(20));  // never less than what was already exported
}

TEST_CASE("negative values integrate as zero so the counter never decreases") {
  GaugeTrack track;
  track.observe(0, -1, kWindow);
  track.observe(5 * kSecond, 2, kWindow);
  track.hold_until(6 * kSecond);
  CHECK(track.integral() == Approx(2));
}

namespace {

// Reports `schedule` ({seconds, value} pairs, in order), then a heartbeat at `alive_until_s`.
GaugeTrack reported(std::initializer_list<std::pair<std::uint64_t, double>> schedule,
                    std::uint64_t alive_until_s) {
  GaugeTrack track;
  for (const auto& [at_s, value] : schedule) track.observe(at_s * kSecond, value, kWindow);
  track.hold_until(alive_until_s * kSecond);
  return track;
}

// {largest, smallest} over the window ending at `now_s`, or {-1, -1} when there is nothing in it.
std::pair<double, double> extrema(GaugeTrack& track, std::uint64_t now_s) {
  double largest = 0;
  double smallest = 0;
  if (!track.window_extrema(now_s * kSecond, kWindow, largest, smallest)) return {-1, -1};
  return {largest, smallest};
}

}  // namespace

TEST_CASE("the window maximum shows a burst shorter than a scrape interval until it leaves the window") {
  GaugeTrack track = reported({{100, 20}, {110, 500}, {112, 20}}, 120);
  CHECK(extrema(track, 120) == std::pair<double, double>(500, 20));
  track.hold_until(126 * kSecond);
  CHECK(extrema(track, 126).first == 500);  // the burst ended at 112 s, inside [111 s, 126 s]
  track.hold_until(128 * kSecond);
  CHECK(extrema(track, 128).first == 20);
}

TEST_CASE("the window includes the value in effect at its start, not only reports inside it") {
  GaugeTrack track = reported({{1, 10}, {2, 5}, {30, 7}}, 31);
  // [16 s, 31 s]: 5 held from 2 s until 30 s, then 7.
  CHECK(extrema(track, 31) == std::pair<double, double>(7, 5));
}

TEST_CASE("a writer silent for a whole window has no window extrema") {
  GaugeTrack track = reported({{1, 10}}, 2);
  CHECK(extrema(track, 10) == std::pair<double, double>(10, 10));
  CHECK(extrema(track, 18) == std::pair<double, double>(-1, -1));
}

TEST_CASE("the window extrema agree with a brute-force scan over thousands of reports") {
  // Reports every 10 ms for 60 s: a rising ramp, a falling one, then pseudo-random values; checked
  // against every piece in effect during the window (from the bucket boundary where it starts).
  GaugeTrack track;
  std::vector<std::pair<std::uint64_t, double>> reports;
  std::uint64_t state = 12345;
  for (std::uint64_t i = 0; i < 6000; ++i) {
    double value = 0;
    if (i < 2000) {
      value = static_cast<double>(i);
    } else if (i < 4000) {
      value = static_cast<double>(4000 - i);
    } else {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      value = static_cast<double>(state >> 54);
    }
    const std::uint64_t at = i * kSecond / 100;
    reports.emplace_back(at, value);
    track.observe(at, value, kWindow);
    track.hold_until(at);
    if (i % 250 != 249) continue;
    // The window starts at the bucket boundary at or before now - window (its resolution).
    const std::uint64_t width = GaugeTrack::window_bucket_ns(kWindow);
    const std::uint64_t cutoff = (at > kWindow ? at - kWindow : 0) / width * width;
    double largest = -1;
    double smallest = 1e300;
    for (std::size_t r = 0; r < reports.size(); ++r) {
      const std::uint64_t end = r + 1 < reports.size() ? reports[r + 1].first : at + 1;
      if (end <= cutoff) continue;  // over before the window began
      largest = std::max(largest, reports[r].second);
      smallest = std::min(smallest, reports[r].second);
    }
    INFO("report " << i);
    double got_largest = 0;
    double got_smallest = 0;
    REQUIRE(track.window_extrema(at, kWindow, got_largest, got_smallest));
    CHECK(got_largest == largest);
    CHECK(got_smallest == smallest);
  }
}

TEST_CASE("a writer reporting a new value every microsecond keeps its window state fixed and exact") {
  GaugeTrack track;
  for (std::uint64_t i = 0; i < 100000; ++i) track.observe(i * 1000, static_cast<double>(i), kWindow);
  double largest = 0;
  double smallest = 0;
  REQUIRE(track.window_extrema(100000 * 1000, kWindow, largest, smallest));
  CHECK(largest == 99999);
  CHECK(smallest == 0);  // all 0.1 s of reports are inside the window
  REQUIRE(track.window_extrema(100000 * 1000 + kWindow + GaugeTrack::window_bucket_ns(kWindow), kWindow,
                               largest, smallest) == false);  // silent for a whole window since
}

TEST_CASE("a value stays in the window extrema at most one bucket longer than the window") {
  const std::uint64_t width = GaugeTrack::window_bucket_ns(kWindow);
  GaugeTrack track;
  track.observe(100 * kSecond, 20, kWindow);
  track.observe(110 * kSecond, 500, kWindow);
  track.observe(112 * kSecond, 20, kWindow);
  track.hold_until(200 * kSecond);
  double largest = 0;
  double smallest = 0;
  REQUIRE(track.window_extrema(112 * kSecond + kWindow - 1, kWindow, largest, smallest));
  CHECK(largest == 500);  // still inside the exact window
  REQUIRE(track.window_extrema(112 * kSecond + kWindow + width + 1, kWindow, largest, smallest));
  CHECK(largest == 20);  // more than a bucket past it: gone
}

TEST_CASE("a restored checkpoint continues the integral and a recovered later report extends it") {
  GaugeTrack track;
  track.restore(1000, 2, 40 * kSecond);     // what the previous daemon exported, up to 40 s
  track.observe(50 * kSecond, 3, kWindow);  // the newest snapshot, recovered from the ring at open
  track.hold_until(60 * kSecond);
  // 1000 + 2 x (50 - 40) + 3 x (60 - 50)
  CHECK(track.integral() == Approx(1050));
}

TEST_CASE("the exported names say what they are: a _total counter and window gauges") {
  CHECK(rankstat::integral_family_name("sglang:num_queue_reqs") ==
        "sglang:num_queue_reqs_time_weighted_seconds_total");
  CHECK(rankstat::window_max_family_name("sglang:token_usage") == "sglang:token_usage_window_max");
  CHECK(rankstat::window_min_family_name("sglang:token_usage") == "sglang:token_usage_window_min");
  CHECK(rankstat::window_help("x", true, 15 * kSecond) ==
        "Largest value of x over the trailing 15 s, from every report of the rank.");
}

namespace {

rankstat::ReporterOptions segment_options(const TempDir& dir) {
  rankstat::ReporterOptions o;
  o.shm_dir = dir.path();
  o.identity.instance = "integral";
  o.geometry.ring_bytes = 64 * 1024;
  o.geometry.series_capacity = 16;
  o.geometry.bounds_capacity = 64;
  o.geometry.values_capacity = 256;
  return o;
}

rankstat::RegistryOptions registry_options(const TempDir& dir) {
  rankstat::RegistryOptions o;
  o.directory = dir.path();
  o.fd_budget = 1000;
  o.integrals.families = {"sglang:num_queue_reqs", "engine:queue"};
  o.integrals.peak_window_ns = kWindow;
  return o;
}

// One daemon's state over the segments of `shm`, persisted in `state`.
struct DaemonState {
  rankstat::RetiredTotals retired;
  rankstat::SegmentRegistry registry;
  rankstat::FamilySet set;
  DaemonState(const TempDir& shm, const TempDir& state)
      : retired(state.path()), registry(registry_options(shm), retired) {
    std::string error;
    REQUIRE(retired.load(error));
    // The registry took no checkpoint yet: it opens segments at its first scan.
    REQUIRE(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  }
  // The exposition as a scrape would collect it now; the checkpoint saved before it is answered.
  std::string scrape() {
    const std::uint64_t now = rankstat::shm::monotonic_ns();
    registry.drain_all(now);
    registry.refresh_cumulative();
    registry.settle_integrals(now);
    rankstat::CollectOptions options;
    options.now_ns = now;
    options.integrals = &registry.integrals();
    rankstat::collect_engine_metrics(registry.generations(), options, set);
    std::string error;
    REQUIRE(registry.save_checkpoints(error));
    retired.contribute(set);
    std::string out;
    set.render(out);
    return out;
  }
};

// The value of the first sample line starting with `head` (name and labels), or -1.
double sample(const std::string& text, const std::string& head) {
  const auto at = text.find("\n" + head);
  if (at == std::string::npos) return -1;
  const auto end = text.find('\n', at + 1);
  const auto space = text.rfind(' ', end);
  return std::stod(text.substr(space + 1, end - space - 1));
}

}  // namespace

TEST_CASE("both reporting paths are integrated from their records and continue over a daemon restart") {
  TempDir shm("rankstat-integral-shm");
  TempDir state("rankstat-integral-state");
  rankstat::Reporter reporter;
  REQUIRE(reporter.open(segment_options(shm)) == rankstat::Status::kOk);
  std::uint32_t gauge = 0;
  rankstat::Reporter::SeriesSpec spec;
  spec.kind = rankstat::shm::SeriesKind::kGauge;
  spec.mode = rankstat::shm::GaugeMode::kMostRecent;
  spec.family = "engine:queue";
  spec.flags = rankstat::shm::kSeriesWithoutIdentityLabels;
  REQUIRE(reporter.register_series(spec, gauge) == rankstat::Status::kOk);
  rankstat::shm::SchedulerSnapshot snapshot{};

  double integral_before = 0;
  double series_before = 0;
  {
    DaemonState daemon(shm, state);
    snapshot.num_queue_reqs = 500;
    const auto started = std::chrono::steady_clock::now();
    REQUIRE(reporter.report_scheduler(snapshot) == rankstat::Status::kOk);
    REQUIRE(reporter.gauge_set(gauge, 500) == rankstat::Status::kOk);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    snapshot.num_queue_reqs = 0;
    REQUIRE(reporter.report_scheduler(snapshot) == rankstat::Status::kOk);
    REQUIRE(reporter.gauge_set(gauge, 0) == rankstat::Status::kOk);
    const double held_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const std::string text = daemon.scrape();
    INFO(text);
    integral_before = sample(text, "sglang:num_queue_reqs_time_weighted_seconds_total{");
    series_before = sample(text, "engine:queue_time_weighted_seconds_total ");
    // 500 requests for at least 0.12 s and at most the time measured around it, give or take a tick of
    // the writer's coarse clock (a few milliseconds).
    for (const double integral : {integral_before, series_before}) {
      CHECK(integral >= 500 * (0.120 - 0.005));
      CHECK(integral <= 500 * (held_s + 0.005));
    }
    CHECK(sample(text, "sglang:num_queue_reqs_window_max{") == 500);
    CHECK(sample(text, "sglang:num_queue_reqs_window_min{") == 0);
    CHECK(sample(text, "engine:queue_window_max ") == 500);
  }
  // While no daemon runs, the rank reports again: the ring keeps the records for the next daemon.
  snapshot.num_queue_reqs = 100;
  REQUIRE(reporter.report_scheduler(snapshot) == rankstat::Status::kOk);
  REQUIRE(reporter.gauge_set(gauge, 100) == rankstat::Status::kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(reporter.report_scheduler(snapshot) == rankstat::Status::kOk);
  {
    DaemonState daemon(shm, state);
    const std::string text = daemon.scrape();
    const double integral_after = sample(text, "sglang:num_queue_reqs_time_weighted_seconds_total{");
    const double series_after = sample(text, "engine:queue_time_weighted_seconds_total ");
    CHECK(integral_after >= integral_before + 100 * 0.04);
    CHECK(integral_after <= integral_before + 100 * 0.2);
    CHECK(series_after >= series_before);
  }
}
