#include "prometheus_under_test.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>

namespace rankstat::testkit {

using namespace std::chrono_literals;

int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t length = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string query_encode(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

PrometheusUnderTest::PrometheusUnderTest(const std::string& config,
                                         const std::vector<std::string>& extra_flags,
                                         const std::vector<std::string>& files)
    : port_(unused_port()) {
  { std::ofstream(dir_.path() + "/prometheus.yml") << config; }
  for (const std::string& file : files) REQUIRE(run_command("cp " + file + " " + dir_.path() + "/") == 0);
  std::vector<std::string> argv = {"/usr/bin/prometheus", "--config.file=" + dir_.path() + "/prometheus.yml",
                                   "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                                   "--log.level=warn"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  process_ = std::make_unique<ChildProcess>(argv, std::map<std::string, std::string>{}, dir_.path() + "/log");
  const bool ready = wait_until(
      [&] {
        const auto r = http_get("127.0.0.1", port_, "/-/ready");
        return r && r->status == 200;
      },
      30s);
  INFO(log());
  REQUIRE(ready);
}

PrometheusUnderTest::~PrometheusUnderTest() {
  process_->signal(SIGTERM);
  process_->wait_for(20s);
}

std::string PrometheusUnderTest::log() const {
  return read_file(dir_.path() + "/log");
}

std::optional<double> PrometheusUnderTest::scalar(const std::string& expr) {
  const auto r = http_get("127.0.0.1", port_, "/api/v1/query?query=" + query_encode(expr));
  if (!r || r->status != 200) return std::nullopt;
  const auto doc = boost::json::parse(r->body).as_object();
  const auto& result = doc.at("data").at("result").as_array();
  if (result.size() != 1) return std::nullopt;
  return std::stod(std::string(result[0].at("value").as_array()[1].as_string()));
}

}  // namespace rankstat::testkit
