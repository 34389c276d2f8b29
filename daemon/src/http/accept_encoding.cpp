#include "http/accept_encoding.hpp"

#include <algorithm>
#include <optional>

namespace rankstat::http {

namespace {

constexpr bool is_optional_whitespace(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim_optional_whitespace(std::string_view text) {
  while (!text.empty() && is_optional_whitespace(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_optional_whitespace(text.back())) text.remove_suffix(1);
  return text;
}

constexpr char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

// Splits off the text before the first `separator`; `rest` keeps what follows it.
std::string_view take_until(std::string_view& rest, char separator) {
  const std::size_t position = rest.find(separator);
  const std::string_view head = rest.substr(0, position);
  rest = position == std::string_view::npos ? std::string_view{} : rest.substr(position + 1);
  return head;
}

enum class QValue { kZero, kPositive, kMalformed };

// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ); extra fraction digits are tolerated
// because some clients send them.
QValue parse_qvalue(std::string_view text) {
  if (text.empty() || (text.front() != '0' && text.front() != '1')) return QValue::kMalformed;
  const bool leading_one = text.front() == '1';
  std::string_view fraction = text.substr(1);
  if (!fraction.empty()) {
    if (fraction.front() != '.') return QValue::kMalformed;
    fraction.remove_prefix(1);
  }
  bool nonzero_fraction = false;
  for (const char digit : fraction) {
    if (digit < '0' || digit > '9') return QValue::kMalformed;
    nonzero_fraction = nonzero_fraction || digit != '0';
  }
  if (leading_one) return nonzero_fraction ? QValue::kMalformed : QValue::kPositive;
  return nonzero_fraction ? QValue::kPositive : QValue::kZero;
}

}  // namespace

bool accepts_gzip(std::string_view accept_encoding) {
  std::optional<bool> gzip_acceptable;      // from explicit "gzip"/"x-gzip" entries
  std::optional<bool> wildcard_acceptable;  // from "*" entries
  std::string_view remaining = accept_encoding;
  while (!remaining.empty()) {
    std::string_view parameters = take_until(remaining, ',');
    const std::string_view coding = trim_optional_whitespace(take_until(parameters, ';'));
    if (coding.empty()) continue;

    bool acceptable = true;  // an absent q means q=1
    bool malformed = false;
    while (!parameters.empty()) {
      std::string_view value = take_until(parameters, ';');
      const std::string_view name = trim_optional_whitespace(take_until(value, '='));
      if (!equals_ignoring_case(name, "q")) continue;
      const QValue q = parse_qvalue(trim_optional_whitespace(value));
      malformed = q == QValue::kMalformed;
      acceptable = q == QValue::kPositive;
    }
    if (malformed) continue;

    if (equals_ignoring_case(coding, "gzip") || equals_ignoring_case(coding, "x-gzip")) {
      gzip_acceptable = gzip_acceptable.value_or(true) && acceptable;
    } else if (coding == "*") {
      wildcard_acceptable = wildcard_acceptable.value_or(false) || acceptable;
    }
  }
  if (gzip_acceptable.has_value()) return *gzip_acceptable;
  return wildcard_acceptable.value_or(false);
}

}  // namespace rankstat::http
