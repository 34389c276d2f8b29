#include "rankstat/flags/duration.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <utility>

namespace rankstat::flags {
namespace {

// Go's units; "µs" is U+00B5 (micro sign) and "μs" U+03BC (Greek mu), both of which Go accepts.
constexpr std::array<std::pair<std::string_view, double>, 8> kUnitsInNs = {{
    {"ns", 1.0},
    {"us", 1e3},
    {"\xC2\xB5s", 1e3},
    {"\xCE\xBCs", 1e3},
    {"ms", 1e6},
    {"s", 1e9},
    {"m", 60e9},
    {"h", 3600e9},
}};
constexpr double kNsPerMs = 1e6;
constexpr double kMaxDurationNs = static_cast<double>(kMaxDuration.count()) * kNsPerMs;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

// What the text reads as, in nanoseconds, or why it is not a duration.
struct Reading {
  std::optional<std::int64_t> ns;
  std::string error;
};

Reading refuse(std::string error) {
  return Reading{std::nullopt, std::move(error)};
}

Reading not_a_duration(std::string_view text) {
  return refuse(quoted(text) + " is not a duration (write e.g. 500ms, 2s, 1m30s)");
}

Reading read_duration(std::string_view text, BareNumber bare) {
  if (text.empty()) return refuse("an empty value is not a duration (write e.g. 500ms, 2s, 1m30s)");
  if (text.front() == '-') return refuse(quoted(text) + ": a duration cannot be negative");
  double total_ns = 0;
  std::string_view rest = text;
  bool first_part = true;
  while (!rest.empty()) {
    // <digits>[.<digits>]: no sign, exponent, "inf" or "nan" (from_chars alone would take those).
    std::size_t length = 0;
    std::size_t digits = 0;
    while (length < rest.size() && is_digit(rest[length])) ++length, ++digits;
    if (length < rest.size() && rest[length] == '.') {
      ++length;
      while (length < rest.size() && is_digit(rest[length])) ++length, ++digits;
    }
    if (digits == 0) return not_a_duration(text);
    double number = 0;
    const auto [end, ec] =
        std::from_chars(rest.data(), rest.data() + length, number, std::chars_format::fixed);
    if (ec == std::errc::result_out_of_range) return refuse(quoted(text) + " is too long");
    if (ec != std::errc() || end != rest.data() + length) return not_a_duration(text);
    rest.remove_prefix(length);

    std::size_t unit_length = 0;
    while (unit_length < rest.size() && !is_digit(rest[unit_length]) && rest[unit_length] != '.')
      ++unit_length;
    const std::string_view unit = rest.substr(0, unit_length);
    rest.remove_prefix(unit_length);
    if (unit.empty()) {
      // "1m30" or "1.2.3s": only a number standing alone may go without a unit.
      if (!first_part || !rest.empty()) return not_a_duration(text);
      if (bare == BareNumber::kOnlyZero && number != 0.0) {
        const std::string number_text(text);
        return refuse(quoted(text) + " has no unit; write " + number_text + "ms or " + number_text + "s");
      }
      total_ns = number * 1e9;
      break;
    }
    const auto* found = kUnitsInNs.begin();
    while (found != kUnitsInNs.end() && found->first != unit) ++found;
    if (found == kUnitsInNs.end()) {
      return refuse(quoted(text) + " is not a duration: unknown unit '" + std::string(unit) +
                    "' (units ns, us, ms, s, m, h; e.g. 500ms, 2s, 1m30s)");
    }
    total_ns += number * found->second;
    first_part = false;
  }
  if (!(total_ns <= kMaxDurationNs)) return refuse(quoted(text) + " is too long (at most 10 years)");
  // Rounded to the nearest nanosecond, so that "0.001s" is exactly 1ms whatever the binary fraction.
  return Reading{std::llround(total_ns), {}};
}

}  // namespace

DurationParse parse_duration(std::string_view text, BareNumber bare) {
  Reading reading = read_duration(text, bare);
  if (!reading.ns) return DurationParse{std::nullopt, std::move(reading.error)};
  const std::chrono::nanoseconds exact(*reading.ns);
  const auto truncated = std::chrono::duration_cast<std::chrono::milliseconds>(exact);
  if (truncated.count() == 0 && exact.count() != 0) {
    return DurationParse{std::nullopt, quoted(text) + " is shorter than a millisecond (write e.g. 1ms)"};
  }
  return DurationParse{truncated, {}};
}

ExactDurationParse parse_go_duration(std::string_view text) {
  Reading reading = read_duration(text, BareNumber::kOnlyZero);
  if (!reading.ns) return ExactDurationParse{std::nullopt, std::move(reading.error)};
  return ExactDurationParse{std::chrono::nanoseconds(*reading.ns), {}};
}

}  // namespace rankstat::flags
