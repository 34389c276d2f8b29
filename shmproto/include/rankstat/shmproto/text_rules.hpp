// Text rules of the contract: strict UTF-8, and the names a metric or a label may have. Writers check
// them before anything reaches shared memory; readers, which trust nothing, check again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rankstat::shm {

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): what Prometheus accepts in a
// label value or a HELP text. A series with anything else is refused, never exported half-valid.
inline bool is_valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int extra = 0;
    std::uint32_t code = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      code = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      code = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      code = c & 0x07u;
    } else {
      return false;
    }
    if (end - p <= extra) return false;
    for (int i = 1; i <= extra; ++i) {
      if ((p[i] & 0xC0u) != 0x80u) return false;
      code = (code << 6) | (p[i] & 0x3Fu);
    }
    if ((extra == 2 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) ||
        (extra == 3 && (code < 0x10000 || code > 0x10FFFF))) {
      return false;
    }
    p += extra + 1;
  }
  return true;
}

// The classic names, which every Prometheus version and scraper reads unquoted: metric names
// [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*. rankstatd writes other names escaped or
// quoted as the scrape negotiated (daemon/src/text_exposition.hpp); a few operator-set names (constant
// labels, --label.instance) must be classic.
inline bool is_classic_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

inline bool is_classic_label_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

// The names a series may have, as prometheus_client (0.22 and later) accepts them by default: any
// non-empty strict UTF-8 text (`my.metric`, `http.method`); label names starting with "__" stay
// reserved. One refusal of rankstat's own: no NUL character, which the text format cannot escape (and the
// header's extra labels are NUL-delimited). Any length: the text area is the only bound. Checked by the
// writer at registration and again by every reader of shared memory and of the retired-totals state.
inline bool is_valid_metric_name(std::string_view name) {
  return !name.empty() && name.find('\0') == std::string_view::npos && is_valid_utf8(name);
}

inline bool is_valid_label_name(std::string_view name) {
  return is_valid_metric_name(name) && !name.starts_with("__");
}

// How many bytes the UTF-8 sequence that starts with `lead` takes (0: `lead` cannot start one). Whether the
// sequence is whole and well-formed is is_valid_utf8's to say.
constexpr std::size_t utf8_sequence_length(unsigned char lead) {
  return lead < 0x80                    ? 1
         : lead >= 0xC2 && lead <= 0xDF ? 2
         : lead >= 0xE0 && lead <= 0xEF ? 3
         : lead >= 0xF0 && lead <= 0xF4 ? 4
                                        : 0;
}

// `text` with each byte that is not part of a strict UTF-8 sequence replaced by U+FFFD: header strings
// are a writer's bytes, and a JSON document or a log line built from them must stay valid.
inline std::string replace_invalid_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t length = utf8_sequence_length(static_cast<unsigned char>(text[i]));
    if (length != 0 && i + length <= text.size() && is_valid_utf8(text.substr(i, length))) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER, one per invalid byte
      ++i;
    }
  }
  return out;
}

}  // namespace rankstat::shm
