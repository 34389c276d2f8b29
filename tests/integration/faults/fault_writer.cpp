// An engine rank for the fault tests: publishes through the C++ Reporter like test_writer, and measures
// what the engine pays per append while the tests kill and corrupt things around it. Its flags, stop
// signals, printed lines and loop are the fake rank's (tests/testkit/fake_rank); the work modes, the
// latency histogram and running on without metrics are its own.
//
//   rankstat_fault_writer [--instance I] [--dp D] [--mode hold|paced|flood] [--seconds S] [--pace-us U]
//                         [--ring-bytes B] [--retry-open-ms M] [--shm-mode 0660] [--shm-group G]
//                         [--hold-seconds H] [--exit clean|abandon]
//
// Modes: hold heartbeats; paced appends one scheduler snapshot every U microseconds (an engine's
// logging rate); flood appends as fast as it can. With --hold-seconds, the paced or flood phase is
// followed by that long of holding. Every append also adds 1 to sglang:test_events_total
// and observes sglang:test_latency_seconds, so the totals are known. Each snapshot satisfies
// num_queue_reqs == 3 * num_running_reqs + 1, so a torn record would show as a violated invariant.
//
// A segment published under another name than its identity's (the name was held) prints
// "note: <Reporter::note()>" before "ready".
//
// If the segment cannot be created, the writer behaves like an engine that runs on without metrics:
// it prints "open failed status=<name>: <message>", keeps doing engine steps (calls on the closed
// reporter are no-ops) and, with --retry-open-ms, retries the open that often until it succeeds.
//
// Prints "ready" once its first values are published; on exit (SIGTERM or --seconds) one line:
//   appends=N dropped=N p50_ns=N p99_ns=N p999_ns=N max_ns=N events=N steps=N open_attempts=N
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <string>
#include <thread>

#include "fake_rank.hpp"

namespace {

using namespace std::chrono_literals;
namespace fake_rank = rankstat::fake_rank;

// Append latencies: exact to 4 ns below 64 us, one overflow bucket above (its maximum kept).
class LatencyHistogram {
 public:
  void add(std::uint64_t ns) {
    ++count_;
    max_ = std::max(max_, ns);
    const std::uint64_t bucket = ns / kStep;
    ++buckets_[bucket < kBuckets ? bucket : kBuckets];
  }
  std::uint64_t quantile(double q) const {
    if (count_ == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i <= kBuckets; ++i) {
      seen += buckets_[i];
      if (seen >= rank) return i == kBuckets ? max_ : (i + 1) * kStep;
    }
    return max_;
  }
  std::uint64_t max() const { return max_; }

 private:
  static constexpr std::uint64_t kStep = 4;
  static constexpr std::size_t kBuckets = 16384;
  std::array<std::uint64_t, kBuckets + 1> buckets_{};
  std::uint64_t count_ = 0;
  std::uint64_t max_ = 0;
};

std::uint64_t ns_since(std::chrono::steady_clock::time_point t0) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

int main(int argc, char** argv) {
  fake_rank::SegmentFlags segment{.instance = "fault", .model = "fault-model", .ring_bytes = 64 * 1024};
  fake_rank::RankPlace place;
  place.dp_rank = 0;
  fake_rank::ExitMode exit_mode = fake_rank::ExitMode::kClean;
  std::string mode = "hold";
  double seconds = 30;
  int pace_us = 200;
  int retry_open_ms = 0;
  double hold_seconds = 0;
  CLI::App app{"rankstat fault-test writer"};
  fake_rank::add_segment_flags(app, segment);
  fake_rank::add_rank_flags(app, place);
  fake_rank::add_exit_flag(app, exit_mode);
  app.add_option("--mode", mode)->check(CLI::IsMember({"hold", "paced", "flood"}));
  app.add_option("--seconds", seconds);
  app.add_option("--pace-us", pace_us);
  app.add_option("--retry-open-ms", retry_open_ms);
  app.add_option("--hold-seconds", hold_seconds, "Hold (heartbeat only) this long after the work phase");
  CLI11_PARSE(app, argc, argv);
  fake_rank::stop_on_signals();

  const rankstat::ReporterOptions options = fake_rank::reporter_options(segment, place);
  rankstat::Reporter reporter;
  std::uint32_t counter = 0;
  std::uint32_t histogram = 0;
  std::uint64_t open_attempts = 0;
  bool announced_failure = false;
  auto try_open = [&] {
    ++open_attempts;
    const rankstat::Status status = reporter.open(options);
    if (status != rankstat::Status::kOk) {
      if (!announced_failure) {
        fake_rank::announce("open failed status=" + std::string(rankstat::status_name(status)) + ": " +
                            reporter.error_message());
        announced_failure = true;
      }
      return false;
    }
    fake_rank::announce_note(reporter);
    const double bounds[] = {0.001, 0.01, 0.1, 1};
    reporter.register_counter("sglang:test_events_total", {{"kind", "fault"}}, counter,
                              "Test events by kind.");
    reporter.register_histogram("sglang:test_latency_seconds", {}, bounds, histogram,
                                "Test latency in seconds.");
    return true;
  };

  // The work phase ends `seconds` after start, the rank `hold_seconds` later.
  fake_rank::Loop loop(seconds + hold_seconds);
  bool open = try_open();
  if (!open && retry_open_ms <= 0) return 2;

  rankstat::shm::SchedulerSnapshot snapshot{};
  snapshot.report_kind = static_cast<std::uint32_t>(rankstat::shm::ReportKind::kDecode);
  auto fill = [&snapshot](std::uint64_t i) {
    snapshot.num_running_reqs = static_cast<std::int64_t>(i % 100000);
    snapshot.num_queue_reqs = 3 * snapshot.num_running_reqs + 1;
    snapshot.token_usage = 0.5;
    snapshot.gen_throughput = 100;
  };
  if (open) {
    fill(0);
    reporter.report_scheduler(snapshot);
    fake_rank::announce_ready();
  }

  LatencyHistogram latencies;
  std::uint64_t appends = 0;
  std::uint64_t events = 0;
  std::uint64_t steps = 0;
  const auto retry = std::chrono::milliseconds(std::max(retry_open_ms, 0));
  auto next_retry = loop.start() + retry;
  loop.run([&](double elapsed) -> std::chrono::nanoseconds {
    ++steps;
    if (!open) {
      // The engine runs on without metrics: the calls are no-ops on a closed reporter.
      reporter.report_scheduler(snapshot);
      reporter.counter_add(counter, 1);
      std::this_thread::sleep_for(1ms);
      if (std::chrono::steady_clock::now() >= next_retry) {
        next_retry = std::chrono::steady_clock::now() + retry;
        if (try_open()) {
          open = true;
          fill(0);
          reporter.report_scheduler(snapshot);
          fake_rank::announce("ready after " + std::to_string(open_attempts) + " attempts");
        }
      }
      return 0ns;
    }
    if (mode == "hold" || elapsed >= seconds) return fake_rank::hold(reporter);
    fill(appends + 1);
    const auto t0 = std::chrono::steady_clock::now();
    reporter.report_scheduler(snapshot);
    latencies.add(ns_since(t0));
    ++appends;
    reporter.counter_add(counter, 1);
    reporter.histogram_observe(histogram, 0.005);
    ++events;
    return mode == "paced" ? std::chrono::microseconds(pace_us) : 0ns;
  });
  fake_rank::announce_exit({{"appends", appends},
                            {"dropped", reporter.dropped_records()},
                            {"p50_ns", latencies.quantile(0.5)},
                            {"p99_ns", latencies.quantile(0.99)},
                            {"p999_ns", latencies.quantile(0.999)},
                            {"max_ns", latencies.max()},
                            {"events", events},
                            {"steps", steps},
                            {"open_attempts", open_attempts}});
  return fake_rank::finish(reporter, exit_mode);
}
