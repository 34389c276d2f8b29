// Helpers for the web security tests: a throwaway PKI made with the openssl command, bcrypt hashes made
// with htpasswd, curl requests, web config files.
#pragma once

#include <string>
#include <vector>

#include "testkit.hpp"

namespace rankstat::web_test {

// Certificates in a private directory, all made by `openssl` when constructed:
//   ca.crt/ca.key            the CA the daemon trusts for clients and Prometheus trusts for the server
//   server.crt/server.key    signed by ca, SANs localhost and 127.0.0.1
//   client.crt/client.key    signed by ca, SAN DNS:scraper.example (client auth)
//   rogue-ca.crt, rogue-client.crt/.key   a second, untrusted CA and a client certificate it signed
class TestPki {
 public:
  TestPki();
  [[nodiscard]] std::string file(const std::string& name) const { return dir_.path() + "/" + name; }
  [[nodiscard]] const std::string& dir() const { return dir_.path(); }
  // A new server certificate and key signed by a new CA, written as server-<tag>.crt/.key and
  // ca-<tag>.crt.
  void issue_replacement_server(const std::string& tag);

 private:
  testkit::TempDir dir_{"rankstat-pki"};
};

// A bcrypt hash of `password` (htpasswd -nbBC 10), as an operator makes one.
std::string bcrypt_hash(const std::string& password);

// Writes `text` to `path`.
void write_file(const std::string& path, const std::string& text);

// The HTTP status curl got for `url` with these extra curl arguments; 0 when no response (TLS refused).
int curl_status(const std::string& url, const std::vector<std::string>& arguments);

}  // namespace rankstat::web_test
