// Durations as flags take them, for rankstatd and the rankstat CLI alike.
//
// Grammar: one or more <number><unit> parts, units ms, s, m, h, as Prometheus writes them ("250ms",
// "1.5s", "1m30s", "2h"); or a bare number, which means seconds (as in top -d, watch -n, sleep).
// A number is digits with an optional fraction: no sign, no exponent, no "nan" or "inf". Anything else
// (trailing junk, an empty string, more than kMaxDuration) is refused. The result is truncated to
// whole milliseconds.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rankstat::flags {

// Longer than any interval or timeout we mean, and far from overflowing a steady_clock time point.
inline constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(24 * 365 * 10);

enum class BareNumber {
  kSeconds,   // "2" is 2s (the CLI)
  kOnlyZero,  // "0" is 0; "2" is refused for having no unit (rankstatd, where a bare number once
              // meant milliseconds: refusing it beats silently reading it 1000 times longer)
};

struct DurationParse {
  std::optional<std::chrono::milliseconds> value;
  std::string error;  // when !value: why, quoting the text, e.g. "'2' has no unit; write 2ms or 2s"
};

DurationParse parse_duration(std::string_view text, BareNumber bare = BareNumber::kSeconds);

}  // namespace rankstat::flags
