// A scriptable rank for integration tests: publishes known values through the C++ Reporter, then
// holds (heartbeating) until SIGTERM, or keeps appending as fast as asked to measure writer stalls.
//
//   rankstat_test_writer --instance I --tp T --dp D --running R --queue Q --events N [--flood-seconds S]
//                        [--hold-seconds H] [--exit clean|abandon] [--gauge FAMILY:MODE:VALUE ...]
//                        [--counter-every-ms M] [--stall] [--reports-per-ms N --report-seconds S]
//                        [--extra NAME=VALUE ...] [--report-kind prefill|decode] [--pd-queues B,I,P,T]
//                        [--observe FAMILY:VALUE ... --observe-every-ms M]
// Prints "note: <Reporter::note()>" if its segment went under another name (the name was held), "ready"
// on stdout once its values are published, and on exit a line
// "appends=<n> dropped=<n> max_append_ns=<n> events=<n>" (events: total added to the test counter).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "rankstat/reporter.hpp"

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}
}  // namespace

int main(int argc, char** argv) {
  std::string instance = "test";
  std::string model = "test-model";
  int tp = 0;
  int dp = -1;
  std::int64_t running = 0;
  std::int64_t queue = 0;
  int events = 0;
  double hold_seconds = 30;
  double flood_seconds = 0;
  std::string exit_mode = "clean";
  bool priorities = false;
  std::vector<std::string> gauges;
  int counter_every_ms = 0;
  bool stall = false;
  std::string rank_key;
  int reports_per_ms = 0;
  double report_seconds = 0;
  std::vector<std::string> extra_labels;
  std::string report_kind = "decode";
  std::vector<std::int64_t> pd_queues;
  std::vector<std::string> observations;
  int observe_every_ms = 100;
  CLI::App app{"rankstat integration-test writer"};
  app.add_option("--instance", instance);
  app.add_option("--model", model);
  app.add_option("--tp", tp);
  app.add_option("--dp", dp);
  app.add_option("--running", running);
  app.add_option("--queue", queue);
  app.add_option("--events", events, "Counter increments and histogram observations to make");
  app.add_option("--hold-seconds", hold_seconds);
  app.add_option("--flood-seconds", flood_seconds, "Append snapshots in a tight loop for this long");
  app.add_option("--exit", exit_mode)->check(CLI::IsMember({"clean", "abandon"}));
  app.add_flag("--priorities", priorities);
  app.add_option("--gauge", gauges, "FAMILY:MODE:VALUE, MODE as prometheus_client names it (repeatable)");
  app.add_option("--counter-every-ms", counter_every_ms,
                 "While holding, add 1 to the test counter this often");
  app.add_option("--rank-key", rank_key, "Segment name suffix (default: derived from the ranks)");
  app.add_flag("--stall", stall, "After publishing, stop heartbeating (a rank stuck in a long step)");
  app.add_option("--reports-per-ms", reports_per_ms,
                 "While holding, append this many snapshots every millisecond (a steady high rate)");
  app.add_option("--report-seconds", report_seconds, "For this long; then hold idle");
  app.add_option("--extra", extra_labels, "NAME=VALUE: an extra label of the segment (repeatable)");
  app.add_option("--report-kind", report_kind)->check(CLI::IsMember({"prefill", "decode"}));
  app.add_option("--pd-queues", pd_queues,
                 "The PD queues: prefill bootstrap, prefill inflight, decode prealloc, decode transfer")
      ->expected(4)
      ->delimiter(',');
  app.add_option("--observe", observations,
                 "FAMILY:VALUE: a histogram (bounds 0.1 .. 10) observing VALUE once at start and, while "
                 "holding, every --observe-every-ms (repeatable)");
  app.add_option("--observe-every-ms", observe_every_ms);
  CLI11_PARSE(app, argc, argv);

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  rankstat::ReporterOptions options;
  options.identity.instance = instance;
  options.identity.model_name = model;
  options.identity.tp_rank = tp;
  options.identity.moe_ep_rank = tp;
  options.identity.dp_rank = dp;
  options.identity.rank_key = rank_key;
  for (const std::string& pair : extra_labels) {
    const auto equals = pair.find('=');
    if (equals == std::string::npos) {
      std::fprintf(stderr, "bad --extra %s\n", pair.c_str());
      return 2;
    }
    options.identity.extra_labels.emplace_back(pair.substr(0, equals), pair.substr(equals + 1));
  }
  if (priorities) options.identity.flags |= rankstat::shm::kFlagPriorityScheduling;
  options.geometry.ring_bytes = 64 * 1024;
  rankstat::Reporter reporter;
  if (reporter.open(options) != rankstat::Status::kOk) {
    std::fprintf(stderr, "open failed: %s\n", reporter.error_message().c_str());
    return 2;
  }
  if (!reporter.note().empty()) std::printf("note: %s\n", reporter.note().c_str());
  std::uint32_t counter = 0;
  std::uint32_t histogram = 0;
  const double bounds[] = {0.1, 1, 10};
  reporter.register_counter("sglang:test_events_total", {{"kind", "unit"}}, counter, "Test events by kind.");
  reporter.register_histogram("sglang:test_latency_seconds", {}, bounds, histogram,
                              "Test latency in seconds.");
  std::uint64_t events_total = 0;
  for (int i = 0; i < events; ++i) {
    reporter.counter_add(counter, 1);
    ++events_total;
    reporter.histogram_observe(histogram, 0.5 * (i % 4));
  }
  static constexpr const char* kModes[] = {"all",     "liveall", "sum",     "livesum",    "min",
                                           "livemin", "max",     "livemax", "mostrecent", "livemostrecent"};
  for (const std::string& spec : gauges) {
    // The family itself may contain colons (sglang:...): MODE and VALUE are the last two fields.
    const auto second = spec.rfind(':');
    const auto first =
        second == std::string::npos || second == 0 ? std::string::npos : spec.rfind(':', second - 1);
    if (first == std::string::npos || second == std::string::npos) {
      std::fprintf(stderr, "bad --gauge %s\n", spec.c_str());
      return 2;
    }
    const std::string mode_name = spec.substr(first + 1, second - first - 1);
    const auto* mode = std::find(std::begin(kModes), std::end(kModes), mode_name);
    if (mode == std::end(kModes)) {
      std::fprintf(stderr, "bad mode %s\n", mode_name.c_str());
      return 2;
    }
    std::uint32_t id = 0;
    const auto status = reporter.register_gauge(
        spec.substr(0, first), static_cast<rankstat::shm::GaugeMode>(mode - std::begin(kModes)), {}, id,
        "A test gauge.");
    if (status != rankstat::Status::kOk) {
      std::fprintf(stderr, "register_gauge %s failed\n", spec.c_str());
      return 2;
    }
    const std::string value = spec.substr(second + 1);
    if (value != "unset") reporter.gauge_set(id, std::stod(value));
  }
  // Latency histograms with bounds like SGLang's first ones; each observes its value at a steady pace.
  struct Observation {
    std::uint32_t id;
    double value;
  };
  std::vector<Observation> observed;
  static constexpr double kLatencyBounds[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  for (const std::string& spec : observations) {
    const auto colon = spec.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      std::fprintf(stderr, "bad --observe %s\n", spec.c_str());
      return 2;
    }
    Observation o{0, std::stod(spec.substr(colon + 1))};
    if (reporter.register_histogram(spec.substr(0, colon), {}, kLatencyBounds, o.id, "A test latency.") !=
        rankstat::Status::kOk) {
      std::fprintf(stderr, "register_histogram %s failed\n", spec.c_str());
      return 2;
    }
    reporter.histogram_observe(o.id, o.value);
    observed.push_back(o);
  }
  rankstat::shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(report_kind == "prefill" ? rankstat::shm::ReportKind::kPrefill
                                                                      : rankstat::shm::ReportKind::kDecode);
  if (!pd_queues.empty()) {
    s.groups |= rankstat::shm::kGroupDisaggregation;
    s.num_prefill_bootstrap_queue_reqs = pd_queues[0];
    s.num_prefill_inflight_queue_reqs = pd_queues[1];
    s.num_decode_prealloc_queue_reqs = pd_queues[2];
    s.num_decode_transfer_queue_reqs = pd_queues[3];
  }
  s.num_running_reqs = running;
  s.num_queue_reqs = queue;
  s.token_usage = 0.25;
  s.gen_throughput = 100.0 + tp;
  const rankstat::shm::PriorityCount entries[] = {
      {1, static_cast<std::uint8_t>(rankstat::shm::QueueId::kRunning), 0, 0, running}};
  const std::span<const rankstat::shm::PriorityCount> priority_span =
      priorities ? std::span<const rankstat::shm::PriorityCount>(entries)
                 : std::span<const rankstat::shm::PriorityCount>();
  reporter.report_scheduler(s, priority_span);
  std::printf("ready\n");
  std::fflush(stdout);

  std::uint64_t appends = 0;
  std::uint64_t max_append_ns = 0;
  const auto start = std::chrono::steady_clock::now();
  auto next_observation = start + std::chrono::milliseconds(observe_every_ms);
  while (!g_stop.load()) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= std::max(hold_seconds, flood_seconds)) break;
    if (elapsed < flood_seconds) {
      const auto t0 = std::chrono::steady_clock::now();
      reporter.report_scheduler(s, priority_span);
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
      max_append_ns = std::max<std::uint64_t>(max_append_ns, static_cast<std::uint64_t>(ns.count()));
      ++appends;
      reporter.counter_add(counter, 1);
      ++events_total;
    } else if (reports_per_ms > 0 && elapsed < report_seconds) {
      for (int i = 0; i < reports_per_ms; ++i) {
        reporter.report_scheduler(s, priority_span);
        ++appends;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else if (counter_every_ms > 0) {
      reporter.counter_add(counter, 1);
      ++events_total;
      if (!stall) reporter.heartbeat();
      std::this_thread::sleep_for(std::chrono::milliseconds(counter_every_ms));
    } else {
      if (!observed.empty() && std::chrono::steady_clock::now() >= next_observation) {
        for (const Observation& o : observed) reporter.histogram_observe(o.id, o.value);
        next_observation += std::chrono::milliseconds(observe_every_ms);
      }
      if (!stall) reporter.heartbeat();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::printf("appends=%llu dropped=%llu max_append_ns=%llu events=%llu\n",
              static_cast<unsigned long long>(appends),
              static_cast<unsigned long long>(reporter.dropped_records()),
              static_cast<unsigned long long>(max_append_ns), static_cast<unsigned long long>(events_total));
  std::fflush(stdout);
  if (exit_mode == "abandon") _exit(0);  // like a crash: no close, segment left as is
  reporter.close();
  return 0;
}
