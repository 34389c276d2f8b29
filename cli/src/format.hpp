// Reading fields out of rank documents and formatting numbers for humans.
#pragma once

#include <boost/json/value.hpp>

#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace rankstat::cli {

// "No value" where a double is expected (NAN is a float).
inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// The value at a path of object keys, or nullptr if any step is missing or not an object.
const boost::json::value* find_path(const boost::json::value& root,
                                    std::initializer_list<std::string_view> keys);
// A number (integer or double) at the path; nullopt when missing, null or not a number.
std::optional<double> number_at(const boost::json::value& root, std::initializer_list<std::string_view> keys);
// A string at the path; `fallback` when missing or not a string.
std::string string_at(const boost::json::value& root, std::initializer_list<std::string_view> keys,
                      std::string_view fallback = "");
std::optional<double> as_number(const boost::json::value& value);

// "0.2s", "12s", "3m04s", "2h05m", "3d04h"
std::string format_age(double seconds);
// "0", "12.3", "950", "1.2k", "15k", "3.4M"
std::string format_rate(double value);
// An integer with k / M / G suffixes past 10 000: "9876", "12k", "3.4M"
std::string format_count(double value);
// Fixed decimals; "-" for nullopt.
std::string format_fixed(std::optional<double> value, int decimals);
// 0.482 -> "48%"; "-" for nullopt.
std::string format_percent(std::optional<double> fraction);
// A JSON scalar as text (strings unquoted, null as "null"), for field listings.
std::string format_scalar(const boost::json::value& value);

}  // namespace rankstat::cli
