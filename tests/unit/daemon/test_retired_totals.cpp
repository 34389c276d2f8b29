// RetiredTotals (daemon/src/retired_totals.hpp): counters and histograms of generations the daemon let go
// of. Through the registry with real segments (a rank restarting under the same name), then the store
// itself: persisted and read back by a new instance (a daemon restart), and refusing damaged or forged
// state files without losing the state it can keep.
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine_collect.hpp"
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
    REQUIRE(before.checkpoints().save(checkpoints, true, error));
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
  const auto checkpoints = after.checkpoints().take(live);
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
  // A NUL in the name (a newline is a name character now, written escaped or quoted).
  counters.emplace_back(forged(std::string("engine:evil\0\n# HELP injected", 28), {}, 1));
  counters.emplace_back(forged("engine:negative", {}, -5));  // counters never go down
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
    REQUIRE(before.checkpoints().save(checkpoints, true, error));
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
  // A newline is a name character now (any UTF-8 text is, written escaped or quoted); a NUL is not.
  constexpr std::string_view kForged("engine:evil\0\n# HELP injected", 28);
  types.emplace_back(boost::json::array{boost::json::string(kForged), "", 0, boost::json::array{}});
  const std::size_t evil = types.size() - 1;
  for (auto& generation : doc["generations"].as_array())
    generation.as_object()["counters"].as_array().emplace_back(boost::json::array{evil, 0, 1.0});
  write_text(path, boost::json::serialize(doc));

  RetiredTotals after(state.path());
  REQUIRE(after.load(error));
  CHECK(after.invalid_entries() == 2);  // one per generation entry
  // dp1's checkpoint is dropped: the retired totals hold it already.
  REQUIRE(after.checkpoints().unclaimed_totals() == std::vector<RetiredTotals::GenerationKey>{live});
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
  // Both generations of the checkpoint are retired now.
  CHECK(reloaded.checkpoints().unclaimed_totals().empty());
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
    REQUIRE(before.checkpoints().save(checkpoints, true, error));
  }
  RetiredTotals restarted(other.path());
  REQUIRE(restarted.load(error));
  REQUIRE(restarted.checkpoints().unclaimed_totals().size() == 1);
  CHECK(restarted.checkpoints().take(opened).count("field:num_queue_reqs") == 1);
  CHECK(restarted.checkpoints().unclaimed_totals().empty());
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

namespace {

// The counter, histogram and summary families of a rendered exposition, each as its HELP, TYPE and sample
// lines: what must never go backwards, so what the retired totals must serve exactly as the scrape did.
std::map<std::string, std::string> cumulative_families(const std::string& text) {
  std::map<std::string, std::string> out;
  std::string name;
  std::string block;
  bool cumulative = false;
  const auto flush = [&] {
    if (!name.empty() && cumulative) out[name] = block;
    name.clear();
    block.clear();
    cumulative = false;
  };
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.starts_with("# HELP ")) {
      flush();
      name = line.substr(7, line.find(' ', 7) - 7);
    } else if (line.starts_with("# TYPE ")) {
      for (const char* type : {" counter", " histogram", " summary"}) cumulative |= line.ends_with(type);
    }
    block += line + "\n";
  }
  flush();
  return out;
}

}  // namespace

TEST_CASE("a retired generation's totals are what its last scrape served", "[retired_totals]") {
  TempDir shm("rankstat-contribution-shm");
  TempDir state("rankstat-contribution-state");
  rankstat::ReporterOptions options;
  options.shm_dir = shm.path();
  options.identity.instance = "contribution";
  options.identity.extra_labels = {{"zone", "a\"b\\c\nd"}};
  options.geometry.ring_bytes = 64 * 1024;
  options.geometry.series_capacity = 32;
  options.geometry.bounds_capacity = 64;
  options.geometry.values_capacity = 256;
  Reporter writer;
  REQUIRE(writer.open(options) == Status::kOk);
  // Every kind of series: counters with the identity labels, with escaped labels of their own, and with
  // their own labels only; a histogram; a summary; a gauge of every mode (one integrated over time).
  const shm::LabelPairs escaped = {{"path", "C:\\tmp\n\"x\""}};
  const auto add = [&](shm::SeriesKind kind, std::string family, const shm::LabelPairs* labels = nullptr,
                       std::uint32_t flags = 0, shm::GaugeMode mode = shm::GaugeMode::kSum,
                       std::span<const double> bounds = {}) {
    Reporter::SeriesSpec spec;
    spec.kind = kind;
    spec.mode = mode;
    spec.flags = flags;
    spec.family = family;
    const std::string help = "Help of " + family + " with \\ and\nnewline.";
    spec.help = help;
    spec.labels = labels;
    spec.bounds = bounds;
    std::uint32_t id = 0;
    INFO(family);
    REQUIRE(writer.register_series(spec, id) == Status::kOk);
    return id;
  };
  const std::uint32_t requests = add(shm::SeriesKind::kCounter, "engine:requests_total");
  const std::uint32_t paths = add(shm::SeriesKind::kCounter, "engine:paths_total", &escaped);
  const std::uint32_t own =
      add(shm::SeriesKind::kCounter, "engine:own_total", &escaped, shm::kSeriesWithoutIdentityLabels);
  static constexpr std::array<double, 3> kBounds{0.1, 1.0, 10.0};
  const std::uint32_t latency =
      add(shm::SeriesKind::kHistogram, "engine:latency_seconds", &escaped, 0, shm::GaugeMode::kSum, kBounds);
  const std::uint32_t size = add(shm::SeriesKind::kSummary, "engine:size_bytes");
  REQUIRE(writer.counter_add(requests, 7) == Status::kOk);
  REQUIRE(writer.counter_add(paths, 0.1) == Status::kOk);
  REQUIRE(writer.counter_add(paths, 0.2) == Status::kOk);
  REQUIRE(writer.counter_add(own, 3) == Status::kOk);
  for (const double v : {0.05, 0.5, 5.0, 50.0}) REQUIRE(writer.histogram_observe(latency, v) == Status::kOk);
  REQUIRE(writer.histogram_observe(size, 1234) == Status::kOk);
  for (const shm::GaugeMode mode :
       {shm::GaugeMode::kAll, shm::GaugeMode::kLiveAll, shm::GaugeMode::kSum, shm::GaugeMode::kLiveSum,
        shm::GaugeMode::kMin, shm::GaugeMode::kLiveMin, shm::GaugeMode::kMax, shm::GaugeMode::kLiveMax,
        shm::GaugeMode::kMostRecent, shm::GaugeMode::kLiveMostRecent}) {
    const std::string family = "engine:gauge_" + std::string(shm::gauge_mode_name(mode));
    REQUIRE(writer.gauge_set(add(shm::SeriesKind::kGauge, family, &escaped, 0, mode), 2) == Status::kOk);
  }
  const std::uint32_t queue =
      add(shm::SeriesKind::kGauge, "engine:queue", nullptr, 0, shm::GaugeMode::kMostRecent);

  RetiredTotals retired(state.path());
  std::string error;
  REQUIRE(retired.load(error));
  rankstat::RegistryOptions registry_options = Daemon::options(shm);
  registry_options.instance_label = "engine_instance";
  registry_options.integrals.families = {"sglang:num_queue_reqs", "engine:queue"};
  registry_options.integrals.peak_window_ns = 60'000'000'000ull;
  rankstat::SegmentRegistry registry(registry_options, retired);
  REQUIRE(registry.scan(shm::monotonic_ns()) == 1);
  // The snapshot record's fields (one integrated too) and the integrated series, over some time.
  shm::SchedulerSnapshot snapshot{};
  snapshot.num_running_reqs = 3;
  snapshot.num_queue_reqs = 40;
  REQUIRE(writer.report_scheduler(snapshot) == Status::kOk);
  REQUIRE(writer.gauge_set(queue, 40) == Status::kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  snapshot.num_queue_reqs = 0;
  REQUIRE(writer.report_scheduler(snapshot) == Status::kOk);
  REQUIRE(writer.gauge_set(queue, 0) == Status::kOk);
  writer.close();

  rankstat::FamilySet set;
  const auto scrape = [&](RetiredTotals& totals, rankstat::SegmentRegistry& from) {
    const std::uint64_t now = shm::monotonic_ns();
    from.drain_all(now);
    from.refresh_cumulative();
    from.settle_integrals(now);
    rankstat::CollectOptions collect;
    collect.now_ns = now;
    collect.instance_label = "engine_instance";
    collect.integrals = &from.integrals();
    rankstat::collect_engine_metrics(from.generations(), collect, set);
    totals.contribute(set, from.retired_families_left_out());
    std::string text;
    set.render(text);
    return text;
  };
  // The last scrape of the live generation (its writer has closed; the liveness pass has not seen it).
  const std::string before_text = scrape(retired, registry);
  INFO(before_text);
  const auto before = cumulative_families(before_text);
  for (const char* family :
       {"engine:requests_total", "engine:paths_total", "engine:own_total", "engine:latency_seconds",
        "engine:size_bytes", "engine:queue_time_weighted_seconds_total",
        "sglang:num_queue_reqs_time_weighted_seconds_total"}) {
    CHECK(before.count(family) == 1);
  }
  CHECK(before_text.find("engine:gauge_livemostrecent") != std::string::npos);
  CHECK(before_text.find("sglang:num_running_reqs") != std::string::npos);

  // Closed, folded, retired (no grace): the segment is gone and the retired totals serve it.
  CHECK(registry.check_liveness(shm::monotonic_ns(), std::chrono::seconds(30)) == 1);
  CHECK(registry.retire_expired(shm::monotonic_ns() + 1'000'000) == 1);
  CHECK(registry.generations().empty());
  const std::string after_text = scrape(retired, registry);
  INFO(after_text);
  CHECK(cumulative_families(after_text) == before);
  CHECK(after_text.find("engine:gauge_") == std::string::npos);

  // And after a daemon restart, from the state file.
  RetiredTotals restarted(state.path());
  REQUIRE(restarted.load(error));
  CHECK(restarted.invalid_entries() == 0);
  rankstat::SegmentRegistry restarted_registry(registry_options, restarted);
  restarted_registry.scan(shm::monotonic_ns());
  CHECK(cumulative_families(scrape(restarted, restarted_registry)) == before);
}

TEST_CASE(
    "a dead process's NaN and +Inf totals stay in the retired totals, their state file and a checkpoint, "
    "and no other string stands for a number",
    "[retired_totals]") {
  TempDir state("rankstat-retired-state");
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const RetiredTotals::GenerationKey gone{"rankstat.a.scheduler.dp0", 11};
  const RetiredTotals::GenerationKey later{"rankstat.a.scheduler.dp0", 12};
  const RetiredTotals::GenerationKey live{"rankstat.a.scheduler.dp1", 13};
  std::string error;
  {
    RetiredTotals before(state.path());
    REQUIRE(before.load(error));
    before.add_counter(gone, "engine:inf_total", {}, inf);
    before.add_counter(gone, "engine:nan_total", {}, nan);
    before.add_histogram(gone, "engine:latency_seconds", {}, {1.0}, {1, 1}, -inf);
    before.mark_retired(gone);
    // A later generation's finite counts do not bring the totals back: +Inf + 5 is +Inf, as in the
    // sum prometheus_client's collector makes of the two files.
    before.add_counter(later, "engine:inf_total", {}, 5);
    before.add_counter(later, "engine:nan_total", {}, 5);
    before.mark_retired(later);
    REQUIRE(before.save(error));
    const auto families = contributed(before);
    CHECK(counter_value(families, "engine:inf_total") == inf);
    CHECK(std::isnan(counter_value(families, "engine:nan_total")));
    // A live generation's totals, checkpointed.
    rankstat::CumulativeTotals totals;
    const auto labels = std::make_shared<const Labels>();
    totals.counters.push_back({"engine:checkpointed_total", "", labels, inf});
    totals.histograms.push_back({"engine:checkpointed_seconds", "", labels, {1.0}, {0, 1}, nan});
    std::map<RetiredTotals::GenerationKey, RetiredTotals::LiveCheckpoint> checkpoints;
    checkpoints[live].totals = totals;
    REQUIRE(before.checkpoints().save(checkpoints, true, error));
  }
  const std::string path = state.path() + "/retired-totals.json";
  const std::string text = rankstat::testkit::read_file(path);
  CHECK(text.find(R"("value":"+Inf")") != std::string::npos);
  CHECK(text.find(R"("value":"NaN")") != std::string::npos);
  CHECK(text.find(R"("sum":"-Inf")") != std::string::npos);
  const std::string checkpoint = rankstat::testkit::read_file(state.path() + "/integrals.json");
  CHECK(checkpoint.find(R"(,"+Inf"])") != std::string::npos);
  CHECK(checkpoint.find(R"(,"NaN",[0,1]])") != std::string::npos);

  // A daemon restart: the state file gives them back, and so does the checkpoint of the live generation
  // (gone while no daemon ran).
  RetiredTotals after(state.path());
  REQUIRE(after.load(error));
  CHECK(after.invalid_entries() == 0);
  REQUIRE(after.checkpoints().unclaimed_totals() == std::vector<RetiredTotals::GenerationKey>{live});
  after.fold_unclaimed(live);
  const auto families = contributed(after);
  CHECK(counter_value(families, "engine:inf_total") == inf);
  CHECK(std::isnan(counter_value(families, "engine:nan_total")));
  const auto* latency = find_family(families, "engine:latency_seconds");
  REQUIRE(latency != nullptr);
  CHECK(latency->metric.at(0).histogram.sample_sum == -inf);
  CHECK(counter_value(families, "engine:checkpointed_total") == inf);
  const auto* checkpointed = find_family(families, "engine:checkpointed_seconds");
  REQUIRE(checkpointed != nullptr);
  CHECK(std::isnan(checkpointed->metric.at(0).histogram.sample_sum));

  // Only those three strings: any other spelling where a number belongs refuses the file.
  for (const std::string spelling : {"inf", "Infinity", "nan", "+inf", "1e999", ""}) {
    std::string forged = text;
    const std::string from = R"("value":"+Inf")";
    forged.replace(forged.find(from), from.size(), "\"value\":\"" + spelling + "\"");
    write_text(path, forged);
    RetiredTotals refused(state.path());
    INFO(spelling);
    CHECK_FALSE(refused.load(error));
    CHECK(refused.series() == 0);
  }
  // A negative counter total stays refused, -Inf included (a counter never takes a negative amount).
  std::string negative = text;
  const std::string from = R"("value":"+Inf")";
  negative.replace(negative.find(from), from.size(), R"("value":"-Inf")");
  write_text(path, negative);
  RetiredTotals refused(state.path());
  REQUIRE(refused.load(error));
  CHECK(refused.invalid_entries() == 1);
  CHECK(find_family(contributed(refused), "engine:inf_total") == nullptr);
}
