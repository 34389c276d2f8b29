#include <catch2/catch.hpp>

#include <string>

#include "rankstat/flags/duration.hpp"

using namespace std::chrono_literals;
using rankstat::flags::BareNumber;
using rankstat::flags::parse_duration;
using rankstat::flags::parse_go_duration;

namespace {

std::chrono::milliseconds value_of(const std::string& text, BareNumber bare = BareNumber::kSeconds) {
  const auto parsed = parse_duration(text, bare);
  INFO(text << ": " << parsed.error);
  REQUIRE(parsed.value);
  return *parsed.value;
}

std::string error_of(const std::string& text, BareNumber bare = BareNumber::kSeconds) {
  const auto parsed = parse_duration(text, bare);
  INFO(text);
  REQUIRE_FALSE(parsed.value);
  CHECK_FALSE(parsed.error.empty());
  return parsed.error;
}

std::chrono::nanoseconds exact_value_of(const std::string& text) {
  const auto parsed = parse_go_duration(text);
  INFO(text << ": " << parsed.error);
  REQUIRE(parsed.value);
  return *parsed.value;
}

std::string exact_error_of(const std::string& text) {
  const auto parsed = parse_go_duration(text);
  INFO(text);
  REQUIRE_FALSE(parsed.value);
  CHECK_FALSE(parsed.error.empty());
  return parsed.error;
}

}  // namespace

TEST_CASE("a duration takes the units ms, s, m and h") {
  CHECK(value_of("5ms") == 5ms);
  CHECK(value_of("2s") == 2s);
  CHECK(value_of("1m") == 1min);
  CHECK(value_of("2h") == 2h);
}

TEST_CASE("a duration may have a fraction, truncated to whole milliseconds") {
  CHECK(value_of("1.5s") == 1500ms);
  CHECK(value_of("0.25m") == 15s);
  CHECK(value_of(".5s") == 500ms);
  CHECK(value_of("1.9ms") == 1ms);
}

TEST_CASE("a duration may be compound as Prometheus writes it") {
  CHECK(value_of("1m30s") == 90s);
  CHECK(value_of("1h2m3s4ms") == 1h + 2min + 3s + 4ms);
  CHECK(value_of("2s500ms") == 2500ms);
}

TEST_CASE("a bare number means seconds") {
  CHECK(value_of("2") == 2s);
  CHECK(value_of("0.2") == 200ms);
  CHECK(value_of("0") == 0ms);
}

TEST_CASE("where bare numbers must be zero a bare non-zero number is refused and a unit asked for") {
  CHECK(value_of("0", BareNumber::kOnlyZero) == 0ms);
  CHECK(value_of("0.0", BareNumber::kOnlyZero) == 0ms);
  CHECK(value_of("2ms", BareNumber::kOnlyZero) == 2ms);
  CHECK(error_of("2", BareNumber::kOnlyZero) == "'2' has no unit; write 2ms or 2s");
  CHECK(error_of("0.5", BareNumber::kOnlyZero) == "'0.5' has no unit; write 0.5ms or 0.5s");
}

TEST_CASE("negative durations are refused") {
  CHECK(error_of("-1s").find("negative") != std::string::npos);
  CHECK(error_of("-0").find("negative") != std::string::npos);
}

TEST_CASE("nan, inf, exponents and signs are not durations") {
  for (const char* text : {"nan", "inf", "infs", "NaN", "1e3", "1e3ms", "+1s", "0x10s", " 1s", "1s "}) {
    CHECK(error_of(text).find("is not a duration") != std::string::npos);
  }
}

TEST_CASE("trailing junk, unknown units and a unitless last part are refused") {
  CHECK(error_of("5 parsecs").find("unknown unit ' parsecs'") != std::string::npos);
  CHECK(error_of("1sx").find("unknown unit 'sx'") != std::string::npos);
  CHECK(error_of("5parsec").find("units ns, us, ms, s, m, h") != std::string::npos);
  CHECK(error_of("1m30") == "'1m30' is not a duration (write e.g. 500ms, 2s, 1m30s)");
  CHECK(error_of("1.2.3s").find("is not a duration") != std::string::npos);
  CHECK(error_of("s").find("is not a duration") != std::string::npos);
  CHECK(error_of(".s").find("is not a duration") != std::string::npos);
}

TEST_CASE("an empty duration is refused") {
  CHECK(error_of("").find("empty") != std::string::npos);
}

TEST_CASE("durations too long for a timer are refused rather than overflowing") {
  CHECK(value_of("87600h") == rankstat::flags::kMaxDuration);
  CHECK(error_of("87601h").find("too long") != std::string::npos);
  CHECK(error_of("99999999999999999999999h").find("too long") != std::string::npos);
  CHECK(error_of(std::string(400, '9') + "s").find("too long") != std::string::npos);
}

TEST_CASE("a duration takes Go's sub-millisecond units ns, us and both spellings of µs") {
  CHECK(exact_value_of("7ns") == 7ns);
  CHECK(exact_value_of("3us") == 3us);
  CHECK(exact_value_of("3\xC2\xB5s") == 3us);  // U+00B5 micro sign
  CHECK(exact_value_of("3\xCE\xBCs") == 3us);  // U+03BC Greek mu
  CHECK(value_of("1500us") == 1ms);            // truncated to whole milliseconds for a flag
  CHECK(value_of("2ms500us") == 2ms);
}

TEST_CASE("a Go duration is exact to the nanosecond and compounds every unit") {
  CHECK(exact_value_of("1h30m") == 90min);
  CHECK(exact_value_of("1m30s") == 90s);
  CHECK(exact_value_of("1.5s") == 1500ms);
  CHECK(exact_value_of("0.001s") == 1ms);
  CHECK(exact_value_of("2h45m0.5s1ms2us3ns") == 2h + 45min + 501ms + 2us + 3ns);
  CHECK(exact_value_of(".5us") == 500ns);
  CHECK(exact_value_of("5.s") == 5s);
  CHECK(exact_value_of("0") == 0ns);
}

TEST_CASE("a Go duration refuses malformed text with an error that quotes it") {
  CHECK(exact_error_of("1.2.3s") == "'1.2.3s' is not a duration (write e.g. 500ms, 2s, 1m30s)");
  CHECK(exact_error_of("1.2.3s") == error_of("1.2.3s"));  // one parser for the flags and the web config
  CHECK(exact_error_of("2") == "'2' has no unit; write 2ms or 2s");
  CHECK(exact_error_of("1m30") == "'1m30' is not a duration (write e.g. 500ms, 2s, 1m30s)");
  CHECK(exact_error_of("1d").find("unknown unit 'd'") != std::string::npos);
  CHECK(exact_error_of("1s ").find("unknown unit 's '") != std::string::npos);
  CHECK(exact_error_of(".").find("is not a duration") != std::string::npos);
  CHECK(exact_error_of("-1s").find("negative") != std::string::npos);
  CHECK(exact_error_of("").find("empty") != std::string::npos);
  CHECK(exact_error_of("87601h").find("too long") != std::string::npos);
}

TEST_CASE("a flag refuses a non-zero duration shorter than a millisecond rather than reading it as 0") {
  CHECK(error_of("500us") == "'500us' is shorter than a millisecond (write e.g. 1ms)");
  CHECK(error_of("999999ns").find("shorter than a millisecond") != std::string::npos);
  CHECK(value_of("0ns") == 0ms);
}
