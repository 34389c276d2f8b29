#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "config.hpp"
#include "engine_rules.hpp"
#include "gauge_integral.hpp"

using namespace std::chrono_literals;

TEST_CASE("duration flags take the shared grammar with units") {
  const char* argv[] = {"rankstatd", "--shm.poll-interval=5ms", "--liveness.stall-after=1m30s",
                        "--liveness.dead-grace=0", "--web.read-timeout=1.5s"};
  auto parsed = rankstat::parse_config(5, argv);
  REQUIRE(parsed.config);
  CHECK(parsed.config->poll_interval == 5ms);
  CHECK(parsed.config->stall_after == 90s);
  CHECK(parsed.config->dead_grace == 0ms);
  CHECK(parsed.config->read_timeout == 1500ms);
}

TEST_CASE("a daemon duration flag given a bare number is refused with the flag named and a unit asked for") {
  // A bare number used to mean milliseconds here; it means seconds in the shared grammar, so rankstatd
  // guesses neither.
  const char* argv[] = {"rankstatd", "--shm.poll-interval=2"};
  auto parsed = rankstat::parse_config(2, argv);
  CHECK_FALSE(parsed.config);
  CHECK(parsed.exit_code == 2);
  CHECK(parsed.message.find("--shm.poll-interval: '2' has no unit; write 2ms or 2s") != std::string::npos);
}

TEST_CASE("a zero duration is refused where it means nothing, with the flag named") {
  const char* argv[] = {"rankstatd", "--liveness.interval=0"};
  auto parsed = rankstat::parse_config(2, argv);
  CHECK_FALSE(parsed.config);
  CHECK(parsed.message.find("--liveness.interval") != std::string::npos);
  CHECK(parsed.message.find("positive") != std::string::npos);
}

TEST_CASE("flags follow the exporter conventions and keep their defaults") {
  const char* argv[] = {"rankstatd", "--web.listen-address=127.0.0.1:0", "--shm.dir=/tmp/x",
                        "--log.level=debug", "--shm.poll-interval=5ms"};
  auto parsed = rankstat::parse_config(5, argv);
  REQUIRE(parsed.config);
  CHECK(parsed.config->listen_addresses == std::vector<std::string>{"127.0.0.1:0"});
  CHECK(parsed.config->telemetry_path == "/metrics");
  CHECK(parsed.config->shm_dir == "/tmp/x");
  CHECK(parsed.config->log_level == "debug");
  CHECK(parsed.config->poll_interval == 5ms);
  CHECK(parsed.config->poll_interval_max == 100ms);
  CHECK(parsed.config->stall_after == 30000ms);
}

TEST_CASE("integrated gauges default to the load gauges, take a list, and turn off with none") {
  const char* defaults[] = {"rankstatd"};
  auto d = rankstat::parse_config(1, defaults);
  REQUIRE(d.config);
  CHECK(d.config->integrate_families == rankstat::default_integrated_families());
  CHECK(d.config->peak_window == 15000ms);
  const char* listed[] = {"rankstatd",
                          "--aggregate.integrate=sglang:num_queue_reqs,vllm:num_requests_waiting",
                          "--aggregate.peak-window=1m"};
  auto l = rankstat::parse_config(3, listed);
  REQUIRE(l.config);
  CHECK(l.config->integrate_families ==
        std::vector<std::string>{"sglang:num_queue_reqs", "vllm:num_requests_waiting"});
  CHECK(l.config->peak_window == 60000ms);
  const char* off[] = {"rankstatd", "--aggregate.integrate=none", "--aggregate.peak-window=0"};
  auto o = rankstat::parse_config(3, off);
  REQUIRE(o.config);
  CHECK(o.config->integrate_families.empty());
  CHECK(o.config->peak_window == 0ms);
  // Any UTF-8 text names a family (prometheus_client 0.22+), `a.b` and `a b` included; bytes that are
  // not UTF-8 do not.
  const char* dotted[] = {"rankstatd", "--aggregate.integrate=my.gauge"};
  auto dotted_parse = rankstat::parse_config(2, dotted);
  REQUIRE(dotted_parse.config);
  CHECK(dotted_parse.config->integrate_families == std::vector<std::string>{"my.gauge"});
  const char* bad[] = {"rankstatd", "--aggregate.integrate=a\xFF"};
  auto b = rankstat::parse_config(2, bad);
  CHECK_FALSE(b.config);
  CHECK(b.message.find("is not a metric name") != std::string::npos);
}

TEST_CASE("a bad flag value is refused with a message, not ignored") {
  const char* bad_level[] = {"rankstatd", "--log.level=loud"};
  auto a = rankstat::parse_config(2, bad_level);
  CHECK_FALSE(a.config);
  CHECK(a.exit_code != 0);
  CHECK_FALSE(a.message.empty());
  const char* bad_duration[] = {"rankstatd", "--liveness.stall-after=soon"};
  auto b = rankstat::parse_config(2, bad_duration);
  CHECK_FALSE(b.config);
  CHECK(b.message.find("soon") != std::string::npos);
  const char* bad_path[] = {"rankstatd", "--web.telemetry-path=metrics"};
  CHECK_FALSE(rankstat::parse_config(2, bad_path).config);
  const char* inverted_pacing[] = {"rankstatd", "--shm.poll-interval=50ms", "--shm.poll-interval-max=10ms"};
  auto c = rankstat::parse_config(3, inverted_pacing);
  CHECK_FALSE(c.config);
  CHECK(c.message.find("--shm.poll-interval-max (10ms) is shorter than --shm.poll-interval (50ms)") !=
        std::string::npos);
}

namespace {

// Sets an environment variable for one scope (parse_config reads RANKSTAT_LABEL_* from the environment).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace

TEST_CASE("constant labels come from repeated --label.NAME flags, both spellings, next to --label.instance") {
  const char* argv[] = {"rankstatd", "--label.cluster=eu1", "--label.node", "gpu-a",
                        "--label.instance=instance_id"};
  auto parsed = rankstat::parse_config(5, argv);
  INFO(parsed.message);
  REQUIRE(parsed.config);
  CHECK(parsed.config->instance_label == "instance_id");
  CHECK(parsed.config->constant_labels ==
        std::map<std::string, std::string>{{"cluster", "eu1"}, {"node", "gpu-a"}});
}

TEST_CASE(
    "constant labels come from RANKSTAT_LABEL_ variables, lower-cased, and a flag of the same name wins") {
  ScopedEnv node_rank("RANKSTAT_LABEL_NODE_RANK", "1");
  ScopedEnv node("RANKSTAT_LABEL_NODE", "from-env");
  const char* argv[] = {"rankstatd", "--label.node=from-flag"};
  auto parsed = rankstat::parse_config(2, argv);
  INFO(parsed.message);
  REQUIRE(parsed.config);
  CHECK(parsed.config->constant_labels ==
        std::map<std::string, std::string>{{"node", "from-flag"}, {"node_rank", "1"}});
}

TEST_CASE("constant labels come from label.NAME keys of the config file, and are kept over a reload") {
  char path[] = "/tmp/rankstat-config-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  { std::ofstream(path) << "log.level = debug\nlabel.deployment = llama-70b\n"; }
  const std::string flag = std::string("--config.file=") + path;
  const char* argv[] = {"rankstatd", flag.c_str(), "--label.cluster=eu1"};
  auto parsed = rankstat::parse_config(3, argv);
  INFO(parsed.message);
  REQUIRE(parsed.config);
  const std::map<std::string, std::string> expected{{"cluster", "eu1"}, {"deployment", "llama-70b"}};
  CHECK(parsed.config->constant_labels == expected);
  { std::ofstream(path) << "log.level = info\nlabel.deployment = changed\n"; }
  std::string error;
  auto reloaded = rankstat::reload_config(*parsed.config, error);
  INFO(error);
  REQUIRE(reloaded);
  CHECK(reloaded->log_level == "info");
  CHECK(reloaded->constant_labels == expected);  // fixed at start: a change would fork every series
  ::unlink(path);
}

TEST_CASE("a constant label that collides with an engine or reserved label is refused at start, by name") {
  const std::pair<std::vector<const char*>, std::string> cases[] = {
      {{"rankstatd", "--label.tp_rank=3"}, "--label.tp_rank refused: 'tp_rank' collides"},
      {{"rankstatd", "--label.instance=instance_id", "--label.instance_id=x"},
       "--label.instance_id refused: 'instance_id' collides with --label.instance"},
      {{"rankstatd", "--label.le=1"}, "--label.le refused: 'le' is reserved"},
      {{"rankstatd", "--label.job=x"}, "--label.job refused: 'job' is set by Prometheus"},
      {{"rankstatd", "--label.bad-name=x"}, "--label.bad-name refused: 'bad-name' is not a valid"},
  };
  for (const auto& [args, message] : cases) {
    auto parsed = rankstat::parse_config(static_cast<int>(args.size()), args.data());
    INFO(args.back() << " -> " << parsed.message);
    CHECK_FALSE(parsed.config);
    CHECK(parsed.exit_code == 2);
    CHECK(parsed.message.find(message) != std::string::npos);
  }
  const char* empty_flag[] = {"rankstatd", "--label.node="};
  auto empty = rankstat::parse_config(2, empty_flag);
  CHECK_FALSE(empty.config);
  CHECK(empty.message.find("--label.node") != std::string::npos);
  const char* argv[] = {"rankstatd"};
  {
    ScopedEnv pid("RANKSTAT_LABEL_PID", "1");
    auto parsed = rankstat::parse_config(1, argv);
    CHECK_FALSE(parsed.config);
    CHECK(parsed.message.find("RANKSTAT_LABEL_PID refused: 'pid' is reserved") != std::string::npos);
  }
  ScopedEnv node("RANKSTAT_LABEL_NODE", "");
  auto parsed = rankstat::parse_config(1, argv);
  CHECK_FALSE(parsed.config);
  CHECK(parsed.message.find("RANKSTAT_LABEL_NODE refused: empty value") != std::string::npos);
}
