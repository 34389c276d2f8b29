// What the daemon's two state files share (retired-totals.json, RetiredTotals; integrals.json,
// CheckpointFile): how their numbers and label sets are spelled in JSON, what an entry read back must be
// to be served (the files are input like any segment: a forged entry must not reach /metrics), and how
// they are replaced and read without following a link planted at their names.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "family_set.hpp"

namespace rankstat::state_file {

inline constexpr int kStateVersion = 1;

// [[name, value], ...] as written; a malformed array throws (boost::json accessors).
Labels labels_from(const boost::json::array& in);
// A label set as the checkpoint writes it; empty when a name or value is not UTF-8.
std::string labels_text(const Labels& labels);

// A series as the exposition would emit it: valid names, UTF-8 values, no duplicate or reserved label.
bool valid_series(const std::string& family, const Labels& labels, std::string& why);
// A counter total as the exposition may serve it: a number that is not negative, +Inf, or NaN.
bool valid_counter_total(double value);
// Finite, increasing bounds and one count more than bounds (a summary: no bounds, one count).
bool valid_histogram(const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts,
                     bool summary);

// JSON has no NaN and no infinity, but a counter total or a histogram's sum can be either: a NaN taken by
// a counter, an observation of +Inf. prometheus_client keeps such a value in its file and serves it for
// as long as the file lives; so do the retired totals and the checkpoints. They write a non-finite number
// as the string the exposition spells it with, "NaN", "+Inf" or "-Inf", and read back exactly those
// three strings (anything else where a number belongs throws, refusing the whole file as malformed).
boost::json::value total_json(double value);
double total_from_json(const boost::json::value& value);
void append_json_total(std::string& out, double value);

// JSON text of `text`, which must be valid UTF-8.
void append_json_string(std::string& out, std::string_view text);
// Shortest round-trip form; a floating-point `value` must be finite.
template <typename Number>
void append_json_number(std::string& out, Number value) {
  char digits[32];
  const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out.append(digits, end);
}

// Replaces `path` by a file holding `text`: an exclusive temporary of a random name (O_EXCL |
// O_NOFOLLOW), written, fsynced when `durable`, renamed over `path`; nothing planted in the directory is
// opened or truncated, and rename() replaces the name itself (a symlink there included).
bool replace_file(const std::string& path, const std::string& text, bool durable, std::string& error);
// The whole of a regular file, never through a symlink and never blocking on a FIFO; nullopt with
// errno set (ENOENT: absent) if it cannot be read.
std::optional<std::string> read_state_file(const std::string& path);

}  // namespace rankstat::state_file
