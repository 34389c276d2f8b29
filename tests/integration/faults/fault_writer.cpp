// An engine rank for the fault tests: publishes through the C++ Reporter like test_writer, and measures
// what the engine pays per append while the tests kill and corrupt things around it.
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
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "rankstat/reporter.hpp"

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}

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

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

int main(int argc, char** argv) {
  std::string instance = "fault";
  int dp = 0;
  std::string mode = "hold";
  double seconds = 30;
  int pace_us = 200;
  std::uint64_t ring_bytes = 64 * 1024;
  int retry_open_ms = 0;
  std::string shm_mode = "0660";
  std::string shm_group;
  std::string exit_mode = "clean";
  double hold_seconds = 0;
  CLI::App app{"rankstat fault-test writer"};
  app.add_option("--instance", instance);
  app.add_option("--dp", dp);
  app.add_option("--mode", mode)->check(CLI::IsMember({"hold", "paced", "flood"}));
  app.add_option("--seconds", seconds);
  app.add_option("--pace-us", pace_us);
  app.add_option("--ring-bytes", ring_bytes);
  app.add_option("--retry-open-ms", retry_open_ms);
  app.add_option("--shm-mode", shm_mode);
  app.add_option("--shm-group", shm_group);
  app.add_option("--hold-seconds", hold_seconds, "Hold (heartbeat only) this long after the work phase");
  app.add_option("--exit", exit_mode)->check(CLI::IsMember({"clean", "abandon"}));
  CLI11_PARSE(app, argc, argv);

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  rankstat::ReporterOptions options;
  options.identity.instance = instance;
  options.identity.model_name = "fault-model";
  options.identity.dp_rank = dp;
  options.geometry.ring_bytes = ring_bytes;
  options.mode = static_cast<std::uint32_t>(std::stoul(shm_mode, nullptr, 8));
  options.group = shm_group;

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
        std::printf("open failed status=%s: %s\n", std::string(rankstat::status_name(status)).c_str(),
                    reporter.error_message().c_str());
        std::fflush(stdout);
        announced_failure = true;
      }
      return false;
    }
    if (!reporter.note().empty()) {
      std::printf("note: %s\n", reporter.note().c_str());
      std::fflush(stdout);
    }
    const double bounds[] = {0.001, 0.01, 0.1, 1};
    reporter.register_counter("sglang:test_events_total", {{"kind", "fault"}}, counter,
                              "Test events by kind.");
    reporter.register_histogram("sglang:test_latency_seconds", {}, bounds, histogram,
                                "Test latency in seconds.");
    return true;
  };

  const std::uint64_t start = now_ns();
  const auto deadline = start + static_cast<std::uint64_t>(seconds * 1e9);
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
    std::printf("ready\n");
    std::fflush(stdout);
  }

  LatencyHistogram latencies;
  std::uint64_t appends = 0;
  std::uint64_t events = 0;
  std::uint64_t steps = 0;
  const std::uint64_t retry_ns =
      static_cast<std::uint64_t>(std::max(retry_open_ms, 0)) * std::uint64_t{1000000};
  std::uint64_t next_retry = start + retry_ns;
  const std::uint64_t hold_until = deadline + static_cast<std::uint64_t>(hold_seconds * 1e9);
  while (!g_stop.load(std::memory_order_relaxed) && now_ns() < hold_until) {
    ++steps;
    if (!open) {
      // The engine runs on without metrics: the calls are no-ops on a closed reporter.
      reporter.report_scheduler(snapshot);
      reporter.counter_add(counter, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (now_ns() >= next_retry) {
        next_retry = now_ns() + retry_ns;
        if (try_open()) {
          open = true;
          fill(0);
          reporter.report_scheduler(snapshot);
          std::printf("ready after %llu attempts\n", static_cast<unsigned long long>(open_attempts));
          std::fflush(stdout);
        }
      }
      continue;
    }
    if (mode == "hold" || now_ns() >= deadline) {
      reporter.heartbeat();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    fill(appends + 1);
    const std::uint64_t t0 = now_ns();
    reporter.report_scheduler(snapshot);
    latencies.add(now_ns() - t0);
    ++appends;
    reporter.counter_add(counter, 1);
    reporter.histogram_observe(histogram, 0.005);
    ++events;
    if (mode == "paced") std::this_thread::sleep_for(std::chrono::microseconds(pace_us));
  }
  std::printf(
      "appends=%llu dropped=%llu p50_ns=%llu p99_ns=%llu p999_ns=%llu max_ns=%llu events=%llu steps=%llu "
      "open_attempts=%llu\n",
      static_cast<unsigned long long>(appends), static_cast<unsigned long long>(reporter.dropped_records()),
      static_cast<unsigned long long>(latencies.quantile(0.5)),
      static_cast<unsigned long long>(latencies.quantile(0.99)),
      static_cast<unsigned long long>(latencies.quantile(0.999)),
      static_cast<unsigned long long>(latencies.max()), static_cast<unsigned long long>(events),
      static_cast<unsigned long long>(steps), static_cast<unsigned long long>(open_attempts));
  std::fflush(stdout);
  if (exit_mode == "abandon") _exit(0);
  reporter.close();
  return 0;
}
