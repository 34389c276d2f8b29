#include "scrape_filter.hpp"

#include <algorithm>

namespace rankstat {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded decoding: "+" is a space, "%XX" a byte; a malformed escape stays as
// written.
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

// The metric name a sample line starts with.
std::string_view sample_name(std::string_view line) {
  return line.substr(0, std::min(line.find('{'), line.find(' ')));
}

}  // namespace

ScrapeFilter parse_scrape_filter(std::string_view target) {
  ScrapeFilter filter;
  const auto question = target.find('?');
  if (question == std::string_view::npos) return filter;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto equals = pair.find('=');
    const std::string key = form_decode(pair.substr(0, equals));
    const std::string value =
        equals == std::string_view::npos ? std::string() : form_decode(pair.substr(equals + 1));
    if (key == "name[]") {
      filter.names.insert(value);
    } else if (key == "self_metrics") {
      filter.self_metrics = !(value == "false" || value == "0");
    }
  }
  return filter;
}

std::string apply_scrape_filter(std::string_view body, const std::vector<std::size_t>& family_ends,
                                std::size_t engine_families, const ScrapeFilter& filter) {
  std::string out;
  std::size_t begin = 0;
  for (std::size_t family = 0; family < family_ends.size(); ++family) {
    const std::size_t end = std::min(family_ends[family], body.size());
    const std::string_view text = body.substr(begin, end - begin);
    begin = end;
    if (!filter.self_metrics && family >= engine_families) continue;
    if (filter.names.empty()) {
      out.append(text);
      continue;
    }
    std::string comments;
    std::string samples;
    std::string_view rest = text;
    while (!rest.empty()) {
      const auto newline = rest.find('\n');
      const std::string_view line =
          rest.substr(0, newline == std::string_view::npos ? rest.size() : newline + 1);
      rest.remove_prefix(line.size());
      if (line.starts_with('#')) {
        comments.append(line);
      } else if (filter.names.contains(std::string(sample_name(line)))) {
        samples.append(line);
      }
    }
    if (!samples.empty()) out.append(comments).append(samples);
  }
  return out;
}

}  // namespace rankstat
