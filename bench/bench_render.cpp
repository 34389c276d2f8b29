// Where a scrape's time goes, stage by stage, in one process: N simulated ranks (bench_metric_set.hpp)
// write into segments in a private directory; the daemon's own code drains them, aggregates, serializes
// and compresses, each stage timed separately, two ways in the same run:
//   reference: a fresh FamilySet per scrape, finish(), prometheus::TextSerializer, whole-body gzip
//              (what rankstatd did before the cached exposition);
//   cached:    the persistent FamilySet with slots and pre-rendered heads, FamilySet::render, and
//              ChunkedGzip (what rankstatd does now).
// The cached text is compared byte for byte every round with the plain serializer's text of the same
// families in the same spelling (prometheus_client's, text_exposition.hpp); a mismatch fails the run.
//
//   rankstat_bench_render --metric-set FILE --ranks N [--rounds R]
// Prints one JSON object: per stage, the median milliseconds over R rounds (each round first makes every
// rank log one new step, so every family changes between rounds), and the text sizes.
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "bench_metric_set.hpp"
#include "engine_collect.hpp"
#include "http/chunked_gzip.hpp"
#include "http/gzip.hpp"
#include "rankstat/shmproto/process.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "text_exposition.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string metric_set;
  int ranks = 32;
  int rounds = 10;
  bool skip_reference = false;
  CLI::App app{"rankstat scrape pipeline breakdown"};
  app.add_option("--metric-set", metric_set)->required();
  app.add_option("--ranks", ranks);
  app.add_option("--rounds", rounds);
  app.add_flag("--skip-reference", skip_reference, "Time the cached path only (for profiling)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  const std::string dir = "/dev/shm/rankstat-bench-render-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  int rc = 0;
  try {
    const auto rows = rankstat::bench::load_metric_set(metric_set);
    std::vector<std::unique_ptr<rankstat::Reporter>> reporters;
    std::vector<std::unique_ptr<rankstat::bench::SimulatedRank>> simulated;
    for (int r = 0; r < ranks; ++r) {
      rankstat::ReporterOptions options;
      options.shm_dir = dir;
      options.identity.instance = "bench";
      options.identity.model_name = "meta-llama/Llama-3.1-70B-Instruct";
      options.identity.tp_rank = r;
      options.identity.flags = rankstat::shm::kFlagAllSchedulersMetrics;
      options.geometry.ring_bytes = 64 * 1024;
      auto reporter = std::make_unique<rankstat::Reporter>();
      if (reporter->open(options) != rankstat::Status::kOk)
        throw std::runtime_error(reporter->error_message());
      simulated.push_back(
          std::make_unique<rankstat::bench::SimulatedRank>(*reporter, rows, static_cast<std::uint32_t>(r)));
      reporters.push_back(std::move(reporter));
    }
    rankstat::RetiredTotals retired("");
    rankstat::RegistryOptions options;
    options.directory = dir;
    rankstat::SegmentRegistry registry(options, retired);
    registry.scan(rankstat::shm::monotonic_ns());

    std::map<std::string, std::vector<double>> stages;
    std::size_t text_bytes = 0;
    std::size_t gzip_bytes = 0;
    std::size_t chunked_gzip_bytes = 0;
    std::uint64_t step = 1;
    rankstat::FamilySet persistent;
    rankstat::http::ChunkedGzip chunked(1);
    for (int round = 0; round < rounds + 1; ++round) {
      for (auto& s : simulated) s->step(step);
      ++step;
      const auto t0 = Clock::now();
      registry.drain_all(rankstat::shm::monotonic_ns());
      registry.refresh_cumulative();
      rankstat::CollectOptions collect;
      collect.now_ns = rankstat::shm::monotonic_ns();
      const auto t1 = Clock::now();
      std::string text;
      std::string expected;
      std::string gz;
      auto t2 = t1;
      auto t3 = t1;
      auto t3_gzipped = t1;
      if (!skip_reference) {
        rankstat::FamilySet set;
        rankstat::collect_engine_metrics(registry.generations(), collect, set);
        retired.contribute(set);
        auto families = set.finish();
        t2 = Clock::now();
        text = prometheus::TextSerializer().Serialize(families);
        t3 = Clock::now();
        gz = rankstat::http::gzip_compress(text, 1);
        t3_gzipped = Clock::now();
        expected =
            rankstat::exposition::serialize(families, rankstat::exposition::Dialect::kPrometheusClient);
      }
      const auto t4 = Clock::now();
      rankstat::collect_engine_metrics(registry.generations(), collect, persistent);
      retired.contribute(persistent);
      const auto t5 = Clock::now();
      // Into the compressor's buffer, as rankstatd renders a gzip scrape.
      std::string& body = chunked.next_body();
      std::vector<std::size_t> ends;
      persistent.render(body, &ends);
      const auto t6 = Clock::now();
      const std::size_t body_bytes = body.size();
      if (!skip_reference && body != expected)
        throw std::runtime_error("cached exposition differs from the plain serializer's");
      const auto t6b = Clock::now();
      const auto chunked_gz = chunked.compress(ends);
      const auto t7 = Clock::now();
      if (round == 0) continue;  // warm-up: fills the caches
      stages["drain_refresh"].push_back(ms(t0, t1));
      stages["reference_aggregate"].push_back(ms(t1, t2));
      stages["reference_serialize"].push_back(ms(t2, t3));
      stages["reference_gzip"].push_back(ms(t3, t3_gzipped));  // the comparison text is not timed
      stages["cached_aggregate"].push_back(ms(t4, t5));
      stages["cached_render"].push_back(ms(t5, t6));
      stages["cached_gzip"].push_back(ms(t6b, t7));
      text_bytes = body_bytes;
      gzip_bytes = gz.size();
      chunked_gzip_bytes = chunked_gz->size();
    }
    std::printf(
        "{\"ranks\":%d,\"gzip_engine\":\"%s\",\"text_bytes\":%zu,\"gzip_bytes\":%zu,\"chunked_gzip_bytes\":%"
        "zu",
        ranks, std::string(chunked.engine()).c_str(), text_bytes, gzip_bytes, chunked_gzip_bytes);
    for (const auto& [name, values] : stages) std::printf(",\"%s_ms\":%.4f", name.c_str(), median(values));
    std::printf("}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_render: %s\n", e.what());
    rc = 1;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
