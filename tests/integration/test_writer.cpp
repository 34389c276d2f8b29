// A scriptable rank for integration tests: publishes known values through the C++ Reporter, then
// holds (heartbeating) until SIGTERM, or keeps appending as fast as asked to measure writer stalls.
// Its flags, stop signals, printed lines and loop are the fake rank's (tests/testkit/fake_rank); the
// scripted values are its own.
//
//   rankstat_test_writer --instance I --tp T --dp D --running R --queue Q --events N [--flood-seconds S]
//                        [--hold-seconds H] [--exit clean|abandon] [--gauge FAMILY:MODE:VALUE ...]
//                        [--counter-every-ms M] [--stall] [--reports-per-ms N --report-seconds S]
//                        [--extra NAME=VALUE ...] [--report-kind prefill|decode] [--pd-queues B,I,P,T]
//                        [--observe FAMILY:VALUE ... --observe-every-ms M]
// Prints "note: <Reporter::note()>" if its segment went under another name (the name was held), "ready"
// on stdout once its values are published, and on exit a line
// "appends=<n> dropped=<n> max_append_ns=<n> events=<n>" (events: total added to the test counter).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "fake_rank.hpp"

namespace {

using namespace std::chrono_literals;
namespace fake_rank = rankstat::fake_rank;

// --gauge FAMILY:MODE:VALUE, MODE as prometheus_client names it; VALUE "unset" registers only.
void register_gauge(rankstat::Reporter& reporter, const std::string& spec) {
  // The family itself may contain colons (sglang:...): MODE and VALUE are the last two fields.
  const auto second = spec.rfind(':');
  const auto first =
      second == std::string::npos || second == 0 ? std::string::npos : spec.rfind(':', second - 1);
  if (first == std::string::npos) throw std::invalid_argument("bad --gauge " + spec);
  const std::string mode_name = spec.substr(first + 1, second - first - 1);
  const auto mode = fake_rank::gauge_mode(mode_name);
  if (!mode) throw std::invalid_argument("bad mode " + mode_name);
  std::uint32_t id = 0;
  if (reporter.register_gauge(spec.substr(0, first), *mode, {}, id, "A test gauge.") !=
      rankstat::Status::kOk) {
    throw std::invalid_argument("register_gauge " + spec + " failed");
  }
  const std::string value = spec.substr(second + 1);
  if (value != "unset") reporter.gauge_set(id, std::stod(value));
}

// --observe FAMILY:VALUE: a latency histogram with bounds like SGLang's first ones, observing VALUE.
struct Observation {
  std::uint32_t id = 0;
  double value = 0;
};
Observation register_observation(rankstat::Reporter& reporter, const std::string& spec) {
  static constexpr double kLatencyBounds[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) throw std::invalid_argument("bad --observe " + spec);
  Observation o{0, std::stod(spec.substr(colon + 1))};
  if (reporter.register_histogram(spec.substr(0, colon), {}, kLatencyBounds, o.id, "A test latency.") !=
      rankstat::Status::kOk) {
    throw std::invalid_argument("register_histogram " + spec + " failed");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  fake_rank::SegmentFlags segment{.instance = "test", .model = "test-model", .ring_bytes = 64 * 1024};
  fake_rank::RankPlace place;
  fake_rank::ExitMode exit_mode = fake_rank::ExitMode::kClean;
  std::int64_t running = 0;
  std::int64_t queue = 0;
  int events = 0;
  double hold_seconds = 30;
  double flood_seconds = 0;
  bool priorities = false;
  std::vector<std::string> gauges;
  int counter_every_ms = 0;
  bool stall = false;
  int reports_per_ms = 0;
  double report_seconds = 0;
  std::string report_kind = "decode";
  std::vector<std::int64_t> pd_queues;
  std::vector<std::string> observations;
  int observe_every_ms = 100;
  CLI::App app{"rankstat integration-test writer"};
  fake_rank::add_segment_flags(app, segment);
  fake_rank::add_rank_flags(app, place);
  fake_rank::add_exit_flag(app, exit_mode);
  app.add_option("--running", running);
  app.add_option("--queue", queue);
  app.add_option("--events", events, "Counter increments and histogram observations to make");
  app.add_option("--hold-seconds", hold_seconds);
  app.add_option("--flood-seconds", flood_seconds, "Append snapshots in a tight loop for this long");
  app.add_flag("--priorities", priorities);
  app.add_option("--gauge", gauges, "FAMILY:MODE:VALUE, MODE as prometheus_client names it (repeatable)");
  app.add_option("--counter-every-ms", counter_every_ms,
                 "While holding, add 1 to the test counter this often");
  app.add_flag("--stall", stall, "After publishing, stop heartbeating (a rank stuck in a long step)");
  app.add_option("--reports-per-ms", reports_per_ms,
                 "While holding, append this many snapshots every millisecond (a steady high rate)");
  app.add_option("--report-seconds", report_seconds, "For this long; then hold idle");
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
  fake_rank::stop_on_signals();

  place.moe_ep_rank = place.tp_rank;
  if (priorities) segment.identity_flags |= rankstat::shm::kFlagPriorityScheduling;
  rankstat::Reporter reporter;
  if (reporter.open(fake_rank::reporter_options(segment, place)) != rankstat::Status::kOk) {
    std::fprintf(stderr, "open failed: %s\n", reporter.error_message().c_str());
    return 2;
  }
  fake_rank::announce_note(reporter);
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
  std::vector<Observation> observed;
  try {
    for (const std::string& spec : gauges) register_gauge(reporter, spec);
    for (const std::string& spec : observations) observed.push_back(register_observation(reporter, spec));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  for (const Observation& o : observed) reporter.histogram_observe(o.id, o.value);

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
  s.gen_throughput = 100.0 + place.tp_rank;
  const rankstat::shm::PriorityCount entries[] = {
      {1, static_cast<std::uint8_t>(rankstat::shm::QueueId::kRunning), 0, 0, running}};
  const std::span<const rankstat::shm::PriorityCount> priority_span =
      priorities ? std::span<const rankstat::shm::PriorityCount>(entries)
                 : std::span<const rankstat::shm::PriorityCount>();
  reporter.report_scheduler(s, priority_span);
  fake_rank::announce_ready();

  // Phases: flood, then a steady report rate, then holding (counting, observing or idle) to the end.
  std::uint64_t appends = 0;
  std::uint64_t max_append_ns = 0;
  fake_rank::Loop loop(std::max(hold_seconds, flood_seconds));
  auto next_observation = loop.start() + std::chrono::milliseconds(observe_every_ms);
  loop.run([&](double elapsed) -> std::chrono::nanoseconds {
    if (elapsed < flood_seconds) {
      const auto t0 = std::chrono::steady_clock::now();
      reporter.report_scheduler(s, priority_span);
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
      max_append_ns = std::max<std::uint64_t>(max_append_ns, static_cast<std::uint64_t>(ns.count()));
      ++appends;
      reporter.counter_add(counter, 1);
      ++events_total;
      return 0ns;
    }
    if (reports_per_ms > 0 && elapsed < report_seconds) {
      for (int i = 0; i < reports_per_ms; ++i) {
        reporter.report_scheduler(s, priority_span);
        ++appends;
      }
      return 1ms;
    }
    if (counter_every_ms > 0) {
      reporter.counter_add(counter, 1);
      ++events_total;
      if (!stall) reporter.heartbeat();
      return std::chrono::milliseconds(counter_every_ms);
    }
    if (!observed.empty() && std::chrono::steady_clock::now() >= next_observation) {
      for (const Observation& o : observed) reporter.histogram_observe(o.id, o.value);
      next_observation += std::chrono::milliseconds(observe_every_ms);
    }
    if (!stall) reporter.heartbeat();
    return fake_rank::kHoldPause;
  });
  fake_rank::announce_exit({{"appends", appends},
                            {"dropped", reporter.dropped_records()},
                            {"max_append_ns", max_append_ns},
                            {"events", events_total}});
  return fake_rank::finish(reporter, exit_mode);
}
