// Request targets: the one parser every route reads its path and query parameters through.
#include <catch2/catch.hpp>

#include "query_string.hpp"

using rankstat::query_flag;
using rankstat::query_params;
using rankstat::target_path;

TEST_CASE("the path is everything before the query string") {
  CHECK(target_path("/metrics?name[]=a") == "/metrics");
  CHECK(target_path("/api/v1/ranks") == "/api/v1/ranks");
  CHECK(target_path("/?") == "/");
  CHECK(target_path("") == "");
}

TEST_CASE("query parameters are read in order, form-decoded") {
  const auto params = query_params("/metrics?name%5B%5D=a%3Ab&x=1+2&flag&=v&&last=");
  REQUIRE(params.size() == 5);
  CHECK(params[0].key == "name[]");
  CHECK(params[0].value == "a:b");
  CHECK(params[1].key == "x");
  CHECK(params[1].value == "1 2");
  CHECK(params[2].key == "flag");  // no '=': an empty value
  CHECK(params[2].value.empty());
  CHECK(params[3].key.empty());
  CHECK(params[3].value == "v");
  CHECK(params[4].key == "last");
  CHECK(params[4].value.empty());
  CHECK(query_params("/metrics").empty());
  CHECK(query_params("/metrics?").empty());
}

TEST_CASE("a malformed escape stays as written") {
  const auto params = query_params("/x?a=%zz&b=%4&c=%41");
  REQUIRE(params.size() == 3);
  CHECK(params[0].value == "%zz");
  CHECK(params[1].value == "%4");
  CHECK(params[2].value == "A");
}

TEST_CASE("a flag is on only when set to 1 or true") {
  CHECK(query_flag("/api/v1/ranks?details=true", "details"));
  CHECK(query_flag("/api/v1/ranks?x=0&details=1", "details"));
  CHECK(query_flag("/api/v1/ranks?det%61ils=true", "details"));
  CHECK_FALSE(query_flag("/api/v1/ranks?details", "details"));
  CHECK_FALSE(query_flag("/api/v1/ranks?details=false", "details"));
  CHECK_FALSE(query_flag("/api/v1/ranks?detailsx=true", "details"));
  CHECK_FALSE(query_flag("/api/v1/ranks", "details"));
}
