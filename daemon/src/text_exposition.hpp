// Prometheus text format 0.0.4 written directly into a std::string, byte for byte as prometheus-cpp's
// TextSerializer (1.0.x) writes it, without iostreams. (The gzip of such a body, re-compressed only where a
// family's text changed, is http/chunked_gzip.hpp.)
//
// What prometheus-cpp does, and so what this does (tests/unit/daemon/test_text_exposition.cpp checks
// equality over every metric type, escaping and the special values):
//   * "# HELP name help" when help is non-empty (help is NOT escaped: keep it free of \ and newlines),
//     then "# TYPE name counter|gauge|summary|untyped|histogram";
//   * label values escape \ " and newline; labels in the order given; no sorting;
//   * values as printf("%.16g") in the C locale ("0.1", "1e-05", "1e+16", "-0"), NaN as "Nan",
//     infinities as "+Inf" / "-Inf"; counts (histogram and summary _count, buckets) as integers;
//   * histograms: _count, _sum, then the buckets with le="<bound>" (same float format), and a final
//     le="+Inf" bucket equal to _count only if the last bound given is not +Inf;
//   * summaries: _count, _sum, then one line per quantile with quantile="<q>";
//   * a non-zero timestamp_ms is appended after the value.
#pragma once

#include <prometheus/metric_family.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rankstat::exposition {

// Two spellings of the same text format. Engine families are written as prometheus_client writes them,
// because that is what an engine's users, dashboards and recorded series already have: values and
// bucket bounds through floatToGoString ("1.0", "1e+06", "+Inf"), counts as floats, HELP escaped
// (\\ and \n), every sample's labels sorted by name (le and pid included). prometheus_client and
// Prometheus 2.x treat le="1" and le="1.0" as different series, so this is not cosmetic. rankstatd's own
// metrics keep prometheus-cpp's spelling, which its data model was built with.
enum class Dialect : std::uint8_t { kPrometheusCpp, kPrometheusClient };

// A value as prometheus-cpp writes it: %.16g, "Nan", "+Inf", "-Inf".
void append_value(std::string& out, double value);
// A value as prometheus_client's floatToGoString writes it: Python's repr() of the float ("0.1",
// "1e-05", "1.0"), positive values of seven or more integer digits as Go does ("1.234567e+06"), "NaN",
// "+Inf", "-Inf".
void append_client_value(std::string& out, double value);
// An integer count (histogram buckets, _count).
void append_count(std::string& out, std::uint64_t value);
// A label value with \ " and newline escaped.
void append_label_value(std::string& out, std::string_view value);
// "# HELP ..." and "# TYPE ..." lines. prometheus-cpp: HELP only when non-empty, not escaped;
// prometheus_client: HELP always, with \ and newline escaped.
void append_family_header(std::string& out, std::string_view name, std::string_view help,
                          prometheus::MetricType type, Dialect dialect = Dialect::kPrometheusCpp);
// A sample's head: name, suffix, labels (and one extra label whose value is already formatted text),
// then the space before the value: `name_suffix{a="x",le="0.5"} `. prometheus-cpp puts the extra label
// last; prometheus_client sorts it in among the others (which the caller gives sorted).
void append_head(std::string& out, std::string_view name, std::string_view suffix,
                 const std::vector<prometheus::ClientMetric::Label>& labels, std::string_view extra_name = {},
                 std::string_view extra_value_text = {}, Dialect dialect = Dialect::kPrometheusCpp);

// One family; with kPrometheusCpp exactly as prometheus::TextSerializer writes it.
void append_family(std::string& out, const prometheus::MetricFamily& family,
                   Dialect dialect = Dialect::kPrometheusCpp);
// The whole exposition; with kPrometheusCpp equal to prometheus::TextSerializer().Serialize(families).
std::string serialize(const std::vector<prometheus::MetricFamily>& families,
                      Dialect dialect = Dialect::kPrometheusCpp);
void append_families(std::string& out, const std::vector<prometheus::MetricFamily>& families,
                     Dialect dialect = Dialect::kPrometheusCpp);

}  // namespace rankstat::exposition
