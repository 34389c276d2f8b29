// One declaration per family across segment generations (SegmentRegistry::resolve_declarations): two
// processes that declare one family with another gauge mode or other buckets cost that family's losing
// series only, the newest live declaration wins whichever segment the daemon opened first, and the
// retired totals follow the declaration that was served (an engine upgrade that changes a histogram's
// buckets). Real segments written by the client library, read by an in-process registry.
#include <prometheus/metric_family.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine_collect.hpp"
#include "rankstat/reporter.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "small_segment.hpp"
#include "testkit.hpp"

using rankstat::FamilyDeclaration;
using rankstat::shm::GaugeMode;
using rankstat::testkit::TempDir;

namespace {

rankstat::RegistryOptions options_for(const TempDir& dir) {
  rankstat::RegistryOptions o;
  o.directory = dir.path();
  o.fd_budget = 1000;
  return o;
}

// A writer process stand-in: its own segment (dp rank `dp`), an unrelated counter of its own, and the
// contested gauge family declared with `mode` and set to `value`.
struct GaugeWriter {
  rankstat::Reporter reporter;
  GaugeWriter(const TempDir& dir, int dp, GaugeMode mode, double value) {
    REQUIRE(reporter.open(rankstat::testkit::small_segment_options(dir, "fam", dp)) == rankstat::Status::kOk);
    std::uint32_t own = 0;
    REQUIRE(reporter.register_counter("fam:own_" + std::to_string(dp) + "_total", {}, own) ==
            rankstat::Status::kOk);
    REQUIRE(reporter.counter_add(own, 1 + dp) == rankstat::Status::kOk);
    std::uint32_t contested = 0;
    REQUIRE(reporter.register_gauge("fam:contested", mode, {}, contested) == rankstat::Status::kOk);
    REQUIRE(reporter.gauge_set(contested, value) == rankstat::Status::kOk);
  }
};

// A writer with a counter of its own and one histogram of the contested family.
struct HistogramWriter {
  rankstat::Reporter reporter;
  HistogramWriter(const TempDir& dir, int dp, const std::vector<double>& bounds, int observations,
                  double counted) {
    REQUIRE(reporter.open(rankstat::testkit::small_segment_options(dir, "fam", dp)) == rankstat::Status::kOk);
    std::uint32_t counter = 0;
    REQUIRE(reporter.register_counter("fam:requests_total", {}, counter) == rankstat::Status::kOk);
    REQUIRE(reporter.counter_add(counter, counted) == rankstat::Status::kOk);
    std::uint32_t histogram = 0;
    REQUIRE(reporter.register_histogram("fam:latency_seconds", {}, bounds, histogram) ==
            rankstat::Status::kOk);
    for (int i = 0; i < observations; ++i)
      REQUIRE(reporter.histogram_observe(histogram, 0.5) == rankstat::Status::kOk);
  }
};

// What a scrape would serve of the engine families: every held generation, then the retired totals.
std::vector<prometheus::MetricFamily> scrape(rankstat::SegmentRegistry& registry,
                                             rankstat::RetiredTotals& retired) {
  registry.refresh_cumulative();
  rankstat::FamilySet set;
  rankstat::CollectOptions options;
  options.now_ns = rankstat::shm::monotonic_ns();
  options.dead_grace_ns = 60'000'000'000ull;
  rankstat::collect_engine_metrics(registry.generations(), options, set);
  retired.contribute(set, registry.retired_families_left_out());
  return set.finish();
}

const prometheus::MetricFamily* family(const std::vector<prometheus::MetricFamily>& families,
                                       const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<double> gauge_values(const prometheus::MetricFamily* f) {
  std::vector<double> out;
  if (f == nullptr) return out;
  for (const auto& m : f->metric) out.push_back(m.gauge.value);
  return out;
}

double counter_sum(const prometheus::MetricFamily* f) {
  double total = 0;
  if (f == nullptr) return total;
  for (const auto& m : f->metric) total += m.counter.value;
  return total;
}

// The bucket bounds (without +Inf) and the count of the family's one histogram series.
std::optional<std::pair<std::vector<double>, std::uint64_t>> histogram(const prometheus::MetricFamily* f) {
  if (f == nullptr || f->metric.size() != 1) return std::nullopt;
  std::vector<double> bounds;
  for (const auto& b : f->metric.front().histogram.bucket) {
    if (b.upper_bound != std::numeric_limits<double>::infinity()) bounds.push_back(b.upper_bound);
  }
  return std::make_pair(bounds, f->metric.front().histogram.sample_count);
}

// Segments started one after the other get distinct start times (the rule's first key after liveness).
void next_start() {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

}  // namespace

TEST_CASE("a declaration is described in words: type, gauge mode name, bucket bounds", "[family]") {
  CHECK(rankstat::describe_declaration({}) == "counter");
  CHECK(rankstat::describe_declaration(FamilyDeclaration::gauge(GaugeMode::kLiveSum)) ==
        "gauge (multiprocess_mode livesum)");
  FamilyDeclaration h;
  h.kind = rankstat::shm::SeriesKind::kHistogram;
  h.bounds = {0.5, 1, 1e6};
  CHECK(rankstat::describe_declaration(h) == "histogram with buckets [0.5, 1.0, 1e+06, +Inf]");
  h.kind = rankstat::shm::SeriesKind::kSummary;
  h.bounds.clear();
  CHECK(rankstat::describe_declaration(h) == "summary");
}

TEST_CASE(
    "two processes declaring one gauge family with other modes lose only that family's older series, "
    "whichever segment is opened first",
    "[family]") {
  // The older writer is dp0 or dp1 (name order is the scan's order), and the registry scans either
  // once both exist or between the two: four attach orders, one outcome.
  const bool older_is_dp0 = GENERATE(true, false);
  const bool scan_between = GENERATE(true, false);
  CAPTURE(older_is_dp0, scan_between);
  TempDir dir;
  rankstat::RetiredTotals retired("");
  rankstat::SegmentRegistry registry(options_for(dir), retired);
  const int older_dp = older_is_dp0 ? 0 : 1;
  const int newer_dp = 1 - older_dp;
  GaugeWriter older(dir, older_dp, GaugeMode::kLiveSum, 1);
  if (scan_between) {
    REQUIRE(registry.scan(rankstat::shm::monotonic_ns()) == 1);
    registry.refresh_cumulative();
  }
  next_start();
  GaugeWriter newer(dir, newer_dp, GaugeMode::kMax, 9);
  registry.scan(rankstat::shm::monotonic_ns());
  REQUIRE(registry.current().size() == 2);
  const auto families = scrape(registry, retired);
  // The unrelated families of both processes are served.
  CHECK(counter_sum(family(families, "fam:own_" + std::to_string(older_dp) + "_total")) == 1 + older_dp);
  CHECK(counter_sum(family(families, "fam:own_" + std::to_string(newer_dp) + "_total")) == 1 + newer_dp);
  // The contested family: the newer process's declaration, and only its series.
  CHECK(gauge_values(family(families, "fam:contested")) == std::vector<double>{9});
  CHECK(registry.counters().family_conflicts == 1);
  CHECK(registry.counters().family_conflict_series == 1);
  // Counted once, not at every resolution.
  scrape(registry, retired);
  CHECK(registry.counters().family_conflicts == 1);
}

TEST_CASE("a conflict is forgotten once the generation holding the losing declaration is gone", "[family]") {
  TempDir dir;
  rankstat::RetiredTotals retired("");
  auto options = options_for(dir);
  options.dead_grace = std::chrono::milliseconds(0);
  rankstat::SegmentRegistry registry(options, retired);
  auto older = std::make_unique<GaugeWriter>(dir, 0, GaugeMode::kLiveSum, 1);
  next_start();
  GaugeWriter newer(dir, 1, GaugeMode::kMax, 9);
  registry.scan(rankstat::shm::monotonic_ns());
  scrape(registry, retired);
  REQUIRE(registry.counters().family_conflict_series == 1);
  older->reporter.close();
  registry.check_liveness(rankstat::shm::monotonic_ns(), std::chrono::seconds(30));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(registry.retire_expired(rankstat::shm::monotonic_ns()) == 1);
  const auto families = scrape(registry, retired);
  CHECK(registry.counters().family_conflict_series == 0);
  CHECK(gauge_values(family(families, "fam:contested")) == std::vector<double>{9});
  // The dead generation's counter stays in the retired totals.
  CHECK(counter_sum(family(families, "fam:own_0_total")) == 1);
  // A process started now with the old mode is the newest live declaration: it wins in turn.
  next_start();
  GaugeWriter third(dir, 2, GaugeMode::kLiveSum, 4);
  registry.scan(rankstat::shm::monotonic_ns());
  CHECK(gauge_values(family(scrape(registry, retired), "fam:contested")) == std::vector<double>{4});
  CHECK(registry.counters().family_conflicts == 2);
}

TEST_CASE(
    "an upgrade that changes a histogram's buckets serves the new buckets at once and replaces the old "
    "retired totals when the new generation retires",
    "[family]") {
  TempDir dir;
  rankstat::RetiredTotals retired("");
  rankstat::SegmentRegistry registry(options_for(dir), retired);
  {
    HistogramWriter old_engine(dir, 0, {1, 2}, 3, 4);
    registry.scan(rankstat::shm::monotonic_ns());
    scrape(registry, retired);
    old_engine.reporter.close();
    registry.check_liveness(rankstat::shm::monotonic_ns(), std::chrono::seconds(30));
  }
  REQUIRE(retired.declarations().at("fam:latency_seconds").bounds == std::vector<double>{1, 2});
  next_start();
  HistogramWriter new_engine(dir, 0, {5, 10, 20}, 2, 5);
  REQUIRE(registry.scan(rankstat::shm::monotonic_ns()) == 1);
  auto families = scrape(registry, retired);
  // The new buckets only: the old generation's retired histogram is left out, its counter is not.
  CHECK(histogram(family(families, "fam:latency_seconds")) ==
        std::make_pair(std::vector<double>{5, 10, 20}, std::uint64_t{2}));
  CHECK(counter_sum(family(families, "fam:requests_total")) == 9);
  CHECK(registry.retired_families_left_out() == std::set<std::string>{"fam:latency_seconds"});
  CHECK(registry.counters().family_conflicts == 1);
  // The new generation ends: its totals replace the old declaration's in the retired totals.
  new_engine.reporter.close();
  registry.check_liveness(rankstat::shm::monotonic_ns(), std::chrono::seconds(30));
  CHECK(retired.declarations().at("fam:latency_seconds").bounds == std::vector<double>{5, 10, 20});
  families = scrape(registry, retired);
  CHECK(histogram(family(families, "fam:latency_seconds")) ==
        std::make_pair(std::vector<double>{5, 10, 20}, std::uint64_t{2}));
  CHECK(counter_sum(family(families, "fam:requests_total")) == 9);
  CHECK(registry.retired_families_left_out().empty());
}

TEST_CASE(
    "two ended generations with other buckets found at start leave the newer one's buckets in the retired "
    "totals, whichever name sorts first",
    "[family]") {
  const bool older_is_dp0 = GENERATE(true, false);
  CAPTURE(older_is_dp0);
  TempDir dir;
  {
    HistogramWriter older(dir, older_is_dp0 ? 0 : 1, {1, 2}, 3, 4);
    next_start();
    HistogramWriter newer(dir, older_is_dp0 ? 1 : 0, {5, 10, 20}, 2, 5);
    older.reporter.close();
    newer.reporter.close();
  }
  rankstat::RetiredTotals retired("");
  rankstat::SegmentRegistry registry(options_for(dir), retired);
  REQUIRE(registry.scan(rankstat::shm::monotonic_ns()) == 2);
  const auto families = scrape(registry, retired);
  CHECK(retired.declarations().at("fam:latency_seconds").bounds == std::vector<double>{5, 10, 20});
  CHECK(histogram(family(families, "fam:latency_seconds")) ==
        std::make_pair(std::vector<double>{5, 10, 20}, std::uint64_t{2}));
  CHECK(counter_sum(family(families, "fam:requests_total")) == 9);
}
