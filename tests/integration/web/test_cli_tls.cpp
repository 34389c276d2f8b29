// The rankstat CLI against a secured daemon: https:// address, CA file, client certificate, basic-auth
// user with the password from a file or the environment.
#include <catch2/catch.hpp>

#include "testkit.hpp"
#include "web_support.hpp"

using namespace rankstat::testkit;
using namespace rankstat::web_test;

TEST_CASE(
    "the CLI reads a daemon that requires TLS, a client certificate and basic auth, with the password from a "
    "file "
    "or the environment") {
  TestPki pki;
  TempDir shm;
  write_file(pki.file("web.yml"),
             "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
             "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
             "basic_auth_users:\n  operator: " +
                 bcrypt_hash("cli-secret") + "\n");
  write_file(pki.file("password"), "cli-secret\n");
  write_file(pki.file("wrong-password"), "guess\n");
  DaemonUnderTest daemon(shm.path(), {"--web.config.file=" + pki.file("web.yml")});
  const std::string rankstat = binary_path("cli/rankstat") +
                               " --address=https://127.0.0.1:" + std::to_string(daemon.port()) +
                               " --ca-file=" + pki.file("ca.crt");
  const std::string cli = "env -u RANKSTAT_ADDRESS -u RANKSTAT_PASSWORD timeout 20 " + rankstat;
  const std::string client_certificate =
      " --cert-file=" + pki.file("client.crt") + " --key-file=" + pki.file("client.key");
  std::string output;

  CHECK(run_command(cli + client_certificate + " --user=operator --password-file=" + pki.file("password") +
                        " ranks --json",
                    &output) == 0);
  CHECK(output.find("\"ranks\":[]") != std::string::npos);
  CHECK(run_command("env -u RANKSTAT_ADDRESS RANKSTAT_PASSWORD=cli-secret timeout 20 " + rankstat +
                        client_certificate + " --user=operator ranks --json",
                    &output) == 0);
  CHECK(output.find("\"ranks\":[]") != std::string::npos);

  CHECK(run_command(cli + client_certificate +
                        " --user=operator --password-file=" + pki.file("wrong-password") + " ranks",
                    &output) == 1);
  CHECK(output.find("refused user 'operator': wrong user or password") != std::string::npos);
  CHECK(run_command(cli + client_certificate + " ranks", &output) == 1);
  CHECK(output.find("asks for credentials") != std::string::npos);
  CHECK(run_command(cli + " --user=operator --password-file=" + pki.file("password") + " ranks", &output) !=
        0);
  CHECK(output.find("failed") != std::string::npos);  // no client certificate: refused in the handshake
  CHECK(run_command("env -u RANKSTAT_PASSWORD timeout 20 " + binary_path("cli/rankstat") +
                        " --address=https://127.0.0.1:" + std::to_string(daemon.port()) + client_certificate +
                        " ranks",
                    &output) != 0);
  CHECK(output.find("TLS handshake") != std::string::npos);  // the test CA is not in the system store
  CHECK(daemon.stop() == 0);
}
