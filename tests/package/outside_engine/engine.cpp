// An engine rank outside the rankstat tree, through the C++ Reporter: one scheduler snapshot
// (7 running requests) and a counter outside_engine_requests_total{lang="cpp"} of 42, then heartbeats
// until SIGTERM or the given number of seconds. Usage: outside_engine_cpp SHM_DIR [SECONDS]
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "rankstat/reporter.hpp"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int /*signal*/) {
  g_stop = 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SHM_DIR [SECONDS]\n", argv[0]);
    return 2;
  }
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 30;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);

  rankstat::ReporterOptions options;
  options.shm_dir = argv[1];
  options.identity.instance = "outside";
  options.identity.model_name = "outside-model";
  rankstat::Reporter reporter;
  if (reporter.open(options) != rankstat::Status::kOk) {
    std::fprintf(stderr, "rankstat: %s\n", reporter.error_message().c_str());
    return 1;
  }
  std::uint32_t requests = 0;
  if (reporter.register_counter("outside_engine_requests_total", {{"lang", "cpp"}}, requests) !=
      rankstat::Status::kOk) {
    std::fprintf(stderr, "rankstat: %s\n", reporter.error_message().c_str());
    return 1;
  }
  reporter.counter_add(requests, 42);
  rankstat::shm::SchedulerSnapshot snapshot{};
  snapshot.num_running_reqs = 7;
  reporter.report_scheduler(snapshot);
  std::printf("%s\n", reporter.path().c_str());
  std::fflush(stdout);

  for (int tick = 0; g_stop == 0 && tick < seconds * 10; ++tick) {
    reporter.heartbeat();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}
