// rankstat-example-engine: a stand-in for an SGLang deployment. It forks one process per scheduler
// rank (dp × pp × tp), each running a SimulatedScheduler that reports through rankstat::Reporter, and
// forwards SIGINT/SIGTERM to them so they exit cleanly. The segment flags, stop signals and step
// cadence are the fake rank's (tests/testkit/fake_rank), shared with the test and benchmark writers;
// the deployment shape and the simulated scheduler are its own.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "fake_rank.hpp"
#include "simulated_scheduler.hpp"

namespace {

namespace fake_rank = rankstat::fake_rank;

struct EngineOptions {
  fake_rank::SegmentFlags segment{.instance = "demo", .model = "demo-model"};
  int tp = 1;
  int pp = 1;
  int dp = 4;
  double duration_seconds = 0;
  bool all_schedulers = false;
  rankstat::example::SimulationOptions sim;
};

int run_rank(const EngineOptions& o, int tp_rank, int pp_rank, int dp_rank) {
  fake_rank::SegmentFlags segment = o.segment;
  if (o.sim.priorities) segment.identity_flags |= rankstat::shm::kFlagPriorityScheduling;
  if (o.all_schedulers) segment.identity_flags |= rankstat::shm::kFlagAllSchedulersMetrics;
  fake_rank::RankPlace place;
  place.tp_rank = tp_rank;
  place.pp_rank = pp_rank;
  place.dp_rank = o.dp > 1 ? dp_rank : rankstat::shm::kRankUnset;
  place.moe_ep_rank = tp_rank;
  place.tp_size = o.tp;
  place.pp_size = o.pp;
  place.dp_size = o.dp;
  rankstat::Reporter reporter;
  if (reporter.open(fake_rank::reporter_options(segment, place)) != rankstat::Status::kOk) {
    // An engine keeps serving without metrics; the example just says so and goes on simulating.
    std::fprintf(stderr, "rank tp%d dp%d: metrics disabled: %s\n", tp_rank, dp_rank,
                 reporter.error_message().c_str());
  }
  rankstat::example::SimulationOptions sim = o.sim;
  sim.seed = static_cast<std::uint32_t>(1 + tp_rank + 17 * pp_rank + 131 * dp_rank);
  rankstat::example::SimulatedScheduler scheduler(reporter, sim);
  fake_rank::Loop loop(o.duration_seconds > 0 ? o.duration_seconds : fake_rank::kForever);
  // A pause after each step, not a cadence: a rank that was stopped (kill -STOP) resumes at its own
  // pace instead of making up the missed steps in a burst.
  const auto pause =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(sim.step_seconds));
  loop.run([&](double now) {
    scheduler.step(now);
    return pause;
  });
  reporter.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  CLI::App app{"Simulated SGLang scheduler ranks reporting through rankstat"};
  fake_rank::add_segment_flags(app, o.segment);
  app.add_option("--tp", o.tp, "Tensor-parallel size")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--pp", o.pp, "Pipeline-parallel size")->capture_default_str()->check(CLI::Range(1, 16));
  app.add_option("--dp", o.dp, "Data-parallel size")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--duration", o.duration_seconds, "Seconds to run (0 = until SIGINT/SIGTERM)")
      ->capture_default_str();
  app.add_option("--arrival-rate", o.sim.arrival_rate_per_s, "Mean requests per second per rank")
      ->capture_default_str();
  app.add_option("--step-seconds", o.sim.step_seconds, "Wall time per scheduler step")->capture_default_str();
  app.add_flag("--all-schedulers", o.all_schedulers,
               "Every rank exports (SGLang's all-schedulers metrics mode)");
  app.add_flag("!--no-priorities", o.sim.priorities, "Disable priority scheduling");
  app.add_flag("!--no-speculative", o.sim.speculative, "Disable speculative decoding");
  CLI11_PARSE(app, argc, argv);
  fake_rank::stop_on_signals();

  std::vector<pid_t> children;
  for (int dp = 0; dp < o.dp; ++dp) {
    for (int pp = 0; pp < o.pp; ++pp) {
      for (int tp = 0; tp < o.tp; ++tp) {
        const pid_t pid = fork();
        if (pid == 0) _exit(run_rank(o, tp, pp, dp));
        if (pid < 0) {
          std::perror("fork");
          fake_rank::request_stop();
          break;
        }
        children.push_back(pid);
      }
    }
  }
  std::fprintf(stderr, "example engine '%s': %zu scheduler ranks running (tp=%d pp=%d dp=%d)\n",
               o.segment.instance.c_str(), children.size(), o.tp, o.pp, o.dp);
  int exit_code = 0;
  std::size_t alive = children.size();
  while (alive > 0) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --alive;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) exit_code = 1;
      continue;
    }
    if (fake_rank::stop_requested()) {
      for (pid_t child : children) kill(child, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return exit_code;
}
