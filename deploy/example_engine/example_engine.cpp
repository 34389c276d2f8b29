// rankstat-example-engine: a stand-in for an SGLang deployment. It forks one process per scheduler
// rank (dp × pp × tp), each running a SimulatedScheduler that reports through rankstat::Reporter, and
// forwards SIGINT/SIGTERM to them so they exit cleanly.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "rankstat/reporter.hpp"
#include "simulated_scheduler.hpp"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

struct EngineOptions {
  std::string instance = "demo";
  std::string model = "demo-model";
  std::string shm_dir;
  int tp = 1;
  int pp = 1;
  int dp = 4;
  double duration_seconds = 0;
  bool all_schedulers = false;
  rankstat::example::SimulationOptions sim;
};

int run_rank(const EngineOptions& o, int tp_rank, int pp_rank, int dp_rank) {
  rankstat::ReporterOptions options;
  options.shm_dir = o.shm_dir;
  auto& id = options.identity;
  id.role = rankstat::shm::Role::kScheduler;
  id.instance = o.instance;
  id.model_name = o.model;
  id.engine_type = "unified";
  id.tp_rank = tp_rank;
  id.pp_rank = pp_rank;
  id.dp_rank = o.dp > 1 ? dp_rank : rankstat::shm::kRankUnset;
  id.moe_ep_rank = tp_rank;
  id.tp_size = o.tp;
  id.pp_size = o.pp;
  id.dp_size = o.dp;
  if (o.sim.priorities) id.flags |= rankstat::shm::kFlagPriorityScheduling;
  if (o.all_schedulers) id.flags |= rankstat::shm::kFlagAllSchedulersMetrics;
  rankstat::Reporter reporter;
  if (reporter.open(options) != rankstat::Status::kOk) {
    // An engine keeps serving without metrics; the example just says so and goes on simulating.
    std::fprintf(stderr, "rank tp%d dp%d: metrics disabled: %s\n", tp_rank, dp_rank,
                 reporter.error_message().c_str());
  }
  rankstat::example::SimulationOptions sim = o.sim;
  sim.seed = static_cast<std::uint32_t>(1 + tp_rank + 17 * pp_rank + 131 * dp_rank);
  rankstat::example::SimulatedScheduler scheduler(reporter, sim);
  const auto start = std::chrono::steady_clock::now();
  while (!g_stop.load()) {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.duration_seconds > 0 && now >= o.duration_seconds) break;
    scheduler.step(now);
    std::this_thread::sleep_for(std::chrono::duration<double>(sim.step_seconds));
  }
  reporter.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  CLI::App app{"Simulated SGLang scheduler ranks reporting through rankstat"};
  app.add_option("--instance", o.instance, "Engine instance id")->capture_default_str();
  app.add_option("--model", o.model, "served_model_name")->capture_default_str();
  app.add_option("--shm-dir", o.shm_dir, "Segment directory (default $RANKSTAT_SHM_DIR or /dev/shm)");
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

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::vector<pid_t> children;
  for (int dp = 0; dp < o.dp; ++dp) {
    for (int pp = 0; pp < o.pp; ++pp) {
      for (int tp = 0; tp < o.tp; ++tp) {
        const pid_t pid = fork();
        if (pid == 0) _exit(run_rank(o, tp, pp, dp));
        if (pid < 0) {
          std::perror("fork");
          g_stop.store(true);
          break;
        }
        children.push_back(pid);
      }
    }
  }
  std::fprintf(stderr, "example engine '%s': %zu scheduler ranks running (tp=%d pp=%d dp=%d)\n",
               o.instance.c_str(), children.size(), o.tp, o.pp, o.dp);
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
    if (g_stop.load()) {
      for (pid_t child : children) kill(child, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return exit_code;
}
