// A real Prometheus (Debian's) scraping rankstatd with the scrape config an operator writes: scheme https,
// tls_config, basic_auth with a password_file. Right credentials give up == 1; a wrong password, no client
// certificate, a client certificate from an untrusted CA or an untrusted server CA give up == 0.
#include <catch2/catch.hpp>

#include "prometheus_under_test.hpp"
#include "testkit.hpp"
#include "web_support.hpp"

using namespace rankstat::testkit;
using namespace rankstat::web_test;
using namespace std::chrono_literals;

namespace {

// One scrape job against `port` over TLS; `tls_extra` and `auth` are YAML lines of the job (indented).
std::string job(const std::string& name, int port, const std::string& tls_extra,
                const std::string& auth = "") {
  return "  - job_name: " + name +
         "\n    scheme: https\n    static_configs:\n      - targets: ['127.0.0.1:" + std::to_string(port) +
         "']\n    tls_config:\n      server_name: localhost\n" + tls_extra + auth;
}

// Waits until every job has been scraped at least once and returns up per job.
std::map<std::string, double> up_per_job(PrometheusUnderTest& prometheus,
                                         const std::vector<std::string>& jobs) {
  std::map<std::string, double> up;
  const bool scraped = wait_until(
      [&] {
        for (const std::string& name : jobs) {
          const auto value = prometheus.scalar("up{job=\"" + name + "\"}");
          if (!value) return false;
          up[name] = *value;
        }
        return true;
      },
      30s);
  INFO(prometheus.log());
  REQUIRE(scraped);
  return up;
}

}  // namespace

TEST_CASE("a real Prometheus scrapes rankstatd over TLS with basic auth, and a wrong password gives up 0") {
  TestPki pki;
  TempDir shm;
  write_file(pki.file("web.yml"),
             "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
             "basic_auth_users:\n  prometheus: " +
                 bcrypt_hash("scrape-secret") + "\n");
  DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
  write_file(pki.file("right.password"), "scrape-secret\n");
  write_file(pki.file("wrong.password"), "not-the-secret\n");
  const std::string ca = "      ca_file: ca.crt\n";
  const std::string config =
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" +
      job("right_password", daemon.port(), ca,
          "    basic_auth:\n      username: prometheus\n      password_file: right.password\n") +
      job("wrong_password", daemon.port(), ca,
          "    basic_auth:\n      username: prometheus\n      password_file: wrong.password\n") +
      job("no_password", daemon.port(), ca);
  TempDir data("rankstat-prometheus-data");
  PrometheusUnderTest prometheus(
      config, {"--storage.tsdb.path=" + data.path()},
      {pki.file("ca.crt"), pki.file("right.password"), pki.file("wrong.password")});
  const auto up = up_per_job(prometheus, {"right_password", "wrong_password", "no_password"});
  CHECK(up.at("right_password") == 1);
  CHECK(up.at("wrong_password") == 0);
  CHECK(up.at("no_password") == 0);
  // The scraped series arrived: the daemon's own families, through TLS and auth.
  CHECK(wait_until(
      [&] {
        return prometheus.scalar("rankstat_http_active_connections{job=\"right_password\"}").has_value();
      },
      10s));
  CHECK(daemon.stop() == 0);
}

TEST_CASE(
    "a real Prometheus with a client certificate scrapes a daemon that requires one, and no certificate, an "
    "untrusted "
    "client CA or an untrusted server CA give up 0") {
  TestPki pki;
  TempDir shm;
  write_file(pki.file("web.yml"),
             "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
             "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n");
  DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
  const std::string config =
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" +
      job("client_certificate", daemon.port(),
          "      ca_file: ca.crt\n      cert_file: client.crt\n      key_file: client.key\n") +
      job("no_client_certificate", daemon.port(), "      ca_file: ca.crt\n") +
      job("untrusted_client_ca", daemon.port(),
          "      ca_file: ca.crt\n      cert_file: rogue-client.crt\n      key_file: rogue-client.key\n") +
      job("untrusted_server_ca", daemon.port(),
          "      ca_file: rogue-ca.crt\n      cert_file: client.crt\n      key_file: client.key\n");
  TempDir data("rankstat-prometheus-data");
  PrometheusUnderTest prometheus(
      config, {"--storage.tsdb.path=" + data.path()},
      {pki.file("ca.crt"), pki.file("rogue-ca.crt"), pki.file("client.crt"), pki.file("client.key"),
       pki.file("rogue-client.crt"), pki.file("rogue-client.key")});
  const auto up = up_per_job(prometheus, {"client_certificate", "no_client_certificate",
                                          "untrusted_client_ca", "untrusted_server_ca"});
  CHECK(up.at("client_certificate") == 1);
  CHECK(up.at("no_client_certificate") == 0);
  CHECK(up.at("untrusted_client_ca") == 0);
  CHECK(up.at("untrusted_server_ca") == 0);
  CHECK(daemon.stop() == 0);
}
