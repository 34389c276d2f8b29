// The scrape filters of /metrics: prometheus_client's name[] (sample names) and self_metrics=false.
#include <catch2/catch.hpp>

#include "scrape_filter.hpp"

using rankstat::apply_scrape_filter;
using rankstat::parse_scrape_filter;

namespace {

// Two engine families and one of the daemon's, with where each ends.
struct Exposition {
  std::string body;
  std::vector<std::size_t> family_ends;
};

Exposition sample_exposition() {
  Exposition e;
  for (const char* family :
       {"# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1.0\na_created 2.0\n",
        "# HELP b B.\n# TYPE b gauge\nb 3.0\n",
        "# HELP rankstat_up Up.\n# TYPE rankstat_up gauge\nrankstat_up 1\n"}) {
    e.body += family;
    e.family_ends.push_back(e.body.size());
  }
  return e;
}

}  // namespace

TEST_CASE("scrape filter parameters are read percent-decoded, unknown ones ignored") {
  const auto filter = parse_scrape_filter("/metrics?name%5B%5D=a_total&name[]=b&self_metrics=false&x=1");
  CHECK(filter.names == std::set<std::string>{"a_total", "b"});
  CHECK_FALSE(filter.self_metrics);
  CHECK(filter.active());
  CHECK_FALSE(parse_scrape_filter("/metrics").active());
  CHECK_FALSE(parse_scrape_filter("/metrics?self_metrics=true&other=1").active());
  CHECK(parse_scrape_filter("/metrics?name[]=sglang%3Anum_running_reqs")
            .names.contains("sglang:num_running_reqs"));
}

TEST_CASE("name[] keeps the named samples with their family's HELP and TYPE, and drops families left empty") {
  const Exposition e = sample_exposition();
  CHECK(apply_scrape_filter(e.body, e.family_ends, 2, parse_scrape_filter("/m?name[]=a_total")) ==
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1.0\n");
  CHECK(
      apply_scrape_filter(e.body, e.family_ends, 2, parse_scrape_filter("/m?name[]=b&name[]=rankstat_up")) ==
      "# HELP b B.\n# TYPE b gauge\nb 3.0\n# HELP rankstat_up Up.\n# TYPE rankstat_up gauge\nrankstat_up "
      "1\n");
  CHECK(apply_scrape_filter(e.body, e.family_ends, 2, parse_scrape_filter("/m?name[]=nothing")).empty());
}

TEST_CASE("self_metrics=false leaves out the daemon's families, alone or with name[]") {
  const Exposition e = sample_exposition();
  const std::string engine_only = e.body.substr(0, e.family_ends[1]);
  CHECK(apply_scrape_filter(e.body, e.family_ends, 2, parse_scrape_filter("/m?self_metrics=false")) ==
        engine_only);
  CHECK(apply_scrape_filter(e.body, e.family_ends, 2,
                            parse_scrape_filter("/m?self_metrics=0&name[]=rankstat_up"))
            .empty());
}
