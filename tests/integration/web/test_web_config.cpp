// --web.config.file with curl as the client: every client_auth_type, client_allowed_sans, basic auth
// (401 with WWW-Authenticate, failures counted, no secret logged, probes open unless asked), the extra
// headers, clear errors at start, and SIGHUP reloads that keep the listener (or the old config when the
// new one is bad).
#include <signal.h>

#include <catch2/catch.hpp>

#include "testkit.hpp"
#include "web_support.hpp"

using namespace rankstat::testkit;
using namespace rankstat::web_test;
using namespace std::chrono_literals;

namespace {

std::string https_url(const DaemonUnderTest& daemon, const std::string& path) {
  return "https://127.0.0.1:" + std::to_string(daemon.port()) + path;
}

std::string tls_config(const TestPki& pki, const std::string& client_auth, const std::string& more = "") {
  return "tls_server_config:\n  cert_file: " + pki.file("server.crt") +
         "\n  key_file: " + pki.file("server.key") + "\n  client_auth_type: " + client_auth + "\n" +
         (client_auth == "NoClientCert" ? "" : "  client_ca_file: " + pki.file("ca.crt") + "\n") + more;
}

// curl arguments presenting no client certificate, the trusted one, or the rogue CA's.
std::vector<std::string> with_ca(const TestPki& pki, std::vector<std::string> more = {}) {
  more.push_back("--cacert");
  more.push_back(pki.file("ca.crt"));
  return more;
}
std::vector<std::string> trusted_client(const TestPki& pki) {
  return with_ca(pki, {"--cert", pki.file("client.crt"), "--key", pki.file("client.key")});
}
std::vector<std::string> rogue_client(const TestPki& pki) {
  return with_ca(pki, {"--cert", pki.file("rogue-client.crt"), "--key", pki.file("rogue-client.key")});
}

}  // namespace

TEST_CASE("each client_auth_type admits exactly the clients exporter-toolkit admits, checked with curl") {
  TestPki pki;
  TempDir shm;
  struct Expectation {
    const char* client_auth;
    bool without_certificate;
    bool trusted_certificate;
    bool untrusted_certificate;
  };
  for (const Expectation& e :
       {Expectation{"NoClientCert", true, true, true}, Expectation{"RequestClientCert", true, true, true},
        Expectation{"RequireAnyClientCert", false, true, true},
        Expectation{"VerifyClientCertIfGiven", true, true, false},
        Expectation{"RequireAndVerifyClientCert", false, true, false}}) {
    INFO("client_auth_type " << e.client_auth);
    write_file(pki.file("web.yml"), tls_config(pki, e.client_auth));
    DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
    const std::string url = https_url(daemon, "/metrics");
    CHECK((curl_status(url, with_ca(pki)) == 200) == e.without_certificate);
    CHECK((curl_status(url, trusted_client(pki)) == 200) == e.trusted_certificate);
    CHECK((curl_status(url, rogue_client(pki)) == 200) == e.untrusted_certificate);
    CHECK(curl_status("http://127.0.0.1:" + std::to_string(daemon.port()) + "/metrics", {}) != 200);
    CHECK(daemon.stop() == 0);
  }
}

TEST_CASE("client_allowed_sans admits a verified client certificate only when one of its SANs is listed") {
  TestPki pki;
  TempDir shm;
  write_file(pki.file("web.yml"), tls_config(pki, "RequireAndVerifyClientCert",
                                             "  client_allowed_sans: [other.example, scraper.example]\n"));
  {
    DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
    CHECK(curl_status(https_url(daemon, "/metrics"), trusted_client(pki)) == 200);
  }
  write_file(pki.file("web.yml"),
             tls_config(pki, "RequireAndVerifyClientCert", "  client_allowed_sans: [other.example]\n"));
  DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
  CHECK(curl_status(https_url(daemon, "/metrics"), trusted_client(pki)) == 0);
  const auto metrics = curl_status(https_url(daemon, "/healthz"), with_ca(pki));
  CHECK(metrics == 0);  // no certificate at all: refused in the handshake too
}

TEST_CASE(
    "basic auth guards every endpoint with 401 and WWW-Authenticate, counts failures without logging "
    "secrets, "
    "and leaves the probes open unless asked") {
  TestPki pki;
  TempDir shm;
  write_file(pki.file("web.yml"), tls_config(pki, "NoClientCert") + "http_server_config:\n  headers:\n" +
                                      "    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n" +
                                      "basic_auth_users:\n  prometheus: " + bcrypt_hash("s3cret-pass") +
                                      "\n");
  DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
  for (const char* path : {"/metrics", "/api/v1/ranks", "/", "/api/v1/ranks/x.scheduler.0"}) {
    INFO(path);
    CHECK(curl_status(https_url(daemon, path), with_ca(pki)) == 401);
    CHECK(curl_status(https_url(daemon, path), with_ca(pki, {"-u", "prometheus:wrong-guess"})) == 401);
    CHECK(curl_status(https_url(daemon, path), with_ca(pki, {"-u", "nobody:s3cret-pass"})) == 401);
    const int good = curl_status(https_url(daemon, path), with_ca(pki, {"-u", "prometheus:s3cret-pass"}));
    CHECK((good == 200 || good == 404));  // the unknown rank is a 404 once past the door
  }
  CHECK(curl_status(https_url(daemon, "/healthz"), with_ca(pki)) == 200);
  CHECK(curl_status(https_url(daemon, "/readyz"), with_ca(pki)) == 200);

  std::string headers;
  REQUIRE(run_command("curl -s -D - -o /dev/null --cacert " + pki.file("ca.crt") + " " +
                          https_url(daemon, "/metrics"),
                      &headers) == 0);
  INFO(headers);
  CHECK(headers.find("HTTP/1.1 401") != std::string::npos);
  CHECK(headers.find("WWW-Authenticate: Basic") != std::string::npos);
  CHECK(headers.find("X-Frame-Options: deny") != std::string::npos);
  CHECK(headers.find("X-Content-Type-Options: nosniff") != std::string::npos);

  std::string body;
  REQUIRE(run_command("curl -s --cacert " + pki.file("ca.crt") + " -u prometheus:s3cret-pass '" +
                          https_url(daemon, "/metrics?name[]=rankstat_http_auth_failures_total") + "'",
                      &body) == 0);
  INFO(body);
  CHECK(value_of(body, "rankstat_http_auth_failures_total", {"reason=\"missing\""}) ==
        5);  // and the -D request
  CHECK(value_of(body, "rankstat_http_auth_failures_total", {"reason=\"wrong\""}) == 8);
  CHECK(daemon.stop() == 0);
  const std::string log = daemon.log();
  CHECK(log.find("wrong-guess") == std::string::npos);
  CHECK(log.find("s3cret-pass") == std::string::npos);
  CHECK(log.find("$2y$") == std::string::npos);

  DaemonUnderTest strict(shm.path(),
                         {"--web.config.file=" + pki.file("web.yml"), "--web.probes-require-auth"});
  CHECK(curl_status(https_url(strict, "/healthz"), with_ca(pki)) == 401);
  CHECK(curl_status(https_url(strict, "/readyz"), with_ca(pki, {"-u", "prometheus:s3cret-pass"})) == 200);

  // basic_auth_excluded_paths opens exactly the paths listed.
  write_file(pki.file("web.yml"), read_file(pki.file("web.yml")) + "basic_auth_excluded_paths: [/metrics]\n");
  DaemonUnderTest excluded(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
  CHECK(curl_status(https_url(excluded, "/metrics"), with_ca(pki)) == 200);
  CHECK(curl_status(https_url(excluded, "/metrics?name[]=x"), with_ca(pki)) == 200);
  CHECK(curl_status(https_url(excluded, "/api/v1/ranks"), with_ca(pki)) == 401);
}

TEST_CASE(
    "a web config with an unknown key or an unreadable file stops the daemon at start with an error naming "
    "it") {
  TestPki pki;
  TempDir shm;
  const std::string daemon = "timeout 10 " + binary_path("daemon/rankstatd") +
                             " --web.listen-address=127.0.0.1:0 --shm.dir=" + shm.path() +
                             " --web.config.file=" + pki.file("web.yml") + " 2>&1";
  std::string output;
  write_file(pki.file("web.yml"), tls_config(pki, "NoClientCert", "  cert_fle: typo.crt\n"));
  CHECK(run_command(daemon, &output) == 1);
  CHECK(output.find("unknown key 'cert_fle'") != std::string::npos);

  write_file(pki.file("web.yml"), "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n");
  CHECK(run_command(daemon, &output) == 1);
  CHECK(output.find("cert_file " + pki.file("missing.crt")) != std::string::npos);

  write_file(pki.file("web.yml"), "http_server_config:\n  headers:\n    X-Powered-By: rankstat\n");
  CHECK(run_command(daemon, &output) == 1);
  CHECK(output.find("'X-Powered-By' can not be configured") != std::string::npos);

  write_file(pki.file("web.yml"), "basic_auth_users:\n  prometheus: plain-text\n");
  CHECK(run_command(daemon, &output) == 1);
  CHECK(output.find("basic_auth_users.prometheus: not a bcrypt hash") != std::string::npos);
  CHECK(output.find("plain-text") == std::string::npos);

  CHECK(run_command("timeout 10 " + binary_path("daemon/rankstatd") +
                        " --web.listen-address=127.0.0.1:0 --shm.dir=" + shm.path() +
                        " --web.config.file=" + pki.file("absent.yml") + " 2>&1",
                    &output) == 1);
  CHECK(output.find("cannot read --web.config.file " + pki.file("absent.yml")) != std::string::npos);
}

TEST_CASE(
    "SIGHUP reloads certificates and users without dropping the listener, and keeps the old config when the "
    "new file is bad") {
  TestPki pki;
  TempDir shm;
  write_file(pki.file("web.yml"), tls_config(pki, "NoClientCert") +
                                      "basic_auth_users:\n  alice: " + bcrypt_hash("first-pass") + "\n");
  DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
  const std::string url = https_url(daemon, "/metrics");
  REQUIRE(curl_status(url, with_ca(pki, {"-u", "alice:first-pass"})) == 200);

  // A bad file: the old certificate and users stay in force, and the log says so.
  write_file(pki.file("web.yml"),
             "tls_server_config:\n  cert_file: " + pki.file("server.crt") + "\n  key_fil: x\n");
  daemon.process().signal(SIGHUP);
  REQUIRE(wait_until(
      [&] {
        return daemon.log().find("web config reload failed, keeping the current one") != std::string::npos;
      },
      10s));
  CHECK(daemon.log().find("unknown key 'key_fil'") != std::string::npos);
  CHECK(curl_status(url, with_ca(pki, {"-u", "alice:first-pass"})) == 200);

  // A good file with a new certificate (from another CA) and a new user: new connections get both.
  pki.issue_replacement_server("next");
  write_file(pki.file("web.yml"), "tls_server_config:\n  cert_file: " + pki.file("server-next.crt") +
                                      "\n  key_file: " + pki.file("server-next.key") +
                                      "\nbasic_auth_users:\n  bob: " + bcrypt_hash("second-pass") + "\n");
  daemon.process().signal(SIGHUP);
  REQUIRE(wait_until(
      [&] {
        return daemon.log().find("web config " + pki.file("web.yml") + " reloaded") != std::string::npos;
      },
      10s));
  const std::vector<std::string> next_ca = {"--cacert", pki.file("ca-next.crt")};
  CHECK(curl_status(url, {"--cacert", pki.file("ca-next.crt"), "-u", "bob:second-pass"}) == 200);
  CHECK(curl_status(url, {"--cacert", pki.file("ca-next.crt"), "-u", "alice:first-pass"}) == 401);
  CHECK(curl_status(url, with_ca(pki, {"-u", "bob:second-pass"})) == 0);  // the old CA no longer matches
  CHECK(daemon.process().running());
  CHECK(daemon.stop() == 0);
}

TEST_CASE("a client that never finishes its TLS handshake is closed at the header timeout and counted") {
  TestPki pki;
  TempDir shm;
  write_file(pki.file("web.yml"), tls_config(pki, "NoClientCert"));
  DaemonUnderTest daemon(shm.path(),
                         {"--web.config.file=" + pki.file("web.yml"), "--web.header-timeout=500ms"});
  // Connects, sends nothing, and reports how the daemon ended it and after how long.
  std::string output;
  REQUIRE(run_command("python3 -c \"import socket,time; s=socket.create_connection(('127.0.0.1'," +
                          std::to_string(daemon.port()) +
                          ")); s.settimeout(8); t=time.time(); d=s.recv(1); "
                          "print('closed' if d==b'' else 'data', time.time()-t)\"",
                      &output) == 0);
  INFO(output);
  CHECK(output.starts_with("closed"));
  CHECK(std::stod(output.substr(output.find(' ') + 1)) < 3.0);
  std::string body;
  REQUIRE(run_command("curl -s --cacert " + pki.file("ca.crt") + " '" + https_url(daemon, "/metrics") + "'",
                      &body) == 0);
  CHECK(value_of(body, "rankstat_http_tls_handshake_failures_total").value_or(0) >= 1);
  CHECK(value_of(body, "rankstat_http_header_timeouts_total").value_or(0) >= 1);
  CHECK(daemon.stop() == 0);
}
