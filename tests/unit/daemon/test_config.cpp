#include <catch2/catch.hpp>

#include "config.hpp"

using namespace std::chrono_literals;

TEST_CASE("durations accept ms, s, m and h suffixes and refuse anything else") {
  CHECK(rankstat::parse_duration("5ms") == 5ms);
  CHECK(rankstat::parse_duration("2s") == 2000ms);
  CHECK(rankstat::parse_duration("1.5s") == 1500ms);
  CHECK(rankstat::parse_duration("1m") == 60000ms);
  CHECK(rankstat::parse_duration("250") == 250ms);
  CHECK_FALSE(rankstat::parse_duration("5 parsecs"));
  CHECK_FALSE(rankstat::parse_duration("-1s"));
  CHECK_FALSE(rankstat::parse_duration(""));
}

TEST_CASE("flags follow the exporter conventions and keep their defaults") {
  const char* argv[] = {"rankstatd", "--web.listen-address=127.0.0.1:0", "--shm.dir=/tmp/x",
                        "--log.level=debug", "--shm.poll-interval=5ms"};
  auto parsed = rankstat::parse_config(5, argv);
  REQUIRE(parsed.config);
  CHECK(parsed.config->listen_address == "127.0.0.1:0");
  CHECK(parsed.config->telemetry_path == "/metrics");
  CHECK(parsed.config->shm_dir == "/tmp/x");
  CHECK(parsed.config->log_level == "debug");
  CHECK(parsed.config->poll_interval == 5ms);
  CHECK(parsed.config->poll_interval_max == 100ms);
  CHECK(parsed.config->stall_after == 30000ms);
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
