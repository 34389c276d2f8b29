// Where and what rankstatd serves: several --web.listen-address at once (IPv4 and IPv6), the sockets
// systemd passes (--web.systemd-socket, exercised with systemd-socket-activate), and the scrape filters
// name[] and self_metrics=false.
#include <signal.h>

#include <catch2/catch.hpp>

#include "prometheus_under_test.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace std::chrono_literals;

TEST_CASE("repeated --web.listen-address flags serve IPv4 and IPv6 loopback at once") {
  TempDir shm;
  if (run_command("python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind((\"::1\", 0))'") !=
      0) {
    WARN("IPv6 loopback unavailable here, skipping");
    return;
  }
  const int v6_port = unused_port();
  DaemonUnderTest daemon(shm.path(), {"--web.listen-address=[::1]:" + std::to_string(v6_port)});
  const auto v4 = daemon.get("/healthz");
  REQUIRE(v4);
  CHECK(v4->status == 200);
  std::string output;
  CHECK(run_command("curl -s -g 'http://[::1]:" + std::to_string(v6_port) + "/healthz'", &output) == 0);
  CHECK(output == "ok\n");
  CHECK(daemon.log().find("[::1]:" + std::to_string(v6_port)) != std::string::npos);
  CHECK(daemon.stop() == 0);
}

TEST_CASE("with --web.systemd-socket the daemon serves the socket systemd passes it") {
  TempDir shm;
  TempDir files("rankstat-socket-activation");
  const int port = unused_port();
  // systemd-socket-activate listens like rankstatd.socket does, then starts the daemon with the socket on
  // the first connection.
  ChildProcess activator({"/usr/bin/systemd-socket-activate", "-l", "127.0.0.1:" + std::to_string(port),
                          binary_path("daemon/rankstatd"), "--web.systemd-socket", "--shm.dir=" + shm.path(),
                          "--web.address-file=" + files.path() + "/address"},
                         {}, files.path() + "/log");
  std::optional<HttpResponse> response;
  REQUIRE(wait_until(
      [&] {
        response = http_get("127.0.0.1", port, "/healthz");
        return response && response->status == 200;
      },
      20s));
  CHECK(response->body == "ok\n");
  CHECK(read_file(files.path() + "/address") == "127.0.0.1:" + std::to_string(port) + "\n");
  activator.signal(SIGTERM);
  CHECK(activator.wait_for(10s) == 0);
  INFO(read_file(files.path() + "/log"));

  // Without a passed socket the flag is an error that says how to start the daemon.
  std::string output;
  CHECK(run_command("timeout 10 " + binary_path("daemon/rankstatd") +
                        " --web.systemd-socket --shm.dir=" + shm.path() + " 2>&1",
                    &output) == 1);
  CHECK(output.find("systemd passed no socket") != std::string::npos);
}

TEST_CASE("name[] keeps only the named samples and self_metrics=false leaves out the daemon's own families") {
  TempDir shm;
  WriterProcess writer(shm.path(),
                       {"--instance=filters", "--tp=0", "--running=3", "--events=2", "--hold-seconds=60"});
  REQUIRE(writer.wait_ready());
  DaemonUnderTest daemon(shm.path());
  std::string full;
  REQUIRE(wait_until(
      [&] {
        const auto r = daemon.get("/metrics");
        full = r ? r->body : "";
        return full.find("sglang:num_running_reqs{") != std::string::npos;
      },
      10s));

  // prometheus_client's parameter, bracket escaped as Prometheus's params: would send it.
  const auto named =
      daemon.get("/metrics?name%5B%5D=sglang:num_running_reqs&name[]=rankstat_http_requests_total");
  REQUIRE(named);
  INFO(named->body);
  CHECK(named->status == 200);
  CHECK(value_of(named->body, "sglang:num_running_reqs") == 3);
  CHECK(value_of(named->body, "rankstat_http_requests_total").has_value());
  CHECK(named->body.find("# TYPE sglang:num_running_reqs gauge") != std::string::npos);
  CHECK(named->body.find("sglang:num_queue_reqs") == std::string::npos);
  CHECK(named->body.find("process_") == std::string::npos);
  // A counter's sample name is its _total name, as in prometheus_client.
  const auto counter = daemon.get("/metrics?name[]=sglang:test_events_total");
  REQUIRE(counter);
  CHECK(value_of(counter->body, "sglang:test_events_total").has_value());
  CHECK(daemon.get("/metrics?name[]=no_such_family")->body.empty());

  const auto engine_only = daemon.get("/metrics?self_metrics=false");
  REQUIRE(engine_only);
  INFO(engine_only->body);
  CHECK(engine_only->body.find("sglang:num_running_reqs{") != std::string::npos);
  CHECK(engine_only->body.find("rankstat_") == std::string::npos);
  CHECK(engine_only->body.find("process_") == std::string::npos);
  // The filtered answer is gzipped like any other when the client accepts it.
  const auto gzipped = daemon.get("/metrics?self_metrics=false", {{"Accept-Encoding", "gzip"}});
  REQUIRE(gzipped);
  const auto encoding = gzipped->headers.find("content-encoding");
  CHECK((encoding != gzipped->headers.end() && encoding->second == "gzip"));
  CHECK(daemon.stop() == 0);
  CHECK(writer.stop() == 0);
}
