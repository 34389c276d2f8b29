#include <catch2/catch.hpp>

#include <string>

#include "address.hpp"

using rankstat::cli::parse_address;

TEST_CASE("the CLI reads :port as this machine") {
  std::string error;
  const auto endpoint = parse_address(":9473", error);
  REQUIRE(endpoint);
  CHECK(endpoint->host == "127.0.0.1");
  CHECK(endpoint->port == "9473");
  CHECK(endpoint->display() == "127.0.0.1:9473");
}

TEST_CASE("the CLI takes a pasted https URL and brackets an IPv6 host in display") {
  std::string error;
  const auto endpoint = parse_address("https://[::1]:9473/", error);
  REQUIRE(endpoint);
  CHECK(endpoint->tls);
  CHECK(endpoint->host == "::1");
  CHECK(endpoint->display() == "[::1]:9473");
}

TEST_CASE("the CLI refuses port 0 and a missing port with the address quoted") {
  std::string error;
  CHECK_FALSE(parse_address("127.0.0.1:0", error));
  CHECK(error == "invalid address '127.0.0.1:0': port must be a number from 1 to 65535");
  CHECK_FALSE(parse_address("localhost", error));
  CHECK(error == "invalid address 'localhost': expected host:port or :port");
}
