// Ingest throughput: scheduler-snapshot records drained and applied per second by one daemon thread
// (SegmentRegistry::drain_all, the code rankstatd's poll timer and every scrape run).
//
//   rankstat_bench_ingest [--segments K] [--ring-mib M] [--rounds R] [--integrals [--peak-window-ms MS]]
// Each round fills K rings (one writer Reporter each, in this process) with snapshot records carrying two
// per-priority entries, as a priority-scheduling SGLang rank writes them, until the rings are full; then
// times drain_all until every ring is empty. Prints one JSON object with the records/s of every round.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "engine_rules.hpp"
#include "gauge_integral.hpp"
#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/process.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"

int main(int argc, char** argv) {
  int segments = 4;
  int ring_mib = 4;
  int rounds = 5;
  bool integrals = false;
  int peak_window_ms = 15000;
  CLI::App app{"rankstat ingest throughput"};
  app.add_option("--segments", segments);
  app.add_option("--ring-mib", ring_mib);
  app.add_option("--rounds", rounds);
  app.add_flag("--integrals", integrals, "integrate rankstatd's default gauges (--aggregate.integrate)");
  app.add_option("--peak-window-ms", peak_window_ms, "with --integrals: the window of the extrema; 0: none");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  const std::string dir = "/dev/shm/rankstat-bench-ingest-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  int rc = 0;
  try {
    std::vector<std::unique_ptr<rankstat::Reporter>> reporters;
    for (int i = 0; i < segments; ++i) {
      rankstat::ReporterOptions options;
      options.shm_dir = dir;
      options.identity.instance = "ingest";
      options.identity.tp_rank = i;
      // Every rank's snapshot served (all-schedulers mode), so --integrals tracks every segment.
      options.identity.flags =
          rankstat::shm::kFlagPriorityScheduling | rankstat::shm::kFlagAllSchedulersMetrics;
      options.geometry.ring_bytes = static_cast<std::uint64_t>(ring_mib) << 20;
      auto reporter = std::make_unique<rankstat::Reporter>();
      if (reporter->open(options) != rankstat::Status::kOk)
        throw std::runtime_error(reporter->error_message());
      reporters.push_back(std::move(reporter));
    }
    rankstat::RetiredTotals retired("");
    rankstat::RegistryOptions options;
    options.directory = dir;
    if (integrals) {
      const auto& families = rankstat::default_integrated_families();
      options.integrals.families.insert(families.begin(), families.end());
      options.integrals.peak_window_ns =
          static_cast<std::uint64_t>(peak_window_ms) * std::uint64_t{1'000'000};
    }
    rankstat::SegmentRegistry registry(options, retired);
    registry.scan(rankstat::shm::monotonic_ns());

    rankstat::shm::SchedulerSnapshot s{};
    s.report_kind = static_cast<std::uint32_t>(rankstat::shm::ReportKind::kDecode);
    s.groups = rankstat::shm::kGroupSpeculative;
    s.token_usage = 0.5;
    const rankstat::shm::PriorityCount priorities[] = {{0, 0, 0, 0, 40}, {1, 1, 0, 0, 8}};
    std::printf("{\"segments\":%d,\"record_bytes\":%zu,\"records_per_second\":[", segments,
                sizeof(rankstat::shm::RecordHeader) + sizeof s + sizeof priorities);
    for (int round = 0; round < rounds; ++round) {
      std::uint64_t appended = 0;
      for (auto& reporter : reporters) {
        while (true) {
          // Load gauges that change on every report, as a busy scheduler's do.
          ++s.num_running_reqs;
          s.num_queue_reqs = (s.num_running_reqs * 7919) % 64;
          s.kv_used_tokens = (s.num_running_reqs * 104729) % 200000;
          if (reporter->report_scheduler(s, priorities) != rankstat::Status::kOk) break;
          ++appended;
        }
      }
      const auto start = std::chrono::steady_clock::now();
      std::uint64_t drained = 0;
      for (;;) {
        const std::uint64_t n = registry.drain_all(rankstat::shm::monotonic_ns()).records;
        if (n == 0) break;
        drained += n;
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (drained != appended)
        throw std::runtime_error("drained " + std::to_string(drained) + " of " + std::to_string(appended));
      std::printf("%s%.0f", round ? "," : "", static_cast<double>(drained) / seconds);
    }
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ingest: %s\n", e.what());
    rc = 1;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
