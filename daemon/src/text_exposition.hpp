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

// How a metric or label name that is not classic (shm::is_classic_metric_name / is_classic_label_name)
// is written: the scheme a scraper asks for with the Accept header's `escaping` parameter, as Prometheus 3
// negotiates it (https://prometheus.io/docs/instrumenting/escaping_schemes/; docs/http-api.md). A
// classic name is written as it is under every scheme, as Prometheus's own Go encoder does (prometheus_client
// also doubles the underscores of classic names under `dots`; rankstatd does not).
//   kUnderscores  (the default) every character outside [a-zA-Z0-9_:] (label names: [a-zA-Z0-9_]), and a
//                 leading digit, becomes one `_`: `my.metric` -> `my_metric`, `größe` -> `gr__e`;
//   kAllowUtf8    the name as it is, in double quotes with \, " and newline backslash-escaped; a sample
//                 name goes inside the braces, first: `{"my.metric","http.method"="GET"} 1`;
//   kDots         `.` -> `_dot_`, `_` -> `__`, other characters outside the set -> `__`;
//   kValues       `U__`, then `_` -> `__` and each other character outside the set -> `_<hex code point>_`.
// Sample suffixes (_total, _bucket, ...) are appended after the escaped family name.
enum class Escaping : std::uint8_t { kUnderscores, kAllowUtf8, kDots, kValues };
inline constexpr std::size_t kEscapingSchemes = 4;
// "underscores", "allow-utf-8", "dots", "values": the parameter's value.
std::string_view escaping_name(Escaping escaping);
// The scheme an Accept header asks for, as prometheus_client and Prometheus's Go library read it: the
// `escaping` parameter of the first media range that has one (names and values compared as written,
// surrounding blanks ignored); none, or a value that is not one of the four, gives kUnderscores.
Escaping negotiate_escaping(std::string_view accept);
// A sample or family name (and `suffix`, appended after it) outside braces: `name_suffix`, escaped by
// `escaping`, or `"name_suffix"` quoted under kAllowUtf8 when the name is not classic.
void append_metric_name(std::string& out, std::string_view name, std::string_view suffix, Escaping escaping);
// A label name, escaped by `escaping` (quoted under kAllowUtf8 when it is not classic).
void append_label_name(std::string& out, std::string_view name, Escaping escaping);

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
                          prometheus::MetricType type, Dialect dialect = Dialect::kPrometheusCpp,
                          Escaping escaping = Escaping::kUnderscores);
// A sample's head: name, suffix, labels (and one extra label whose value is already formatted text),
// then the space before the value: `name_suffix{a="x",le="0.5"} ` (names escaped by `escaping`).
// prometheus-cpp puts the extra label last; prometheus_client sorts it in among the others (which the caller
// gives sorted).
void append_head(std::string& out, std::string_view name, std::string_view suffix,
                 const std::vector<prometheus::ClientMetric::Label>& labels, std::string_view extra_name = {},
                 std::string_view extra_value_text = {}, Dialect dialect = Dialect::kPrometheusCpp,
                 Escaping escaping = Escaping::kUnderscores);

// One family; with kPrometheusCpp exactly as prometheus::TextSerializer writes it.
void append_family(std::string& out, const prometheus::MetricFamily& family,
                   Dialect dialect = Dialect::kPrometheusCpp, Escaping escaping = Escaping::kUnderscores);
// The whole exposition; with kPrometheusCpp equal to prometheus::TextSerializer().Serialize(families).
std::string serialize(const std::vector<prometheus::MetricFamily>& families,
                      Dialect dialect = Dialect::kPrometheusCpp, Escaping escaping = Escaping::kUnderscores);
void append_families(std::string& out, const std::vector<prometheus::MetricFamily>& families,
                     Dialect dialect = Dialect::kPrometheusCpp, Escaping escaping = Escaping::kUnderscores);

}  // namespace rankstat::exposition
