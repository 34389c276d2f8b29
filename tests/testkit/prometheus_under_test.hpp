// A real Prometheus server (Debian's /usr/bin/prometheus) for integration tests, and the helpers its
// users need. Catch2 assertions (REQUIRE) report failures, so only test executables link it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "testkit.hpp"

namespace rankstat::testkit {

// A loopback TCP port with nothing listening on it (bound, then released).
int unused_port();

// Percent-encodes everything but RFC 3986's unreserved characters, for a URL query value.
std::string query_encode(const std::string& text);

// Prometheus on a loopback ephemeral port, in a private directory; SIGTERM and a bounded wait on
// destruction. REQUIREs that it becomes ready within 30 s.
class PrometheusUnderTest {
 public:
  // `config` is the prometheus.yml text; `extra_flags` more flags (storage path, agent mode, ...);
  // `files` are copied into its directory, where relative paths of the config (rule files, password
  // files, certificates) are resolved.
  PrometheusUnderTest(const std::string& config, const std::vector<std::string>& extra_flags,
                      const std::vector<std::string>& files = {});
  ~PrometheusUnderTest();
  PrometheusUnderTest(const PrometheusUnderTest&) = delete;
  PrometheusUnderTest& operator=(const PrometheusUnderTest&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] const std::string& dir() const { return dir_.path(); }
  [[nodiscard]] std::string log() const;
  // The single value of an instant query, nullopt if it has not exactly one.
  std::optional<double> scalar(const std::string& expr);

 private:
  TempDir dir_{"rankstat-prometheus"};
  int port_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace rankstat::testkit
