#include "format.hpp"

#include <boost/json/serialize.hpp>
#include <cmath>
#include <cstdio>

namespace rankstat::cli {

const boost::json::value* find_path(const boost::json::value& root,
                                    std::initializer_list<std::string_view> keys) {
  const boost::json::value* at = &root;
  for (std::string_view key : keys) {
    if (!at->is_object()) return nullptr;
    at = at->as_object().if_contains(key);
    if (at == nullptr) return nullptr;
  }
  return at;
}

std::optional<double> as_number(const boost::json::value& value) {
  if (value.is_double()) return value.get_double();
  if (value.is_int64()) return static_cast<double>(value.get_int64());
  if (value.is_uint64()) return static_cast<double>(value.get_uint64());
  return std::nullopt;
}

std::optional<double> number_at(const boost::json::value& root,
                                std::initializer_list<std::string_view> keys) {
  const boost::json::value* v = find_path(root, keys);
  return v == nullptr ? std::nullopt : as_number(*v);
}

std::string string_at(const boost::json::value& root, std::initializer_list<std::string_view> keys,
                      std::string_view fallback) {
  const boost::json::value* v = find_path(root, keys);
  if (v == nullptr || !v->is_string()) return std::string(fallback);
  return std::string(v->as_string());
}

namespace {
// `value` with `decimals` decimals and a suffix ("%", "k", "s", ...).
std::string decimal(double value, int decimals, std::string_view suffix = "") {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return std::string(text).append(suffix);
}
}  // namespace

std::string format_age(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 10) return decimal(seconds, 1, "s");
  const auto whole = static_cast<long long>(seconds);
  char text[48];
  if (whole < 60) {
    std::snprintf(text, sizeof text, "%llds", whole);
  } else if (whole < 3600) {
    std::snprintf(text, sizeof text, "%lldm%02llds", whole / 60, whole % 60);
  } else if (whole < 86400) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", whole / 3600, (whole % 3600) / 60);
  } else {
    std::snprintf(text, sizeof text, "%lldd%02lldh", whole / 86400, (whole % 86400) / 3600);
  }
  return text;
}

std::string format_rate(double value) {
  if (!std::isfinite(value)) return "-";
  const double a = std::fabs(value);
  if (a == 0) return "0";
  if (a < 100) return decimal(value, 1);
  if (a < 1000) return decimal(value, 0);
  if (a < 10'000) return decimal(value / 1e3, 1, "k");
  if (a < 1'000'000) return decimal(value / 1e3, 0, "k");
  if (a < 10'000'000) return decimal(value / 1e6, 1, "M");
  return decimal(value / 1e6, 0, "M");
}

std::string format_count(double value) {
  if (!std::isfinite(value)) return "-";
  const double a = std::fabs(value);
  if (a < 10'000) return decimal(value, 0);
  if (a < 1'000'000) return decimal(value / 1e3, 0, "k");
  if (a < 10'000'000) return decimal(value / 1e6, 1, "M");
  if (a < 1e9) return decimal(value / 1e6, 0, "M");
  return decimal(value / 1e9, 1, "G");
}

std::string format_fixed(std::optional<double> value, int decimals) {
  if (!value || !std::isfinite(*value)) return "-";
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, *value);
  return text;
}

std::string format_percent(std::optional<double> fraction) {
  if (!fraction || !std::isfinite(*fraction)) return "-";
  return decimal(*fraction * 100, 0, "%");
}

std::string format_scalar(const boost::json::value& value) {
  if (value.is_string()) return std::string(value.as_string());
  if (value.is_double()) {
    const double d = value.get_double();
    if (d == std::floor(d) && std::fabs(d) < 1e15) return decimal(d, 0);
    char text[64];
    std::snprintf(text, sizeof text, "%.6g", d);
    return text;
  }
  return boost::json::serialize(value);
}

}  // namespace rankstat::cli
