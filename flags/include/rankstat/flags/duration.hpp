// Durations, for rankstatd's and the rankstat CLI's flags and for the web config file alike: one grammar,
// one parser.
//
// Grammar: Go's time.ParseDuration (which the exporter toolkit's web config uses) — one or more
// <number><unit> parts, units ns, us (or µs), ms, s, m, h ("250ms", "1.5s", "1m30s", "2h45m"); a number is
// digits with an optional fraction (".5s" and "5.s" as Go reads them), no sign, exponent, "nan" or "inf".
// A bare number is Go's "0" only, or, for the flags that allow it, seconds (as in top -d, watch -n,
// sleep). Anything else (trailing junk, "1.2.3s", an empty string, a negative value, more than
// kMaxDuration) is refused with an error that quotes the text.
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
              // meant milliseconds: refusing it beats silently reading it 1000 times longer; and Go)
};

struct DurationParse {
  std::optional<std::chrono::milliseconds> value;
  std::string error;  // when !value: why, quoting the text, e.g. "'2' has no unit; write 2ms or 2s"
};

// In whole milliseconds (truncated), for flags and timers. A non-zero duration shorter than a millisecond
// ("500us") is refused rather than read as 0.
DurationParse parse_duration(std::string_view text, BareNumber bare = BareNumber::kSeconds);

struct ExactDurationParse {
  std::optional<std::chrono::nanoseconds> value;
  std::string error;  // as DurationParse::error
};

// In nanoseconds (rounded to the nearest), as Go's time.ParseDuration reads a non-negative duration: a
// bare number must be 0.
ExactDurationParse parse_go_duration(std::string_view text);

}  // namespace rankstat::flags
