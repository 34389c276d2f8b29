#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <cmath>

#include "format.hpp"

using namespace rankstat::cli;

TEST_CASE("ages read as seconds, minutes, hours and days") {
  CHECK(format_age(0.2) == "0.2s");
  CHECK(format_age(12) == "12s");
  CHECK(format_age(184) == "3m04s");
  CHECK(format_age(2 * 3600 + 5 * 60) == "2h05m");
  CHECK(format_age(3 * 86400 + 4 * 3600) == "3d04h");
  CHECK(format_age(-1) == "-");
  CHECK(format_age(kNoValue) == "-");
}

TEST_CASE("rates and counts take k, M and G suffixes") {
  CHECK(format_rate(0) == "0");
  CHECK(format_rate(12.34) == "12.3");
  CHECK(format_rate(950) == "950");
  CHECK(format_rate(1234) == "1.2k");
  CHECK(format_rate(15000) == "15k");
  CHECK(format_rate(3.4e6) == "3.4M");
  CHECK(format_rate(kNoValue) == "-");
  CHECK(format_count(9876) == "9876");
  CHECK(format_count(12000) == "12k");
  CHECK(format_count(3.4e6) == "3.4M");
  CHECK(format_count(2.5e9) == "2.5G");
}

TEST_CASE("fixed numbers and percents show a dash for no value") {
  CHECK(format_fixed(1.25, 1) == "1.2");
  CHECK(format_fixed(std::nullopt, 1) == "-");
  CHECK(format_percent(0.482) == "48%");
  CHECK(format_percent(std::nullopt) == "-");
  CHECK(format_percent(std::nan("")) == "-");
}

TEST_CASE("fields are found by path and read as numbers or strings with fallbacks") {
  const boost::json::value doc = boost::json::parse(R"({"a":{"b":3,"s":"x","d":1.5,"n":null}})");
  CHECK(number_at(doc, {"a", "b"}) == 3.0);
  CHECK(number_at(doc, {"a", "d"}) == 1.5);
  CHECK_FALSE(number_at(doc, {"a", "n"}));
  CHECK_FALSE(number_at(doc, {"a", "s"}));
  CHECK_FALSE(number_at(doc, {"a", "b", "c"}));
  CHECK(string_at(doc, {"a", "s"}) == "x");
  CHECK(string_at(doc, {"a", "missing"}, "?") == "?");
  CHECK(find_path(doc, {"nope"}) == nullptr);
}

TEST_CASE("scalars print without quotes and whole doubles without decimals") {
  CHECK(format_scalar(boost::json::value("text")) == "text");
  CHECK(format_scalar(boost::json::value(3.0)) == "3");
  CHECK(format_scalar(boost::json::value(0.125)) == "0.125");
  CHECK(format_scalar(boost::json::value(nullptr)) == "null");
  CHECK(format_scalar(boost::json::value(true)) == "true");
}
