// Simulated SGLang scheduler ranks for the scrape, freshness and daemon-cost benchmarks: each rank opens
// its own segment (one Reporter), registers the metric set of bench/sglang_scheduler_set.tsv and
// publishes one logged step `--rate-hz` times a second until SIGTERM (or `--seconds`). Its flags, stop
// signals, printed lines and cadence are the fake rank's (tests/testkit/fake_rank); the metric set, the
// rate and the ranks as threads are its own.
//
//   rankstat_bench_writer --metric-set FILE [--first-rank K] [--ranks T] [--rate-hz R] [--seconds S]
//                         [--instance I] [--model M] [--shm-dir D]
// With --ranks 1 (the default) the process is one rank, as an SGLang scheduler process is; with more,
// each rank is a thread with its own Reporter and segment. The segment directory is --shm-dir, else
// $RANKSTAT_SHM_DIR. Prints "ready" once every rank has published its first step; on exit,
// "steps=<n> dropped=<n>".
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "bench_metric_set.hpp"
#include "fake_rank.hpp"

namespace fake_rank = rankstat::fake_rank;

int main(int argc, char** argv) {
  // SGLang's --enable-metrics-for-all-schedulers: every rank exports, as every process does in the anchor.
  fake_rank::SegmentFlags segment{.instance = "bench",
                                  .model = "meta-llama/Llama-3.1-70B-Instruct",
                                  .ring_bytes = 256 * 1024,
                                  .identity_flags = rankstat::shm::kFlagAllSchedulersMetrics};
  std::string metric_set;
  int first_rank = 0;
  int ranks = 1;
  double rate_hz = 10;
  double seconds = 0;
  CLI::App app{"rankstat benchmark writer: simulated SGLang scheduler ranks"};
  fake_rank::add_segment_flags(app, segment);
  app.add_option("--metric-set", metric_set, "bench/sglang_scheduler_set.tsv")->required();
  app.add_option("--first-rank", first_rank, "tp_rank of the first rank");
  app.add_option("--ranks", ranks, "Ranks in this process (one thread and one segment each)");
  app.add_option("--rate-hz", rate_hz, "Logged steps per second per rank (0: one step, then heartbeats)");
  app.add_option("--seconds", seconds, "Stop after this long (0: at SIGTERM)");
  CLI11_PARSE(app, argc, argv);
  fake_rank::stop_on_signals();

  std::vector<rankstat::bench::MetricRow> rows;
  try {
    rows = rankstat::bench::load_metric_set(metric_set);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  std::atomic<int> ready{0};
  std::atomic<int> failed{0};
  std::atomic<std::uint64_t> steps{0};
  std::atomic<std::uint64_t> dropped{0};
  auto run_rank = [&](int rank) {
    fake_rank::RankPlace place;
    place.tp_rank = rank;
    place.tp_size = first_rank + ranks;
    rankstat::Reporter reporter;
    if (reporter.open(fake_rank::reporter_options(segment, place)) != rankstat::Status::kOk) {
      std::fprintf(stderr, "rank %d: %s\n", rank, reporter.error_message().c_str());
      failed.fetch_add(1);
      ready.fetch_add(1);
      return;
    }
    std::unique_ptr<rankstat::bench::SimulatedRank> simulated;
    try {
      simulated =
          std::make_unique<rankstat::bench::SimulatedRank>(reporter, rows, static_cast<std::uint32_t>(rank));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      failed.fetch_add(1);
      ready.fetch_add(1);
      return;
    }
    std::uint64_t step = 0;
    simulated->step(step++);
    ready.fetch_add(1);
    // Spread the ranks over the period so that their steps do not all land at once.
    const std::chrono::duration<double> period(rate_hz > 0 ? 1.0 / rate_hz : 0.5);
    fake_rank::Loop loop(seconds > 0 ? seconds : fake_rank::kForever);
    loop.run_every(period, period * ((rank % 97) / 97.0), [&](double) {
      if (rate_hz > 0) {
        simulated->step(step++);
      } else {
        reporter.heartbeat();
      }
    });
    steps.fetch_add(step);
    dropped.fetch_add(reporter.dropped_records());
    reporter.close();
  };

  std::vector<std::thread> threads;
  for (int i = 1; i < ranks; ++i) threads.emplace_back(run_rank, first_rank + i);
  std::thread announcer([&] {
    while (ready.load() < ranks && !fake_rank::stop_requested()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (failed.load() == 0) {
      fake_rank::announce_ready();
    } else {
      fake_rank::request_stop();
    }
  });
  run_rank(first_rank);
  for (std::thread& t : threads) t.join();
  announcer.join();
  fake_rank::announce_exit({{"steps", steps.load()}, {"dropped", dropped.load()}});
  return failed.load() == 0 ? 0 : 1;
}
