#include <catch2/catch.hpp>

#include <string>

#include "rankstat/flags/duration.hpp"

using namespace std::chrono_literals;
using rankstat::flags::BareNumber;
using rankstat::flags::parse_duration;

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
  CHECK(error_of("5us").find("units ms, s, m, h") != std::string::npos);
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
