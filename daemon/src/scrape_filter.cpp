#include "scrape_filter.hpp"

#include <algorithm>
#include <utility>

#include "query_string.hpp"

namespace rankstat {

namespace {

// The metric name a sample line starts with, as written: `name` before `{` or the space, or under
// allow-utf-8 a quoted name first inside the braces (`{"my.metric",...`), quotes included.
std::string_view sample_name(std::string_view line) {
  if (line.starts_with("{\"")) {
    for (std::size_t i = 2; i < line.size(); ++i) {
      if (line[i] == '\\') {
        ++i;
      } else if (line[i] == '"') {
        return line.substr(1, i);
      }
    }
    return {};
  }
  return line.substr(0, std::min(line.find('{'), line.find(' ')));
}

}  // namespace

ScrapeFilter parse_scrape_filter(std::string_view target) {
  ScrapeFilter filter;
  for (QueryParam& param : query_params(target)) {
    if (param.key == "name[]") {
      filter.names.insert(std::move(param.value));
    } else if (param.key == "self_metrics") {
      filter.self_metrics = !(param.value == "false" || param.value == "0");
    }
  }
  return filter;
}

std::string apply_scrape_filter(std::string_view body, const std::vector<std::size_t>& family_ends,
                                std::size_t engine_families, const ScrapeFilter& filter,
                                exposition::Escaping escaping) {
  std::set<std::string, std::less<>> written(filter.names.begin(), filter.names.end());
  for (const std::string& name : filter.names) {
    std::string spelled;
    exposition::append_metric_name(spelled, name, {}, escaping);
    written.insert(std::move(spelled));
  }
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
      } else if (written.contains(sample_name(line))) {
        samples.append(line);
      }
    }
    if (!samples.empty()) out.append(comments).append(samples);
  }
  return out;
}

}  // namespace rankstat
