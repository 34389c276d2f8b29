#include "text_exposition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace rankstat::exposition {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::string_view type_name(MetricType type) {
  switch (type) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Summary:
      return "summary";
    case MetricType::Histogram:
      return "histogram";
    case MetricType::Untyped:
      break;
  }
  return "untyped";
}

void append_tail(std::string& out, const ClientMetric& metric) {
  if (metric.timestamp_ms != 0) {
    char buffer[24];
    const auto r = std::to_chars(buffer, buffer + sizeof buffer, metric.timestamp_ms);
    out.push_back(' ');
    out.append(buffer, r.ptr);
  }
  out.push_back('\n');
}

}  // namespace

void append_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out.append("Nan");
    return;
  }
  if (std::isinf(value)) {
    out.append(value < 0 ? "-Inf" : "+Inf");
    return;
  }
  char buffer[40];
  std::to_chars_result r{};
  // Integral values below 1e15 print the same with %.16g as integers; most exported values are such.
  if (value == 0) {
    out.append(std::signbit(value) ? "-0" : "0");
    return;
  }
  if (std::fabs(value) < 1e15 && value == std::trunc(value)) {
    r = std::to_chars(buffer, buffer + sizeof buffer, static_cast<std::int64_t>(value));
  } else {
    // printf("%.16g"), which is what an ostream with precision max_digits10 - 1 writes.
    r = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, 16);
  }
  out.append(buffer, r.ptr);
}

void append_client_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out.append("NaN");
    return;
  }
  if (std::isinf(value)) {
    out.append(value < 0 ? "-Inf" : "+Inf");
    return;
  }
  // Most values are whole numbers (counts, tokens, bucket totals): repr() writes them as "<integer>.0",
  // and floatToGoString keeps that below 1e6 (seven integer digits switch to Go's exponent form).
  if (std::fabs(value) < 1e6 && value == std::trunc(value)) {
    char buffer[24];
    const auto r = std::to_chars(buffer, buffer + sizeof buffer, static_cast<std::int64_t>(value));
    if (value == 0 && std::signbit(value)) out.push_back('-');
    out.append(buffer, r.ptr).append(".0");
    return;
  }
  // Python's repr(): the shortest digits that read back as the same double, in fixed notation when the
  // decimal exponent is in [-4, 16), else d.ddde+XX; fixed notation always has a fractional part.
  char sci[40];
  const auto r = std::to_chars(sci, sci + sizeof sci, value, std::chars_format::scientific);
  const std::string_view text(sci, static_cast<std::size_t>(r.ptr - sci));
  const bool negative = text.front() == '-';
  const std::size_t e_pos = text.find('e');
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < e_pos; ++i) {
    if (text[i] != '.') digits.push_back(text[i]);
  }
  int exponent = 0;
  std::from_chars(text.data() + e_pos + (text[e_pos + 1] == '+' ? 2 : 1), text.data() + text.size(),
                  exponent);
  if (value == 0) exponent = 0;
  const auto n = static_cast<int>(digits.size());
  std::string repr;
  if (negative) repr.push_back('-');
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      repr.append("0.").append(static_cast<std::size_t>(-exponent - 1), '0').append(digits);
    } else if (exponent + 1 >= n) {
      repr.append(digits).append(static_cast<std::size_t>(exponent + 1 - n), '0').append(".0");
    } else {
      const std::size_t integer_digits = static_cast<std::size_t>(exponent) + 1;  // exponent >= 0 here
      repr.append(digits, 0, integer_digits).push_back('.');
      repr.append(digits, integer_digits);
    }
  } else {
    repr.push_back(digits.front());
    if (n > 1) repr.append(".").append(digits, 1);
    repr.push_back('e');
    repr.push_back(exponent < 0 ? '-' : '+');
    const int magnitude = exponent < 0 ? -exponent : exponent;
    if (magnitude < 10) repr.push_back('0');
    repr.append(std::to_string(magnitude));
  }
  // floatToGoString: Go switches to exponents sooner than Python for large positive values.
  const std::size_t dot = repr.find('.');
  if (value > 0 && dot != std::string::npos && dot > 6) {
    std::string mantissa;
    mantissa.push_back(repr[0]);
    mantissa.push_back('.');
    mantissa.append(repr, 1, dot - 1).append(repr, dot + 1);
    while (!mantissa.empty() && (mantissa.back() == '0' || mantissa.back() == '.')) mantissa.pop_back();
    out.append(mantissa).append("e+0").append(std::to_string(dot - 1));
    return;
  }
  out.append(repr);
}

void append_count(std::string& out, std::uint64_t value) {
  char buffer[24];
  const auto r = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, r.ptr);
}

void append_label_value(std::string& out, std::string_view value) {
  std::size_t run = 0;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (c != '\\' && c != '"' && c != '\n') continue;
    out.append(value.data() + run, i - run);
    out.push_back('\\');
    out.push_back(c == '\n' ? 'n' : c);
    run = i + 1;
  }
  out.append(value.data() + run, value.size() - run);
}

void append_family_header(std::string& out, std::string_view name, std::string_view help, MetricType type,
                          Dialect dialect) {
  if (dialect == Dialect::kPrometheusClient) {
    out.append("# HELP ").append(name).push_back(' ');
    for (const char c : help) {
      if (c == '\\') {
        out.append("\\\\");
      } else if (c == '\n') {
        out.append("\\n");
      } else {
        out.push_back(c);
      }
    }
    out.push_back('\n');
  } else if (!help.empty()) {
    out.append("# HELP ").append(name).push_back(' ');
    out.append(help).push_back('\n');
  }
  out.append("# TYPE ").append(name).push_back(' ');
  out.append(type_name(type)).push_back('\n');
}

void append_head(std::string& out, std::string_view name, std::string_view suffix,
                 const std::vector<ClientMetric::Label>& labels, std::string_view extra_name,
                 std::string_view extra_value_text, Dialect dialect) {
  out.append(name).append(suffix);
  if (!labels.empty() || !extra_name.empty()) {
    out.push_back('{');
    bool first = true;
    bool extra_written = extra_name.empty();
    const auto put = [&](std::string_view label_name, std::string_view value) {
      if (!first) out.push_back(',');
      first = false;
      out.append(label_name).append("=\"");
      append_label_value(out, value);
      out.push_back('"');
    };
    for (const auto& label : labels) {
      if (!extra_written && dialect == Dialect::kPrometheusClient && extra_name < label.name) {
        put(extra_name, extra_value_text);
        extra_written = true;
      }
      put(label.name, label.value);
    }
    if (!extra_written) put(extra_name, extra_value_text);
    out.push_back('}');
  }
  out.push_back(' ');
}

void append_family(std::string& out, const MetricFamily& family, Dialect dialect) {
  const bool client = dialect == Dialect::kPrometheusClient;
  const auto value = [&](double v) { client ? append_client_value(out, v) : append_value(out, v); };
  const auto count = [&](std::uint64_t c) {
    client ? append_client_value(out, static_cast<double>(c)) : append_count(out, c);
  };
  const auto bound = [&](double b) {
    std::string text;
    client ? append_client_value(text, b) : append_value(text, b);
    return text;
  };
  append_family_header(out, family.name, family.help, family.type, dialect);
  std::vector<ClientMetric::Label> sorted;
  const auto sort_labels = [&sorted](const ClientMetric& m) {
    sorted = m.label;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  };
  if (client && family.type == MetricType::Histogram) {
    // prometheus_client's multiprocess collector writes every _sum of a histogram family first, then each
    // series' buckets and _count.
    for (const ClientMetric& m : family.metric) {
      sort_labels(m);
      append_head(out, family.name, "_sum", sorted, {}, {}, dialect);
      value(m.histogram.sample_sum);
      append_tail(out, m);
    }
  }
  for (const ClientMetric& m : family.metric) {
    const std::vector<ClientMetric::Label>* labels = &m.label;
    if (client) {
      sort_labels(m);
      labels = &sorted;
    }
    const auto head = [&](std::string_view suffix, std::string_view extra_name = {},
                          std::string_view extra_value = {}) {
      append_head(out, family.name, suffix, *labels, extra_name, extra_value, dialect);
    };
    switch (family.type) {
      case MetricType::Counter:
        head({});
        value(m.counter.value);
        append_tail(out, m);
        break;
      case MetricType::Gauge:
        head({});
        value(m.gauge.value);
        append_tail(out, m);
        break;
      case MetricType::Untyped:
        head({});
        value(m.untyped.value);
        append_tail(out, m);
        break;
      case MetricType::Summary:
        head("_count");
        count(m.summary.sample_count);
        append_tail(out, m);
        head("_sum");
        value(m.summary.sample_sum);
        append_tail(out, m);
        for (const auto& q : m.summary.quantile) {
          head({}, "quantile", bound(q.quantile));
          value(q.value);
          append_tail(out, m);
        }
        break;
      case MetricType::Histogram: {
        if (!client) {
          head("_count");
          count(m.histogram.sample_count);
          append_tail(out, m);
          head("_sum");
          value(m.histogram.sample_sum);
          append_tail(out, m);
        }
        bool ends_with_inf = false;
        for (const auto& b : m.histogram.bucket) {
          head("_bucket", "le", bound(b.upper_bound));
          count(b.cumulative_count);
          append_tail(out, m);
          ends_with_inf = std::isinf(b.upper_bound) && b.upper_bound > 0;
        }
        if (!ends_with_inf) {
          head("_bucket", "le", "+Inf");
          count(m.histogram.sample_count);
          append_tail(out, m);
        }
        if (client) {
          head("_count");
          count(m.histogram.sample_count);
          append_tail(out, m);
        }
        break;
      }
    }
  }
}

void append_families(std::string& out, const std::vector<MetricFamily>& families, Dialect dialect) {
  for (const MetricFamily& family : families) append_family(out, family, dialect);
}

std::string serialize(const std::vector<MetricFamily>& families, Dialect dialect) {
  std::string out;
  append_families(out, families, dialect);
  return out;
}

}  // namespace rankstat::exposition
