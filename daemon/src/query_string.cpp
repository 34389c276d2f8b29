#include "query_string.hpp"

namespace rankstat {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string form_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
               hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string_view target_path(std::string_view target) {
  return target.substr(0, target.find('?'));
}

std::vector<QueryParam> query_params(std::string_view target) {
  std::vector<QueryParam> params;
  const auto question = target.find('?');
  if (question == std::string_view::npos) return params;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto equals = pair.find('=');
    params.push_back({form_decode(pair.substr(0, equals)), equals == std::string_view::npos
                                                               ? std::string()
                                                               : form_decode(pair.substr(equals + 1))});
  }
  return params;
}

bool query_flag(std::string_view target, std::string_view key) {
  for (const QueryParam& param : query_params(target)) {
    if (param.key == key && (param.value == "1" || param.value == "true")) return true;
  }
  return false;
}

}  // namespace rankstat
