// The deploy artifacts: the alert rules and the scrape config pass promtool, the alerts fire on the
// situations they describe (promtool test rules), and a real Prometheus scraping a real rankstatd with
// this config loads the rules and answers every query of the Grafana dashboard. Also the exporter
// convention of a landing page at /.
#include <signal.h>

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <set>

#include "operations_support.hpp"

using namespace rankstat::testkit;
using namespace rankstat::ops_test;
using namespace std::chrono_literals;

namespace {

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// Every PromQL expression of the dashboard's panels (rows included), with the panel title.
std::vector<std::pair<std::string, std::string>> dashboard_queries(const boost::json::object& dashboard) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<const boost::json::array*> pending = {&dashboard.at("panels").as_array()};
  while (!pending.empty()) {
    const boost::json::array* panels = pending.back();
    pending.pop_back();
    for (const auto& p : *panels) {
      const auto& panel = p.as_object();
      if (const auto* nested = panel.if_contains("panels"); nested != nullptr && nested->is_array()) {
        pending.push_back(&nested->as_array());
      }
      const auto* targets = panel.if_contains("targets");
      if (targets == nullptr) continue;
      for (const auto& t : targets->as_array()) {
        out.emplace_back(std::string(panel.at("title").as_string()), std::string(t.at("expr").as_string()));
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("promtool accepts the alert rules and the scrape config that references them") {
  std::string output;
  int rc =
      run_command("promtool check rules " + source_path("deploy/prometheus/rankstat.rules.yml"), &output);
  INFO(output);
  CHECK(rc == 0);
  CHECK(output.find("SUCCESS") != std::string::npos);
  rc = run_command("promtool check config " + source_path("deploy/prometheus/prometheus.yml"), &output);
  INFO(output);
  CHECK(rc == 0);
  CHECK(output.find("2 rule files found") != std::string::npos);
  // Every alert the issue asks for is there.
  const std::string rules = read_file(source_path("deploy/prometheus/rankstat.rules.yml"));
  for (const char* alert : {"RankDead", "RankStalled", "RankRingDropsRising", "SGLangKVPoolNearlyFull",
                            "SGLangQueueGrowingWhileThroughputFalls", "RankstatDaemonDown"}) {
    INFO(alert);
    CHECK(rules.find("- alert: " + std::string(alert) + "\n") != std::string::npos);
  }
}

TEST_CASE(
    "each alert fires on the situation it describes and not before its hold time (promtool test rules)") {
  std::string output;
  const int rc = run_command(
      "cd " + source_path("tests/integration/operations") + " && promtool test rules rankstat.rules.test.yml",
      &output);
  INFO(output);
  CHECK(rc == 0);
  CHECK(output.find("SUCCESS") != std::string::npos);
}

TEST_CASE(
    "the fleet roll-ups answer the right numbers for two nodes, a dead rank and a restart, and their alerts "
    "fire (promtool test rules)") {
  std::string output;
  int rc = run_command("promtool check rules " + source_path("deploy/prometheus/rankstat.fleet.rules.yml"),
                       &output);
  INFO(output);
  CHECK(rc == 0);
  rc = run_command("cd " + source_path("tests/integration/operations") +
                       " && promtool test rules rankstat.fleet.rules.test.yml",
                   &output);
  INFO(output);
  CHECK(rc == 0);
  CHECK(output.find("SUCCESS") != std::string::npos);
}

TEST_CASE(
    "the Grafana dashboard is well-formed and every panel query runs on a Prometheus scraping rankstatd") {
  const auto dashboard = parse_object(read_file(source_path("deploy/grafana/rankstat-overview.json")));
  CHECK(dashboard.at("uid") == "rankstat-overview");
  CHECK_FALSE(dashboard.at("title").as_string().empty());
  std::set<std::int64_t> ids;
  for (const auto& p : dashboard.at("panels").as_array()) {
    const auto& panel = p.as_object();
    INFO(boost::json::value(panel));
    CHECK(ids.insert(panel.at("id").as_int64()).second);
    const auto& grid = panel.at("gridPos").as_object();
    CHECK(grid.at("x").as_int64() + grid.at("w").as_int64() <= 24);
    if (panel.at("type") == "row") continue;
    CHECK(panel.at("datasource").at("uid") == "${datasource}");
    CHECK_FALSE(panel.at("targets").as_array().empty());
  }
  const auto queries = dashboard_queries(dashboard);
  REQUIRE(queries.size() >= 10);

  // A real Prometheus, configured from the deploy snippet, scraping a real daemon.
  TempDir shm;
  TempDir prom("rankstat-prometheus");
  auto writer =
      start_writer(shm, {"--instance=graf", "--tp=0", "--dp=0", "--running=3", "--hold-seconds=60"});
  REQUIRE(wait_until([&] { return shm.list().size() == 1; }, 10s));
  DaemonUnderTest daemon(shm.path());
  std::string config = read_file(source_path("deploy/prometheus/prometheus.yml"));
  REQUIRE(config.find("localhost:9473") != std::string::npos);
  config = replace_all(config, "localhost:9473", "127.0.0.1:" + std::to_string(daemon.port()));
  config = replace_all(config, "scrape_interval: 15s", "scrape_interval: 1s");
  config = replace_all(config, "scrape_interval: 5s", "scrape_interval: 1s");
  config = replace_all(config, "scrape_timeout: 4s", "scrape_timeout: 1s");
  config = replace_all(config, "evaluation_interval: 15s", "evaluation_interval: 1s");
  { std::ofstream(prom.path() + "/prometheus.yml") << config; }
  REQUIRE(run_command("cp " + source_path("deploy/prometheus/rankstat.rules.yml") + " " +
                      source_path("deploy/prometheus/rankstat.fleet.rules.yml") + " " + prom.path() + "/") ==
          0);
  const int port = unused_port();
  ChildProcess prometheus({"/usr/bin/prometheus", "--config.file=" + prom.path() + "/prometheus.yml",
                           "--storage.tsdb.path=" + prom.path() + "/data",
                           "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"},
                          {}, prom.path() + "/prometheus.log");
  auto query = [&](const std::string& expr) {
    auto r = http_get("127.0.0.1", port, "/api/v1/query?query=" + query_encode(expr));
    return r ? r->body : std::string();
  };
  INFO("prometheus log:\n" << read_file(prom.path() + "/prometheus.log"));
  REQUIRE(wait_until(
      [&] {
        const auto r = http_get("127.0.0.1", port, "/-/ready");
        return r && r->status == 200;
      },
      30s));
  // The target is up and its samples are in.
  REQUIRE(wait_until([&] { return query("rankstat_rank_up == 1").find("graf") != std::string::npos; }, 30s));
  const auto up = parse_object(query("up{job=\"rankstat\"}"));
  REQUIRE(up.at("data").at("result").as_array().size() == 1);
  CHECK(up.at("data").at("result").as_array()[0].at("value").as_array()[1] == "1");
  // The rule file the config references is loaded, every rule evaluates without error.
  REQUIRE(wait_until(
      [&] {
        auto r = http_get("127.0.0.1", port, "/api/v1/rules");
        if (!r) return false;
        const auto doc = parse_object(r->body);
        int rules = 0;
        for (const auto& g : doc.at("data").at("groups").as_array()) {
          for (const auto& rule : g.at("rules").as_array()) {
            if (rule.at("health") != "ok") return false;
            ++rules;
          }
        }
        return rules == 48;  // rankstat.rules.yml's 13 and rankstat.fleet.rules.yml's 35
      },
      20s));
  // Each panel query parses and runs, with the dashboard's variables as "All".
  for (const auto& [title, expr] : queries) {
    std::string concrete = replace_all(expr, "$__rate_interval", "1m");
    concrete = replace_all(concrete, "$job", "rankstat");
    concrete = replace_all(concrete, "$instance_id", ".*");
    concrete = replace_all(concrete, "$instance", ".*");
    INFO(title << ": " << concrete);
    CHECK(concrete.find('$') == std::string::npos);
    const auto answer = parse_object(query(concrete));
    INFO(boost::json::value(answer));
    CHECK(answer.at("status") == "success");
  }
  // The rank panels have data for the writer's rank.
  CHECK(query("rankstat_rank_heartbeat_age_seconds{instance_id=~\".*\"}").find("graf") != std::string::npos);
  CHECK(query("max by (instance, model_name, dp_rank) (sglang:token_usage{priority=\"\"})")
            .find("test-model") != std::string::npos);
  prometheus.signal(SIGTERM);
  CHECK(prometheus.wait_for(20s).has_value());
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
}

TEST_CASE("the landing page at / links to the metrics path and the JSON API, as exporters do") {
  TempDir shm;
  DaemonUnderTest daemon(shm.path(), {"--web.telemetry-path=/custom-metrics"});
  auto landing = daemon.get("/");
  REQUIRE(landing);
  CHECK(landing->status == 200);
  CHECK(landing->headers["content-type"].rfind("text/html", 0) == 0);
  INFO(landing->body);
  CHECK(landing->body.find("href=\"/custom-metrics\"") != std::string::npos);
  CHECK(landing->body.find("href=\"/api/v1/ranks\"") != std::string::npos);
  // The links lead somewhere.
  auto metrics = daemon.get("/custom-metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK(metrics->headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8");
  auto ranks = daemon.get("/api/v1/ranks");
  REQUIRE(ranks);
  CHECK(ranks->status == 200);
  CHECK(parse_object(ranks->body).at("ranks").as_array().empty());
  // An unknown rank is a JSON 404 that names it, whatever characters the request used.
  auto missing = daemon.get("/api/v1/ranks/no.such\"rank\\");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  const auto error = parse_object(missing->body);
  CHECK(text(error.at("error")) == "no such rank");
  CHECK(text(error.at("id")) == "no.such\"rank\\");
  CHECK(daemon.stop() == 0);
}
