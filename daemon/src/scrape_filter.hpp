// Scrape filters on the telemetry path: `name[]=SAMPLE` keeps only the samples of those names, as
// prometheus_client's exposition (and so SGLang's own /metrics) does, and `self_metrics=false` leaves out
// the daemon's own families (rankstat_*, process_*).
//
// Threading contract: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "text_exposition.hpp"

namespace rankstat {

struct ScrapeFilter {
  std::set<std::string> names;  // sample names (foo_total, foo_bucket, ...); empty: every name
  bool self_metrics = true;     // false: leave out the daemon's own families

  [[nodiscard]] bool active() const { return !names.empty() || !self_metrics; }
};

// Reads the query string of a request target ("/metrics?name[]=a&name%5B%5D=b&self_metrics=false");
// keys and values are decoded by query_params(). Unknown parameters are ignored, as by prometheus_client.
ScrapeFilter parse_scrape_filter(std::string_view target);

// The exposition `body`, whose families end at `family_ends` (the first `engine_families` of them the
// engine's, the rest the daemon's own), with only what `filter` keeps. A family keeps its HELP and TYPE
// lines when at least one of its samples is kept, and disappears otherwise.
// A name asked for is matched as the body writes it under `escaping` (the one it was rendered with):
// `name[]=my.metric_total` finds `my_metric_total` by default and `{"my.metric_total"}` under
// allow-utf-8; the escaped spelling itself is matched too.
std::string apply_scrape_filter(std::string_view body, const std::vector<std::size_t>& family_ends,
                                std::size_t engine_families, const ScrapeFilter& filter,
                                exposition::Escaping escaping = exposition::Escaping::kUnderscores);

}  // namespace rankstat
