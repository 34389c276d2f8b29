// Fleet scale: operator-set constant labels on every engine series of a real daemon (refused when they
// collide with an engine label), the process_* self-metrics, a PD pair whose TP and DP ranks span two
// nodes' daemons and whose roll-ups a real Prometheus answers right (directly and through agents'
// remote_write), and the offline checks of the Kubernetes base.
#include <signal.h>
#include <stdlib.h>

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "operations_support.hpp"
#include "prometheus_under_test.hpp"

using namespace rankstat::testkit;
using namespace rankstat::ops_test;
using namespace std::chrono_literals;

namespace {

// The engine sample lines of an exposition (no comments, no rankstat_ or process_ self-metrics).
std::vector<std::string> engine_samples(const std::string& exposition) {
  std::vector<std::string> out;
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.starts_with('#') || line.starts_with("rankstat_") ||
        line.starts_with("process_"))
      continue;
    out.push_back(line);
  }
  return out;
}

// The label names of one sample line, in the order written.
std::vector<std::string> label_names(const std::string& sample) {
  std::vector<std::string> names;
  const auto open = sample.find('{');
  if (open == std::string::npos) return names;
  std::size_t at = open + 1;
  while (at < sample.size() && sample[at] != '}') {
    const auto equals = sample.find('=', at);
    names.push_back(sample.substr(at, equals - at));
    at = sample.find('"', equals + 2);  // the closing quote (test values hold no escaped quotes)
    at += sample[at + 1] == ',' ? 2u : 1u;
  }
  return names;
}

}  // namespace

TEST_CASE(
    "every engine series of a daemon carries the constant labels from flags and environment, in name order") {
  TempDir shm;
  auto writer = start_writer(shm, {"--instance=fleet", "--tp=0", "--dp=1", "--running=3", "--events=4",
                                   "--gauge=sglang:test_per_process:all:2", "--hold-seconds=60"});
  REQUIRE(wait_until([&] { return shm.list().size() == 1; }, 10s));
  ::setenv("RANKSTAT_LABEL_DEPLOYMENT", "llama", 1);
  DaemonUnderTest daemon(shm.path(),
                         {"--label.cluster=eu1", "--label.node", "gpu-a", "--label.instance=instance_id"});
  ::unsetenv("RANKSTAT_LABEL_DEPLOYMENT");
  std::string body;
  REQUIRE(wait_until(
      [&] {
        auto r = daemon.get("/metrics");
        body = r ? r->body : "";
        return body.find("sglang:num_running_reqs{") != std::string::npos;
      },
      10s));
  INFO(body);
  const auto samples = engine_samples(body);
  REQUIRE(samples.size() > 10);  // snapshot gauges, a declared counter, histogram buckets, a per-pid gauge
  for (const std::string& sample : samples) {
    INFO(sample);
    CHECK(sample.find("cluster=\"eu1\"") != std::string::npos);
    CHECK(sample.find("deployment=\"llama\"") != std::string::npos);
    CHECK(sample.find("node=\"gpu-a\"") != std::string::npos);
    CHECK(sample.find("instance_id=\"fleet\"") != std::string::npos);
    const auto names = label_names(sample);
    CHECK(std::is_sorted(names.begin(), names.end()));
  }
  CHECK(value_of(body, "sglang:num_running_reqs", {"node=\"gpu-a\"", "dp_rank=\"1\""}) == 3);
  CHECK(value_of(body, "sglang:test_per_process", {"node=\"gpu-a\"", "pid=\""}) == 2);
  // Self-metrics describe the daemon: Prometheus's target labels identify it, not the constant labels.
  CHECK(body.find("rankstat_scrape_shadowed_constant_labels 0") != std::string::npos);
  CHECK(daemon.stop() == 0);
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
}

TEST_CASE(
    "an engine label that a constant label shadows at run time keeps the engine's value, counted and logged "
    "once") {
  TempDir shm;
  // The test writer's declared counter carries kind="unit".
  auto writer = start_writer(shm, {"--instance=fleet", "--tp=0", "--events=2", "--hold-seconds=60"});
  REQUIRE(wait_until([&] { return shm.list().size() == 1; }, 10s));
  DaemonUnderTest daemon(shm.path(), {"--label.kind=operator", "--label.node=gpu-a"});
  std::string body;
  REQUIRE(wait_until(
      [&] {
        auto r = daemon.get("/metrics");
        body = r ? r->body : "";
        return body.find("sglang:test_events_total{") != std::string::npos;
      },
      10s));
  INFO(body);
  CHECK(value_of(body, "sglang:test_events_total", {"kind=\"unit\"", "node=\"gpu-a\""}) == 2);
  CHECK(body.find("kind=\"operator\"") != std::string::npos);  // on the series without a kind of their own
  CHECK(value_of(body, "rankstat_scrape_shadowed_constant_labels") == 1);
  REQUIRE(daemon.get("/metrics"));
  CHECK(daemon.stop() == 0);
  const std::string log = daemon.log();
  INFO(log);
  const auto first = log.find("keep the engine's value");
  CHECK(first != std::string::npos);
  CHECK(log.find("keep the engine's value", first + 1) == std::string::npos);
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
}

TEST_CASE("a constant label that collides with an engine label is refused at start with an error naming it") {
  TempDir shm;
  const std::string daemon = "timeout 10 " + binary_path("daemon/rankstatd") +
                             " --web.listen-address=127.0.0.1:0 --shm.dir=" + shm.path();
  std::string output;
  CHECK(run_command(daemon + " --label.tp_rank=1 2>&1", &output) == 2);
  CHECK(output.find("--label.tp_rank refused: 'tp_rank' collides with the engine label") !=
        std::string::npos);
  CHECK(run_command("RANKSTAT_LABEL_LE=1 " + daemon + " 2>&1", &output) == 2);
  CHECK(output.find("RANKSTAT_LABEL_LE refused: 'le' is reserved") != std::string::npos);
}

TEST_CASE("the daemon serves the process_* families every exporter has, from /proc/self, each documented") {
  TempDir shm;
  DaemonUnderTest daemon(shm.path());
  auto r = daemon.get("/metrics");
  REQUIRE(r);
  const std::string body = r->body;
  INFO(body);
  const std::string guide = read_file(source_path("docs/operations.md"));
  for (const char* family :
       {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
        "process_open_fds", "process_max_fds", "process_start_time_seconds"}) {
    INFO(family);
    CHECK(value_of(body, family).has_value());
    CHECK(guide.find("| `" + std::string(family) + "` |") != std::string::npos);
  }
  CHECK(body.find("# TYPE process_cpu_seconds_total counter") != std::string::npos);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(*value_of(body, "process_start_time_seconds") <= now + 1);
  CHECK(*value_of(body, "process_start_time_seconds") > now - 60);  // the daemon started for this test
  CHECK(*value_of(body, "process_resident_memory_bytes") > 1e6);
  CHECK(*value_of(body, "process_open_fds") >= 4);  // std streams and the listener at least
  CHECK(*value_of(body, "process_open_fds") <= *value_of(body, "process_max_fds"));
  CHECK(daemon.stop() == 0);
}

namespace {

// One scheduler rank of the simulated fleet: which node and daemon it runs under and what it reports.
struct FleetRank {
  std::string instance;
  int dp;
  int tp;
  int running;
  int queue;
  std::string pd_queues;  // prefill bootstrap, prefill inflight, decode prealloc, decode transfer
  double ttft_seconds;    // 0: observes nothing
};

// A rank with tp > 0 reports the same batch as its tp 0 peer; SGLang exports scheduler gauges from
// tp 0 only, so these values must not show up in any roll-up (a double count would).
constexpr int kNotExported = 99;

}  // namespace

TEST_CASE(
    "two rankstatd nodes serving a PD pair whose TP and DP ranks span both roll up to the right numbers in "
    "Prometheus, scraped directly and through agents remote-writing to a central server") {
  // The decode engine llama-r0 has four DP ranks, two per node, and DP ranks 0 and 2 are TP groups of two
  // whose tp 1 runs on the other node. Its prefill peer llama-p0 has two DP ranks on node a, under a
  // daemon of its own (one daemon per engine pod, so pd_role is the daemon's constant label). Node a's
  // decode ranks answer the first token in 0.3 s, node b's in 3 s.
  TempDir shm_a_decode("rankstat-node-a-decode");
  TempDir shm_a_prefill("rankstat-node-a-prefill");
  TempDir shm_b_decode("rankstat-node-b-decode");
  const std::vector<std::pair<TempDir*, std::vector<FleetRank>>> placement = {
      {&shm_a_decode,
       {{"llama-r0", 0, 0, 4, 0, "0,0,1,2", 0.3},
        {"llama-r0", 1, 0, 3, 1, "0,0,2,0", 0.3},
        {"llama-r0", 2, 1, kNotExported, kNotExported, "0,0,99,99", 0}}},
      {&shm_a_prefill, {{"llama-p0", 0, 0, 2, 5, "3,1,0,0", 0}, {"llama-p0", 1, 0, 1, 2, "4,0,0,0", 0}}},
      {&shm_b_decode,
       {{"llama-r0", 2, 0, 6, 2, "0,0,0,3", 3.0},
        {"llama-r0", 3, 0, 8, 0, "0,0,1,1", 3.0},
        {"llama-r0", 0, 1, kNotExported, kNotExported, "0,0,99,99", 0}}},
  };
  std::vector<std::unique_ptr<ChildProcess>> writers;
  for (const auto& [shm, ranks] : placement) {
    for (const FleetRank& r : ranks) {
      std::vector<std::string> args = {
          "--instance=" + r.instance,
          "--model=llama",
          "--tp=" + std::to_string(r.tp),
          "--dp=" + std::to_string(r.dp),
          "--running=" + std::to_string(r.running),
          "--queue=" + std::to_string(r.queue),
          "--pd-queues=" + r.pd_queues,
          "--report-kind=" + std::string(r.instance == "llama-p0" ? "prefill" : "decode"),
          "--hold-seconds=120"};
      if (r.ttft_seconds > 0) {
        args.push_back("--observe=sglang:time_to_first_token_seconds:" + std::to_string(r.ttft_seconds));
        args.push_back("--observe-every-ms=50");
      }
      writers.push_back(start_writer(*shm, args));
    }
  }
  REQUIRE(wait_until(
      [&] {
        return shm_a_decode.list().size() == 3 && shm_a_prefill.list().size() == 2 &&
               shm_b_decode.list().size() == 3;
      },
      10s));
  auto node_flags = [](const std::string& node, const std::string& node_rank, const std::string& pd_role) {
    return std::vector<std::string>{"--label.cluster=eu1",        "--label.deployment=llama",
                                    "--label.pd_role=" + pd_role, "--label.instance=instance_id",
                                    "--label.node=" + node,       "--label.node_rank=" + node_rank};
  };
  DaemonUnderTest daemon_a_decode(shm_a_decode.path(), node_flags("a", "0", "decode"));
  DaemonUnderTest daemon_a_prefill(shm_a_prefill.path(), node_flags("a", "0", "prefill"));
  DaemonUnderTest daemon_b_decode(shm_b_decode.path(), node_flags("b", "1", "decode"));

  // The expected roll-ups, computed from the ranks above (the test writer reports token_usage 0.25 and
  // gen_throughput 100 + tp, so 100 from every exporting rank).
  std::map<std::string, double> running, queue, bootstrap, inflight, prealloc, transfer;
  double decode_throughput = 0, decode_ranks = 0, decode_total_load = 0, decode_max_load = 0;
  for (const auto& [shm, ranks] : placement) {
    for (const FleetRank& r : ranks) {
      if (r.tp != 0) continue;
      const std::string role = r.instance == "llama-p0" ? "prefill" : "decode";
      int q[4] = {};
      std::sscanf(r.pd_queues.c_str(), "%d,%d,%d,%d", &q[0], &q[1], &q[2], &q[3]);
      running[role] += r.running;
      queue[role] += r.queue;
      bootstrap[role] += q[0];
      inflight[role] += q[1];
      prealloc[role] += q[2];
      transfer[role] += q[3];
      if (role != "decode") continue;
      decode_throughput += 100;
      decode_ranks += 1;
      decode_total_load += r.running + r.queue;
      decode_max_load = std::max<double>(decode_max_load, r.running + r.queue);
    }
  }
  // TTFT: the decode ranks observe 0.3 s (node a) and 3 s (node b) at one pace, so half the summed
  // observations fall at or below le="0.5" and all at or below le="5". The 0.9 quantile interpolates in
  // (2.5, 5]: 2.5 + 2.5 * (0.9 - 0.5) / 0.5 = 4.5. The two nodes' rates are not exactly equal (scrape
  // timing), hence the tolerance; an average of the per-node 0.9 quantiles would be far off (~1.7).
  const double ttft_p90 = 2.5 + 2.5 * (0.9 - 0.5) / 0.5;
  struct Expectation {
    std::string expr;
    double value;
    double tolerance;
  };
  const std::string decode = "{deployment=\"llama\", pd_role=\"decode\"}";
  const std::string prefill = "{deployment=\"llama\", pd_role=\"prefill\"}";
  const std::vector<Expectation> expected = {
      {"deployment:sglang_num_running_reqs:sum" + decode, running["decode"], 0},
      {"deployment:sglang_num_running_reqs:sum" + prefill, running["prefill"], 0},
      {"deployment:sglang_num_queue_reqs:sum" + decode, queue["decode"], 0},
      {"deployment:sglang_num_queue_reqs:sum" + prefill, queue["prefill"], 0},
      {"deployment:sglang_token_usage:avg" + decode, 0.25, 0},
      {"deployment:sglang_token_usage:max" + decode, 0.25, 0},
      {"deployment:sglang_gen_throughput:sum" + decode, decode_throughput, 0},
      {"engine:sglang_dp_ranks:count{deployment=\"llama\", instance_id=\"llama-r0\"}", decode_ranks, 0},
      {"engine:sglang_dp_ranks:count{deployment=\"llama\", instance_id=\"llama-p0\"}", 2, 0},
      {"engine:sglang_dp_load_imbalance:ratio{deployment=\"llama\", instance_id=\"llama-r0\"}",
       decode_max_load / (decode_total_load / decode_ranks), 0},
      {"deployment:sglang_num_prefill_bootstrap_queue_reqs:sum" + prefill, bootstrap["prefill"], 0},
      {"deployment:sglang_num_prefill_inflight_queue_reqs:sum" + prefill, inflight["prefill"], 0},
      {"deployment:sglang_num_decode_prealloc_queue_reqs:sum" + decode, prealloc["decode"], 0},
      {"deployment:sglang_num_decode_transfer_queue_reqs:sum" + decode, transfer["decode"], 0},
      {"deployment:sglang_time_to_first_token_seconds:quantile{deployment=\"llama\", pd_role=\"decode\", "
       "quantile=\"0.9\"}",
       ttft_p90, 0.2},
      // Both nodes' decode series are there, each with its own node label.
      {"count(count by (node, node_rank) (sglang:num_running_reqs" + decode + "))", 2, 0},
  };
  auto check_rollups = [&](PrometheusUnderTest& prometheus) {
    INFO("prometheus log:\n" << prometheus.log());
    auto patience = 40s;  // the first answer waits for scrapes (or remote writes) and a rule evaluation
    for (const auto& [expr, value, tolerance] : expected) {
      INFO(expr << " should be " << value);
      std::optional<double> got;
      const bool answered = wait_until(
          [&] {
            got = prometheus.scalar(expr);
            return got &&
                   std::fabs(*got - value) <= std::max(tolerance, 1e-9 * std::max(1.0, std::fabs(value)));
          },
          patience);
      patience = 5s;
      INFO("last answer " << (got ? std::to_string(*got) : std::string("none")));
      CHECK(answered);
    }
  };

  auto target = [](const DaemonUnderTest& daemon) {
    return "'127.0.0.1:" + std::to_string(daemon.port()) + "'";
  };
  const std::string fleet_rules = source_path("deploy/prometheus/rankstat.fleet.rules.yml");
  const std::string targets_a = target(daemon_a_decode) + ", " + target(daemon_a_prefill);
  const std::string targets_b = target(daemon_b_decode);
  SECTION("one Prometheus scrapes both nodes") {
    const std::string config =
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files:\n  - rankstat.fleet.rules.yml\n"
        "scrape_configs:\n  - job_name: rankstat\n    static_configs:\n"
        "      - targets: [" +
        targets_a + ", " + targets_b + "]\n";
    TempDir data("rankstat-prometheus-data");
    PrometheusUnderTest prometheus(config, {"--storage.tsdb.path=" + data.path()}, {fleet_rules});
    check_rollups(prometheus);
  }
  SECTION("a Prometheus agent per node remote-writes to a central Prometheus that holds the rules") {
    const std::string central_config =
        "global:\n  evaluation_interval: 1s\n"
        "rule_files:\n  - rankstat.fleet.rules.yml\n";
    TempDir data("rankstat-prometheus-data");
    PrometheusUnderTest central(central_config,
                                {"--storage.tsdb.path=" + data.path(), "--web.enable-remote-write-receiver"},
                                {fleet_rules});
    auto agent_config = [&](const std::string& targets) {
      return "global:\n  scrape_interval: 1s\n"
             "scrape_configs:\n  - job_name: rankstat\n    static_configs:\n"
             "      - targets: [" +
             targets +
             "]\n"
             "remote_write:\n  - url: http://127.0.0.1:" +
             std::to_string(central.port()) +
             "/api/v1/write\n"
             "    queue_config:\n      batch_send_deadline: 1s\n";
    };
    TempDir wal_a("rankstat-agent-a");
    TempDir wal_b("rankstat-agent-b");
    PrometheusUnderTest agent_a(agent_config(targets_a),
                                {"--enable-feature=agent", "--storage.agent.path=" + wal_a.path()});
    PrometheusUnderTest agent_b(agent_config(targets_b),
                                {"--enable-feature=agent", "--storage.agent.path=" + wal_b.path()});
    check_rollups(central);
  }
  CHECK(daemon_a_decode.stop() == 0);
  CHECK(daemon_a_prefill.stop() == 0);
  CHECK(daemon_b_decode.stop() == 0);
  for (auto& writer : writers) {
    writer->signal(SIGTERM);
    CHECK(writer->wait_for(10s) == 0);
  }
}

TEST_CASE(
    "the Kubernetes base parses, shares the segment tmpfs and pid namespace with the engine, and its "
    "PrometheusRule holds the rule files' groups, which pass promtool") {
  std::string output;
  const int rc = run_command(
      "timeout 90 python3 " + source_path("tests/integration/operations/check_kubernetes.py") + " 2>&1",
      &output);
  INFO(output);
  CHECK(rc == 0);
  CHECK(output.find("OK") != std::string::npos);
}
