#include "rankstat/flags/duration.hpp"

#include <array>
#include <charconv>
#include <utility>

namespace rankstat::flags {
namespace {

constexpr std::array<std::pair<std::string_view, double>, 4> kUnitsInMs = {{
    {"ms", 1.0},
    {"s", 1e3},
    {"m", 60e3},
    {"h", 3600e3},
}};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

DurationParse refuse(std::string error) {
  return DurationParse{std::nullopt, std::move(error)};
}

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

DurationParse not_a_duration(std::string_view text) {
  return refuse(quoted(text) + " is not a duration (write e.g. 500ms, 2s, 1m30s)");
}

}  // namespace

DurationParse parse_duration(std::string_view text, BareNumber bare) {
  if (text.empty()) return refuse("an empty value is not a duration (write e.g. 500ms, 2s, 1m30s)");
  if (text.front() == '-') return refuse(quoted(text) + ": a duration cannot be negative");
  double total_ms = 0;
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
      // "1m30" or "1.2.3": only a number standing alone may go without a unit.
      if (!first_part || !rest.empty()) return not_a_duration(text);
      // A bare number.
      if (bare == BareNumber::kOnlyZero && number != 0.0) {
        const std::string number_text(text);
        return refuse(quoted(text) + " has no unit; write " + number_text + "ms or " + number_text + "s");
      }
      total_ms = number * 1e3;
      break;
    }
    const auto* found = kUnitsInMs.begin();
    while (found != kUnitsInMs.end() && found->first != unit) ++found;
    if (found == kUnitsInMs.end()) {
      return refuse(quoted(text) + " is not a duration: unknown unit '" + std::string(unit) +
                    "' (units ms, s, m, h; e.g. 500ms, 2s, 1m30s)");
    }
    total_ms += number * found->second;
    first_part = false;
  }
  if (!(total_ms <= static_cast<double>(kMaxDuration.count())))
    return refuse(quoted(text) + " is too long (at most 10 years)");
  return DurationParse{std::chrono::milliseconds(static_cast<std::int64_t>(total_ms)), {}};
}

}  // namespace rankstat::flags
