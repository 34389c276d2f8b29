#include <catch2/catch.hpp>

#include <string>

#include "rankstat/flags/host_port.hpp"

using rankstat::flags::HostPort;
using rankstat::flags::HostPortOptions;
using rankstat::flags::parse_host_port;

namespace {

constexpr HostPortOptions kListener{.allow_scheme = false, .allow_port_zero = true};
constexpr HostPortOptions kTarget{.allow_scheme = true, .allow_port_zero = false};

HostPort parsed(const std::string& text, const HostPortOptions& options) {
  auto result = parse_host_port(text, options);
  INFO(text << ": " << result.error);
  REQUIRE(result.value);
  return *result.value;
}

std::string error_of(const std::string& text, const HostPortOptions& options) {
  auto result = parse_host_port(text, options);
  INFO(text);
  REQUIRE_FALSE(result.value);
  return result.error;
}

}  // namespace

TEST_CASE("host:port, :port and [v6]:port give the host without brackets and the port") {
  const HostPort v4 = parsed("127.0.0.1:9473", kListener);
  CHECK(v4.host == "127.0.0.1");
  CHECK(v4.port == 9473);
  CHECK(v4.port_text() == "9473");
  const HostPort any = parsed(":9473", kListener);
  CHECK(any.host.empty());
  const HostPort v6 = parsed("[::1]:80", kListener);
  CHECK(v6.host == "::1");
  CHECK(v6.port == 80);
  CHECK(parsed("localhost:65535", kListener).host == "localhost");
}

TEST_CASE("display brackets an IPv6 host and fills in an empty one") {
  CHECK(parsed("[::1]:80", kListener).display() == "[::1]:80");
  CHECK(parsed("example.org:80", kListener).display() == "example.org:80");
  CHECK(parsed(":80", kListener).display("127.0.0.1") == "127.0.0.1:80");
}

TEST_CASE("port 0 is a listener's free port but no target's port") {
  CHECK(parsed("127.0.0.1:0", kListener).port == 0);
  CHECK(error_of("127.0.0.1:0", kTarget) == "port must be a number from 1 to 65535");
}

TEST_CASE("an http or https prefix and trailing slashes are taken only where a URL may be pasted") {
  const HostPort plain = parsed("http://localhost:9473/", kTarget);
  CHECK(plain.host == "localhost");
  CHECK_FALSE(plain.tls);
  const HostPort secure = parsed("https://[::1]:9473//", kTarget);
  CHECK(secure.host == "::1");
  CHECK(secure.tls);
  CHECK_FALSE(parse_host_port("http://localhost:9473", kListener).value);
  CHECK_FALSE(parse_host_port("localhost:9473/", kListener).value);
}

TEST_CASE("malformed addresses are refused with the reason") {
  CHECK(error_of("9473", kListener) == "expected host:port or :port");
  CHECK(error_of("127.0.0.1:", kListener) == "port must be a number from 0 to 65535");
  CHECK(error_of("127.0.0.1:99999", kListener) == "port must be a number from 0 to 65535");
  CHECK(error_of("127.0.0.1:http", kListener) == "port must be a number from 0 to 65535");
  CHECK(error_of("127.0.0.1:-1", kListener) == "port must be a number from 0 to 65535");
  CHECK(error_of("127.0.0.1:+80", kListener) == "port must be a number from 0 to 65535");
  CHECK(error_of("[::1:9473", kListener) == "missing ']'");
  CHECK(error_of("[::1]9473", kListener) == "expected ':port' after ']'");
  CHECK(error_of("[]:9473", kListener) == "empty IPv6 address");
  CHECK(error_of("::1:9473", kTarget) == "IPv6 addresses must be bracketed, e.g. [::1]:9473");
  CHECK(error_of("", kTarget) == "expected host:port or :port");
  CHECK(error_of("https://", kTarget) == "expected host:port or :port");
  CHECK(error_of("localhost:9473/metrics", kTarget) == "port must be a number from 1 to 65535");
  CHECK(error_of("bad host:9473", kListener) == "'bad host' is not a host");
}
