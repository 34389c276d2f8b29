#include "http/http_server.hpp"

#include <catch2/catch.hpp>

using rankstat::http::accepts_gzip;

TEST_CASE("a plain gzip entry accepts gzip, whatever its case and surrounding whitespace") {
  CHECK(accepts_gzip("gzip"));
  CHECK(accepts_gzip("GZip"));
  CHECK(accepts_gzip("  gzip  "));
  CHECK(accepts_gzip("\tgzip\t"));
  CHECK(accepts_gzip("x-gzip"));
  CHECK(accepts_gzip("gzip, deflate, br"));
  CHECK(accepts_gzip("br ,deflate,gzip"));
}

TEST_CASE("gzip with a positive q-value is accepted") {
  CHECK(accepts_gzip("gzip;q=1"));
  CHECK(accepts_gzip("gzip;q=1.0"));
  CHECK(accepts_gzip("gzip;q=1.000"));
  CHECK(accepts_gzip("gzip;q=0.5"));
  CHECK(accepts_gzip("gzip;q=0.001"));
  CHECK(accepts_gzip("gzip ; Q = 0.8"));
  CHECK(accepts_gzip("gzip;level=3;q=0.7"));
  CHECK(accepts_gzip("deflate;q=0.5, gzip;q=0.9"));
}

TEST_CASE("gzip with q=0 is refused") {
  CHECK_FALSE(accepts_gzip("gzip;q=0"));
  CHECK_FALSE(accepts_gzip("gzip;q=0."));
  CHECK_FALSE(accepts_gzip("gzip;q=0.0"));
  CHECK_FALSE(accepts_gzip("gzip;q=0.000"));
  CHECK_FALSE(accepts_gzip("GZIP; Q=0"));
  CHECK_FALSE(accepts_gzip("deflate, gzip;q=0"));
}

TEST_CASE("a wildcard accepts gzip unless gzip itself is refused") {
  CHECK(accepts_gzip("*"));
  CHECK(accepts_gzip("br, *;q=0.1"));
  CHECK_FALSE(accepts_gzip("*;q=0"));
  CHECK_FALSE(accepts_gzip("gzip;q=0, *"));
  CHECK_FALSE(accepts_gzip("*, gzip;q=0"));
  CHECK(accepts_gzip("*;q=0, gzip"));
}

TEST_CASE("headers without gzip or a wildcard do not accept gzip") {
  CHECK_FALSE(accepts_gzip(""));
  CHECK_FALSE(accepts_gzip("   "));
  CHECK_FALSE(accepts_gzip("identity"));
  CHECK_FALSE(accepts_gzip("deflate, br"));
  CHECK_FALSE(accepts_gzip("gzipx"));
  CHECK_FALSE(accepts_gzip("xgzip"));
  CHECK_FALSE(accepts_gzip(",,,"));
}

TEST_CASE("an entry with a malformed q-value is ignored") {
  CHECK_FALSE(accepts_gzip("gzip;q=abc"));
  CHECK_FALSE(accepts_gzip("gzip;q="));
  CHECK_FALSE(accepts_gzip("gzip;q=2"));
  CHECK_FALSE(accepts_gzip("gzip;q=1.5"));
  CHECK_FALSE(accepts_gzip("gzip;q=-1"));
  CHECK(accepts_gzip("gzip;q=oops, *"));
}

TEST_CASE("repeated gzip entries refuse gzip if any of them has q=0") {
  CHECK_FALSE(accepts_gzip("gzip, gzip;q=0"));
  CHECK_FALSE(accepts_gzip("x-gzip;q=0, gzip"));
  CHECK(accepts_gzip("gzip;q=0.2, gzip"));
}
