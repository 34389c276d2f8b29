// Names beyond the classic character set (prometheus_client 0.22+ accepts any UTF-8 name) as /metrics
// writes them: escaped by the scheme the scraper's Accept header asks for (underscores by default, or
// allow-utf-8, dots, values), with classic names unchanged under every scheme.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "family_set.hpp"
#include "scrape_filter.hpp"
#include "text_exposition.hpp"

using rankstat::FamilySet;
using rankstat::Labels;
using rankstat::exposition::Escaping;

namespace {

std::string metric_name(std::string_view name, Escaping escaping, std::string_view suffix = {}) {
  std::string out;
  rankstat::exposition::append_metric_name(out, name, suffix, escaping);
  return out;
}

std::string label_name(std::string_view name, Escaping escaping) {
  std::string out;
  rankstat::exposition::append_label_name(out, name, escaping);
  return out;
}

// A counter `my.metric_total` with an `http.method` label, a classic gauge, and `a.b` / `a_b`, which
// escape to the same name under underscores.
void contribute(FamilySet& set) {
  set.add_counter("my.metric_total", "Dotted.", Labels{{"http.method", "GET"}}, 3);
  set.add_gauge("plain_gauge", "Classic.", rankstat::shm::GaugeMode::kMax, Labels{{"zone", "a"}}, 1, 0, {});
  set.add_gauge("a.b", "Dot.", rankstat::shm::GaugeMode::kMax, {}, 1, 0, {});
  set.add_gauge("a_b", "Underscore.", rankstat::shm::GaugeMode::kMax, {}, 2, 0, {});
}

std::string render(FamilySet& set, Escaping escaping) {
  contribute(set);
  std::string out;
  set.render(out, nullptr, escaping);
  return out;
}

}  // namespace

TEST_CASE("the escaping scheme is read from the Accept header, underscores when absent or unknown") {
  using rankstat::exposition::negotiate_escaping;
  CHECK(negotiate_escaping("") == Escaping::kUnderscores);
  CHECK(negotiate_escaping("text/plain;version=0.0.4") == Escaping::kUnderscores);
  CHECK(negotiate_escaping("text/plain;version=0.0.4;escaping=allow-utf-8") == Escaping::kAllowUtf8);
  CHECK(negotiate_escaping("text/plain; version=0.0.4; escaping = dots ;q=0.5") == Escaping::kDots);
  CHECK(negotiate_escaping("text/plain;escaping=values") == Escaping::kValues);
  CHECK(negotiate_escaping("text/plain;escaping=underscores") == Escaping::kUnderscores);
  CHECK(negotiate_escaping("text/plain;escaping=ALLOW-UTF-8") == Escaping::kUnderscores);
  CHECK(negotiate_escaping("text/plain;escaping=bogus") == Escaping::kUnderscores);
  // Prometheus 3's header in UTF-8 mode: the first range that names a scheme decides.
  CHECK(negotiate_escaping("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                           "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;"
                           "q=0.3,*/*;q=0.2") == Escaping::kAllowUtf8);
  CHECK(negotiate_escaping("application/json, text/plain;version=0.0.4;escaping=allow-utf-8") ==
        Escaping::kAllowUtf8);
}

TEST_CASE("a name that is not classic is escaped by each scheme, and a classic one is left as it is") {
  CHECK(metric_name("my.metric", Escaping::kUnderscores) == "my_metric");
  CHECK(metric_name("my.metric", Escaping::kAllowUtf8) == "\"my.metric\"");
  CHECK(metric_name("my.metric", Escaping::kDots) == "my_dot_metric");
  CHECK(metric_name("my.metric", Escaping::kValues) == "U__my_2e_metric");
  // The suffix follows the escaped name (inside the quotes under allow-utf-8).
  CHECK(metric_name("my.metric", Escaping::kUnderscores, "_bucket") == "my_metric_bucket");
  CHECK(metric_name("my.metric", Escaping::kAllowUtf8, "_bucket") == "\"my.metric_bucket\"");
  // One underscore per character, not per byte; a leading digit is escaped too.
  CHECK(metric_name("gr\xC3\xB6\xC3\x9F"
                    "e",
                    Escaping::kUnderscores) == "gr__e");
  CHECK(metric_name("gr\xC3\xB6\xC3\x9F"
                    "e",
                    Escaping::kValues) == "U__gr_f6__df_e");
  CHECK(metric_name("gr\xC3\xB6\xC3\x9F"
                    "e",
                    Escaping::kAllowUtf8) ==
        "\"gr\xC3\xB6\xC3\x9F"
        "e\"");
  CHECK(metric_name("1st", Escaping::kUnderscores) == "_st");
  CHECK(metric_name("a_b.c", Escaping::kDots) == "a__b_dot_c");
  CHECK(metric_name("a_b.c", Escaping::kValues) == "U__a__b_2e_c");
  // Quotes, backslashes and newlines are backslash-escaped inside the quotes.
  CHECK(metric_name("a\"b\\c\nd", Escaping::kAllowUtf8) == "\"a\\\"b\\\\c\\nd\"");
  CHECK(metric_name("a\"b\\c\nd", Escaping::kUnderscores) == "a_b_c_d");
  // Classic names: unchanged under every scheme (`dots` included, as Prometheus's Go encoder does).
  for (const Escaping e :
       {Escaping::kUnderscores, Escaping::kAllowUtf8, Escaping::kDots, Escaping::kValues}) {
    CHECK(metric_name("sglang:num_requests_total", e) == "sglang:num_requests_total");
    CHECK(label_name("model_name", e) == "model_name");
  }
  // A colon is classic in a metric name, not in a label name.
  CHECK(label_name("a:b", Escaping::kUnderscores) == "a_b");
  CHECK(label_name("a:b", Escaping::kAllowUtf8) == "\"a:b\"");
  CHECK(label_name("http.method", Escaping::kUnderscores) == "http_method");
}

TEST_CASE(
    "FamilySet::render writes names by the scheme asked for, round after round, classic families alike") {
  FamilySet set;
  const std::string underscores = render(set, Escaping::kUnderscores);
  CHECK(underscores ==
        "# HELP a_b Dot.\n# TYPE a_b gauge\na_b 1.0\n"
        "# HELP a_b Underscore.\n# TYPE a_b gauge\na_b 2.0\n"
        "# HELP my_metric_total Dotted.\n# TYPE my_metric_total "
        "counter\nmy_metric_total{http_method=\"GET\"} 3.0\n"
        "# HELP plain_gauge Classic.\n# TYPE plain_gauge gauge\nplain_gauge{zone=\"a\"} 1.0\n");
  const std::string utf8 = render(set, Escaping::kAllowUtf8);
  CHECK(utf8 ==
        "# HELP \"a.b\" Dot.\n# TYPE \"a.b\" gauge\n{\"a.b\"} 1.0\n"
        "# HELP a_b Underscore.\n# TYPE a_b gauge\na_b 2.0\n"
        "# HELP \"my.metric_total\" Dotted.\n# TYPE \"my.metric_total\" counter\n"
        "{\"my.metric_total\",\"http.method\"=\"GET\"} 3.0\n"
        "# HELP plain_gauge Classic.\n# TYPE plain_gauge gauge\nplain_gauge{zone=\"a\"} 1.0\n");
  // The heads kept from the last round are rewritten when the scheme changes back, and only then.
  CHECK(render(set, Escaping::kUnderscores) == underscores);
  CHECK(render(set, Escaping::kUnderscores) == underscores);
  CHECK(render(set, Escaping::kAllowUtf8) == utf8);
  CHECK(render(set, Escaping::kValues).find("U__my_2e_metric__total{U__http_2e_method=\"GET\"} 3.0\n") !=
        std::string::npos);
}

TEST_CASE("a histogram with a dotted name puts its quoted sample names first inside the braces") {
  FamilySet set;
  const std::vector<double> bounds = {0.5};
  const std::vector<std::uint64_t> counts = {1, 2};
  set.add_histogram("req.seconds", "Latency.", Labels{{"path", "/"}}, bounds, counts, 2.5);
  std::string out;
  set.render(out, nullptr, Escaping::kAllowUtf8);
  CHECK(out ==
        "# HELP \"req.seconds\" Latency.\n# TYPE \"req.seconds\" histogram\n"
        "{\"req.seconds_sum\",path=\"/\"} 2.5\n"
        "{\"req.seconds_bucket\",le=\"0.5\",path=\"/\"} 1.0\n"
        "{\"req.seconds_bucket\",le=\"+Inf\",path=\"/\"} 3.0\n"
        "{\"req.seconds_count\",path=\"/\"} 3.0\n");
}

TEST_CASE("the MetricFamily serializer escapes names the same way, and leaves classic ones byte for byte") {
  prometheus::MetricFamily family;
  family.name = "my.gauge";
  family.help = "Help.";
  family.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric metric;
  metric.label = {{"b.x", "1"}, {"a", "2"}};
  metric.gauge.value = 4;
  family.metric.push_back(metric);
  using rankstat::exposition::Dialect;
  using rankstat::exposition::serialize;
  CHECK(serialize({family}) ==
        "# HELP my_gauge Help.\n# TYPE my_gauge gauge\nmy_gauge{b_x=\"1\",a=\"2\"} 4\n");
  CHECK(serialize({family}, Dialect::kPrometheusClient, Escaping::kAllowUtf8) ==
        "# HELP \"my.gauge\" Help.\n# TYPE \"my.gauge\" gauge\n{\"my.gauge\",a=\"2\",\"b.x\"=\"1\"} 4.0\n");
  family.name = "my_gauge";
  family.metric[0].label = {{"a", "2"}};
  const std::string classic = serialize({family}, Dialect::kPrometheusClient);
  for (const Escaping e : {Escaping::kAllowUtf8, Escaping::kDots, Escaping::kValues})
    CHECK(serialize({family}, Dialect::kPrometheusClient, e) == classic);
}

TEST_CASE("name[] finds a name that is not classic under the scheme the body was written with") {
  FamilySet set;
  contribute(set);
  std::string body;
  std::vector<std::size_t> ends;
  set.render(body, &ends, Escaping::kAllowUtf8);
  const auto filter = rankstat::parse_scrape_filter("/m?name[]=my.metric_total");
  CHECK(rankstat::apply_scrape_filter(body, ends, ends.size(), filter, Escaping::kAllowUtf8) ==
        "# HELP \"my.metric_total\" Dotted.\n# TYPE \"my.metric_total\" counter\n"
        "{\"my.metric_total\",\"http.method\"=\"GET\"} 3.0\n");
  FamilySet plain;
  contribute(plain);
  body.clear();
  ends.clear();
  plain.render(body, &ends, Escaping::kUnderscores);
  const std::string expected =
      "# HELP my_metric_total Dotted.\n# TYPE my_metric_total counter\nmy_metric_total{http_method=\"GET\"} "
      "3.0\n";
  CHECK(rankstat::apply_scrape_filter(body, ends, ends.size(), filter) == expected);
  CHECK(rankstat::apply_scrape_filter(
            body, ends, ends.size(), rankstat::parse_scrape_filter("/m?name[]=my_metric_total")) == expected);
}
