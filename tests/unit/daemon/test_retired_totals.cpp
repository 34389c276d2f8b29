// RetiredTotals (daemon/src/retired_totals.hpp): counters and histograms of generations the daemon let go
// of. Through the registry with real segments (a rank restarting under the same name), then the store
// itself: persisted and read back by a new instance (a daemon restart), and refusing damaged or forged
// state files without losing the state it can keep.
#include <sys/stat.h>

#include <array>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregation.hpp"
#include "rankstat/reporter.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "small_segment.hpp"
#include "testkit.hpp"

using rankstat::Labels;
using rankstat::Reporter;
using rankstat::RetiredTotals;
using rankstat::Status;
using rankstat::testkit::TempDir;
namespace shm = rankstat::shm;

namespace {

const prometheus::MetricFamily* find_family(const std::vector<prometheus::MetricFamily>& families,
                                            const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The value of `family`'s only counter series, -1 when absent.
double counter_value(const std::vector<prometheus::MetricFamily>& families, const std::string& name) {
  const auto* f = find_family(families, name);
  if (f == nullptr || f->metric.size() != 1) return -1;
  return f->metric[0].counter.value;
}

std::uint64_t histogram_count(const std::vector<prometheus::MetricFamily>& families,
                              const std::string& name) {
  const auto* f = find_family(families, name);
  if (f == nullptr || f->metric.size() != 1) return 0;
  return f->metric[0].histogram.sample_count;
}

std::vector<prometheus::MetricFamily> contributed(const RetiredTotals& retired) {
  rankstat::FamilySet set;
  retired.contribute(set);
  return set.finish();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// A rank with one counter and one histogram, both without identity labels, so that every generation of
// the rank contributes to the same series.
struct Rank {
  Reporter writer;
  std::uint32_t counter = 0;
  std::uint32_t histogram = 0;

  explicit Rank(const TempDir& dir) {
    REQUIRE(writer.open(rankstat::testkit::small_segment_options(dir, "retired", 0)) == Status::kOk);
    Reporter::SeriesSpec spec;
    spec.kind = shm::SeriesKind::kCounter;
    spec.family = "engine:requests";
    spec.flags = shm::kSeriesWithoutIdentityLabels;
    REQUIRE(writer.register_series(spec, counter) == Status::kOk);
    static constexpr std::array<double, 2> kBounds{0.1, 1.0};
    spec.kind = shm::SeriesKind::kHistogram;
    spec.family = "engine:latency_seconds";
    spec.bounds = kBounds;
    REQUIRE(writer.register_series(spec, histogram) == Status::kOk);
  }
};

// One daemon's registry over `shm`, retiring into `retired`, with no grace for exited generations.
struct Daemon {
  rankstat::SegmentRegistry registry;
  rankstat::RetiredTotals& retired;
  rankstat::FamilySet set;

  Daemon(const TempDir& shm, rankstat::RetiredTotals& totals)
      : registry(options(shm), totals), retired(totals) {}
  static rankstat::RegistryOptions options(const TempDir& shm) {
    rankstat::RegistryOptions o;
    o.directory = shm.path();
    o.fd_budget = 1000;
    o.dead_grace = std::chrono::milliseconds(0);
    return o;
  }
  // What a scrape exports now: every generation the registry holds plus the retired totals.
  std::vector<prometheus::MetricFamily> scrape() {
    const std::uint64_t now = shm::monotonic_ns();
    registry.scan(now);
    registry.check_liveness(now, std::chrono::seconds(30));
    registry.drain_all(now);
    registry.refresh_cumulative();
    rankstat::CollectOptions collect;
    collect.now_ns = now;
    rankstat::collect_engine_metrics(registry.generations(), collect, set);
    retired.contribute(set);
    return set.finish();
  }
};

}  // namespace

TEST_CASE("a dead rank's counters survive its restart, and then the daemon's restart", "[retired_totals]") {
  TempDir shm("rankstat-retired-shm");
  TempDir state("rankstat-retired-state");
  RetiredTotals retired(state.path());
  std::string error;
  REQUIRE(retired.load(error));
  Daemon daemon(shm, retired);
  std::vector<double> seen;
  std::vector<std::uint64_t> observations;
  auto scrape = [&] {
    const auto families = daemon.scrape();
    seen.push_back(counter_value(families, "engine:requests"));
    observations.push_back(histogram_count(families, "engine:latency_seconds"));
  };
  {
    Rank first(shm);
    REQUIRE(first.writer.counter_add(first.counter, 10) == Status::kOk);
    REQUIRE(first.writer.histogram_observe(first.histogram, 0.5) == Status::kOk);
    scrape();
    first.writer.close();
    scrape();  // CLOSED: still exported from its mapping
  }
  // The rank restarts under the same segment name: a new generation replaces the file.
  Rank second(shm);
  REQUIRE(second.writer.counter_add(second.counter, 1) == Status::kOk);
  REQUIRE(second.writer.histogram_observe(second.histogram, 0.05) == Status::kOk);
  scrape();
  // The exited generation has been let go of: its totals are now the retired ones.
  CHECK(daemon.registry.retire_expired(shm::monotonic_ns() + 1'000'000) >= 0);
  scrape();
  CHECK(retired.generations() == 1);
  CHECK(retired.series() == 2);
  REQUIRE(daemon.registry.generations().size() == 1);
  REQUIRE(second.writer.counter_add(second.counter, 2) == Status::kOk);
  scrape();

  // A new daemon reads the retired totals back and adds the live generation once.
  RetiredTotals restarted_totals(state.path());
  REQUIRE(restarted_totals.load(error));
  Daemon restarted(shm, restarted_totals);
  const auto families = restarted.scrape();
  seen.push_back(counter_value(families, "engine:requests"));
  observations.push_back(histogram_count(families, "engine:latency_seconds"));

  INFO("counter values per scrape: " << ::Catch::Detail::stringify(seen));
  CHECK(seen == std::vector<double>{10, 10, 11, 11, 13, 13});
  CHECK(observations == std::vector<std::uint64_t>{1, 1, 2, 2, 2, 2});
}

TEST_CASE("retired totals are persisted and a restarted daemon reads them back without counting twice",
          "[retired_totals]") {
  TempDir state("rankstat-retired-state");
  const RetiredTotals::GenerationKey gone{"rankstat.a.scheduler.dp0", 41};
  const Labels labels{{"model", "m"}};
  {
    RetiredTotals before(state.path());
    std::string error;
    REQUIRE(before.load(error));
    before.add_counter(gone, "engine:requests", labels, 12.5, "Requests.");
    before.add_histogram(gone, "engine:latency_seconds", labels, {0.1, 1.0}, {1, 2, 3}, 4.5, "Latency.");
    before.add_histogram(gone, "engine:size_bytes", labels, {}, {4}, 400, "Size.", /*summary=*/true);
    before.mark_retired(gone);
    REQUIRE(before.save(error));
  }
  RetiredTotals after(state.path());
  std::string error;
  REQUIRE(after.load(error));
  CHECK(error.empty());
  CHECK(after.invalid_entries() == 0);
  CHECK(after.series() == 3);
  CHECK(after.holds(gone));
  CHECK(after.holds_nonce(41));
  CHECK_FALSE(after.holds_nonce(42));

  // The same generation, met again by the new daemon (its file could not be unlinked), adds nothing.
  after.add_counter(gone, "engine:requests", labels, 12.5);
  const auto families = contributed(after);
  CHECK(counter_value(families, "engine:requests") == 12.5);
  const auto* latency = find_family(families, "engine:latency_seconds");
  REQUIRE(latency != nullptr);
  REQUIRE(latency->metric.size() == 1);
  CHECK(latency->type == prometheus::MetricType::Histogram);
  CHECK(latency->help == "Latency.");
  CHECK(latency->metric[0].histogram.sample_count == 6);
  CHECK(latency->metric[0].histogram.sample_sum == 4.5);
  const auto* size = find_family(families, "engine:size_bytes");
  REQUIRE(size != nullptr);
  CHECK(size->type == prometheus::MetricType::Summary);
  CHECK(size->metric[0].summary.sample_count == 4);

  // Another generation of the same series adds to it.
  after.add_counter({"rankstat.a.scheduler.dp0", 43}, "engine:requests", labels, 1);
  CHECK(counter_value(contributed(after), "engine:requests") == 13.5);
}

TEST_CASE("a corrupted state file is refused and left for inspection, and integral checkpoints still load",
          "[retired_totals]") {
  TempDir state("rankstat-retired-state");
  const RetiredTotals::GenerationKey live{"rankstat.a.scheduler.dp0", 7};
  {
    RetiredTotals before(state.path());
    std::map<RetiredTotals::GenerationKey, RetiredTotals::LiveCheckpoint> checkpoints;
    checkpoints[live].integrals["field:num_queue_reqs"] = rankstat::IntegralCheckpoint{25.0, 5.0, 1000};
    std::string error;
    REQUIRE(before.save_checkpoints(checkpoints, true, error));
  }
  const std::string path = state.path() + "/retired-totals.json";
  const std::string garbage = "{\"version\": 1, \"generations\": [[\"x\"";  // cut short
  write_text(path, garbage);

  RetiredTotals after(state.path());
  std::string error;
  CHECK_FALSE(after.load(error));
  CHECK(error.find("not a valid state file") != std::string::npos);
  CHECK(after.series() == 0);
  CHECK(after.generations() == 0);
  CHECK(rankstat::testkit::read_file(path) == garbage);  // kept for the operator
  const auto checkpoints = after.take_checkpoints(live);
  REQUIRE(checkpoints.count("field:num_queue_reqs") == 1);
  CHECK(checkpoints.at("field:num_queue_reqs").integral == 25.0);
}

TEST_CASE("forged entries of a state file are dropped and counted, the valid ones kept", "[retired_totals]") {
  TempDir state("rankstat-retired-state");
  const RetiredTotals::GenerationKey gone{"rankstat.a.scheduler.dp0", 9};
  {
    RetiredTotals before(state.path());
    before.add_counter(gone, "engine:requests", {}, 3);
    before.add_histogram(gone, "engine:latency_seconds", {}, {1.0}, {1, 1}, 2.5);
    before.mark_retired(gone);
    std::string error;
    REQUIRE(before.save(error));
  }
  const std::string path = state.path() + "/retired-totals.json";
  boost::json::object doc = boost::json::parse(rankstat::testkit::read_file(path)).as_object();
  auto& counters = doc["counters"].as_array();
  auto forged = [](std::string family, boost::json::array labels, double value) {
    return boost::json::object{
        {"family", std::move(family)}, {"labels", std::move(labels)}, {"value", value}};
  };
  counters.emplace_back(forged("engine:evil\n# HELP injected", {}, 1));  // a newline in the name
  counters.emplace_back(forged("engine:negative", {}, -5));              // counters never go down
  counters.emplace_back(forged("engine:reserved", {boost::json::array{"__name__", "x"}}, 1));
  doc["histograms"].as_array().emplace_back(boost::json::object{{"family", "engine:unordered"},
                                                                {"labels", boost::json::array{}},
                                                                {"bounds", boost::json::array{2.0, 1.0}},
                                                                {"counts", boost::json::array{1, 1, 1}},
                                                                {"sum", 1.0}});
  write_text(path, boost::json::serialize(doc));

  RetiredTotals after(state.path());
  std::string error;
  REQUIRE(after.load(error));
  CHECK(after.invalid_entries() == 4);
  CHECK(after.series() == 2);
  CHECK(after.holds(gone));
  const auto families = contributed(after);
  CHECK(counter_value(families, "engine:requests") == 3);
  CHECK(histogram_count(families, "engine:latency_seconds") == 2);
  CHECK(find_family(families, "engine:negative") == nullptr);
  CHECK(find_family(families, "engine:unordered") == nullptr);
}

TEST_CASE("a state file of another version is refused and nothing of it is served", "[retired_totals]") {
  TempDir state("rankstat-retired-state");
  write_text(state.path() + "/retired-totals.json",
             R"({"version": 999, "generations": [], "counters": [{"family": "engine:x", "labels": [],)"
             R"( "value": 1}], "histograms": []})");
  RetiredTotals after(state.path());
  std::string error;
  CHECK_FALSE(after.load(error));
  CHECK(error.find("unknown state version") != std::string::npos);
  CHECK(after.series() == 0);
}

TEST_CASE("without a state directory the totals live in memory only", "[retired_totals]") {
  RetiredTotals memory("");
  CHECK_FALSE(memory.persistent());
  std::string error;
  CHECK(memory.load(error));
  memory.add_counter({"rankstat.a.scheduler.dp0", 1}, "engine:requests", {}, 2);
  CHECK(memory.save(error));
  CHECK(counter_value(contributed(memory), "engine:requests") == 2);
}

TEST_CASE(
    "a checkpoint keeps a generation's totals until the retired totals on disk hold them, folded once, "
    "its forged entries dropped",
    "[retired_totals]") {
  TempDir state("rankstat-retired-state");
  const RetiredTotals::GenerationKey live{"rankstat.a.scheduler.dp0", 5};
  const RetiredTotals::GenerationKey folded{"rankstat.a.scheduler.dp1", 6};
  rankstat::CumulativeTotals totals;
  const auto labels = std::make_shared<const Labels>(Labels{{"model", "m"}});
  totals.counters.push_back({"engine:requests", "Requests.", labels, 4});
  totals.histograms.push_back({"engine:latency_seconds", "Latency.", labels, {1.0}, {1, 2}, 2.5});
  std::string error;
  {
    RetiredTotals before(state.path());
    REQUIRE(before.load(error));
    std::map<RetiredTotals::GenerationKey, RetiredTotals::LiveCheckpoint> checkpoints;
    checkpoints[live].totals = totals;
    checkpoints[folded].totals = totals;
    REQUIRE(before.save_checkpoints(checkpoints, true, error));
    // dp1 dies and is folded and persisted; the daemon stops before its next checkpoint, which would no
    // longer have carried it.
    before.fold(folded, totals);
    CHECK_FALSE(before.persisted(folded));
    REQUIRE(before.save(error));
    CHECK(before.persisted(folded));
  }
  const std::string path = state.path() + "/integrals.json";
  boost::json::object doc = boost::json::parse(rankstat::testkit::read_file(path)).as_object();
  auto& types = doc["types"].as_array();
  types.emplace_back(boost::json::array{"engine:evil\n# HELP injected", "", 0, boost::json::array{}});
  const std::size_t evil = types.size() - 1;
  for (auto& generation : doc["generations"].as_array())
    generation.as_object()["counters"].as_array().emplace_back(boost::json::array{evil, 0, 1.0});
  write_text(path, boost::json::serialize(doc));

  RetiredTotals after(state.path());
  REQUIRE(after.load(error));
  CHECK(after.invalid_entries() == 2);  // one per generation entry
  // dp1's checkpoint is dropped: the retired totals hold it already.
  REQUIRE(after.unclaimed_totals() == std::vector<RetiredTotals::GenerationKey>{live});
  after.fold_unclaimed(live);
  after.fold_unclaimed(live);  // never twice
  CHECK(after.holds(live));
  CHECK_FALSE(after.persisted(live));
  const auto families = contributed(after);
  CHECK(counter_value(families, "engine:requests") == 8);
  CHECK(histogram_count(families, "engine:latency_seconds") == 6);
  CHECK(find_family(families, "engine:evil") == nullptr);
  REQUIRE(after.save(error));
  CHECK(after.persisted(live));

  RetiredTotals reloaded(state.path());
  REQUIRE(reloaded.load(error));
  CHECK(reloaded.unclaimed_totals().empty());  // both generations of the checkpoint are retired now
  CHECK(counter_value(contributed(reloaded), "engine:requests") == 8);

  // A generation that is opened claims its checkpoint: its integrals continue, its totals are read from
  // the segment itself and never folded.
  TempDir other("rankstat-retired-state");
  const RetiredTotals::GenerationKey opened{"rankstat.a.scheduler.dp2", 7};
  {
    RetiredTotals before(other.path());
    std::map<RetiredTotals::GenerationKey, RetiredTotals::LiveCheckpoint> checkpoints;
    checkpoints[opened].totals = totals;
    checkpoints[opened].integrals["field:num_queue_reqs"] = rankstat::IntegralCheckpoint{25.0, 5.0, 1000};
    REQUIRE(before.save_checkpoints(checkpoints, true, error));
  }
  RetiredTotals restarted(other.path());
  REQUIRE(restarted.load(error));
  REQUIRE(restarted.unclaimed_totals().size() == 1);
  CHECK(restarted.take_checkpoints(opened).count("field:num_queue_reqs") == 1);
  CHECK(restarted.unclaimed_totals().empty());
  CHECK(restarted.series() == 0);
}

TEST_CASE(
    "a folded generation whose file a restarted daemon cannot open at first is still never counted twice",
    "[retired_totals]") {
  TempDir shm("rankstat-retired-shm");
  TempDir state("rankstat-retired-state");
  std::string error;
  {
    RetiredTotals retired(state.path());
    REQUIRE(retired.load(error));
    Daemon daemon(shm, retired);
    Rank rank(shm);
    REQUIRE(rank.writer.counter_add(rank.counter, 10) == Status::kOk);
    daemon.scrape();
    rank.writer.close();
    // CLOSED: folded and persisted at once; its file stays for the grace period (never retired here).
    CHECK(counter_value(daemon.scrape(), "engine:requests") == 10);
    CHECK(retired.persisted({shm.list().at(0), daemon.registry.generations().at(0)->identity().generation}));
  }
  REQUIRE(shm.list().size() == 1);
  RetiredTotals retired(state.path());
  REQUIRE(retired.load(error));
  {
    // A restarted daemon without a descriptor to spare: its first scan opens nothing.
    rankstat::RegistryOptions starved = Daemon::options(shm);
    starved.fd_budget = 1;
    rankstat::SegmentRegistry registry(starved, retired);
    registry.scan(shm::monotonic_ns());
    CHECK(registry.generations().empty());
  }
  Daemon daemon(shm, retired);  // descriptors again: the file is met, and known
  CHECK(counter_value(daemon.scrape(), "engine:requests") == 10);
}

TEST_CASE("a checkpoint is written again only when what a scrape serves moved, and then holds the new values",
          "[retired_totals]") {
  TempDir shm("rankstat-retired-shm");
  TempDir state("rankstat-retired-state");
  RetiredTotals retired(state.path());
  std::string error;
  REQUIRE(retired.load(error));
  Daemon daemon(shm, retired);
  Rank rank(shm);
  REQUIRE(rank.writer.counter_add(rank.counter, 5) == Status::kOk);
  const std::string path = state.path() + "/integrals.json";
  // replace_file() renames a new file over the old one: a new inode is a write.
  const auto inode = [&] {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_ino;
  };
  daemon.scrape();
  REQUIRE(daemon.registry.save_checkpoints(error));
  const auto first = inode();
  daemon.scrape();
  REQUIRE(daemon.registry.save_checkpoints(error));
  CHECK(inode() == first);  // nothing moved: not rewritten
  REQUIRE(rank.writer.counter_add(rank.counter, 2) == Status::kOk);
  daemon.scrape();
  REQUIRE(daemon.registry.save_checkpoints(error));
  CHECK(inode() != first);
  // What was written is what a restarted daemon finds: the moved total (7), kept for the generation.
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"counters\":[[0,0,7]]") != std::string::npos);
}
