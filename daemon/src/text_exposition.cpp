#include "text_exposition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "rankstat/shmproto/cumulative.hpp"

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

// A character of the classic set at (byte) position `index`: [a-zA-Z_] (and `:` in a metric name), a
// digit anywhere but first.
bool classic_char(char32_t c, std::size_t index, bool metric) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':') ||
         (index > 0 && c >= '0' && c <= '9');
}

constexpr char32_t kReplacement = 0xFFFD;

// The code point at `at` in `text`, advancing `at` past it. Names are checked UTF-8 before they get
// here (shm::is_valid_metric_name); should a byte not be, it is one U+FFFD, so the output stays UTF-8.
char32_t next_code_point(std::string_view text, std::size_t& at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const std::size_t length = shm::utf8_sequence_length(lead);
  if (length == 0 || at + length > text.size() || !shm::is_valid_utf8(text.substr(at, length))) {
    ++at;
    return kReplacement;
  }
  char32_t code = length == 1 ? lead : lead & (0x7Fu >> length);
  for (std::size_t i = 1; i < length; ++i)
    code = (code << 6) | (static_cast<unsigned char>(text[at + i]) & 0x3Fu);
  at += length;
  return code;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// A name that is not classic, under kUnderscores, kDots or kValues (the result is classic).
void append_escaped_name(std::string& out, std::string_view name, bool metric, Escaping escaping) {
  if (escaping == Escaping::kValues) out.append("U__");
  for (std::size_t at = 0; at < name.size();) {
    const std::size_t index = at;
    const char32_t c = next_code_point(name, at);
    if (escaping == Escaping::kUnderscores) {
      out.push_back(classic_char(c, index, metric) ? static_cast<char>(c) : '_');
    } else if (escaping == Escaping::kDots && c == '.') {
      out.append("_dot_");
    } else if (c != '_' && classic_char(c, index, metric)) {
      out.push_back(static_cast<char>(c));
    } else if (c == '_' || escaping == Escaping::kDots) {
      // Both schemes double an underscore, so an escaped name reads back unambiguously; dots also writes
      // any other character outside the classic set as a double underscore.
      out.append("__");
    } else {
      char hex[16];
      const auto r = std::to_chars(hex, hex + sizeof hex, static_cast<std::uint32_t>(c), 16);
      out.push_back('_');
      out.append(hex, r.ptr);
      out.push_back('_');
    }
  }
}

// Under kAllowUtf8: the name inside double quotes, \, " and newline backslash-escaped.
void append_quoted_name(std::string& out, std::string_view name, std::string_view suffix) {
  out.push_back('"');
  for (std::size_t at = 0; at < name.size();) {
    const char32_t c = next_code_point(name, at);
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      append_utf8(out, c);
    }
  }
  out.append(suffix);
  out.push_back('"');
}

}  // namespace

std::string_view escaping_name(Escaping escaping) {
  switch (escaping) {
    case Escaping::kAllowUtf8:
      return "allow-utf-8";
    case Escaping::kDots:
      return "dots";
    case Escaping::kValues:
      return "values";
    case Escaping::kUnderscores:
      break;
  }
  return "underscores";
}

Escaping negotiate_escaping(std::string_view accept) {
  const auto trim = [](std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    return text;
  };
  // Media ranges are separated by commas, parameters by semicolons; a quoted value is not expected here
  // (none of the four holds a comma or a semicolon).
  while (!accept.empty()) {
    const std::size_t comma = accept.find(',');
    std::string_view range = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    for (std::size_t semicolon = range.find(';'); semicolon != std::string_view::npos;
         semicolon = range.find(';')) {
      range.remove_prefix(semicolon + 1);
      const std::string_view parameter = trim(range.substr(0, range.find(';')));
      const std::size_t equals = parameter.find('=');
      if (equals == std::string_view::npos || trim(parameter.substr(0, equals)) != "escaping") continue;
      const std::string_view value = trim(parameter.substr(equals + 1));
      for (const Escaping e : {Escaping::kAllowUtf8, Escaping::kDots, Escaping::kValues}) {
        if (value == escaping_name(e)) return e;
      }
      return Escaping::kUnderscores;
    }
  }
  return Escaping::kUnderscores;
}

void append_metric_name(std::string& out, std::string_view name, std::string_view suffix, Escaping escaping) {
  if (shm::is_classic_metric_name(name)) {
    out.append(name).append(suffix);
  } else if (escaping == Escaping::kAllowUtf8) {
    append_quoted_name(out, name, suffix);
  } else {
    append_escaped_name(out, name, true, escaping);
    out.append(suffix);
  }
}

void append_label_name(std::string& out, std::string_view name, Escaping escaping) {
  if (shm::is_classic_label_name(name)) {
    out.append(name);
  } else if (escaping == Escaping::kAllowUtf8) {
    append_quoted_name(out, name, {});
  } else {
    append_escaped_name(out, name, false, escaping);
  }
}

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
                          Dialect dialect, Escaping escaping) {
  if (dialect == Dialect::kPrometheusClient) {
    out.append("# HELP ");
    append_metric_name(out, name, {}, escaping);
    out.push_back(' ');
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
    out.append("# HELP ");
    append_metric_name(out, name, {}, escaping);
    out.push_back(' ');
    out.append(help).push_back('\n');
  }
  out.append("# TYPE ");
  append_metric_name(out, name, {}, escaping);
  out.push_back(' ');
  out.append(type_name(type)).push_back('\n');
}

void append_head(std::string& out, std::string_view name, std::string_view suffix,
                 const std::vector<ClientMetric::Label>& labels, std::string_view extra_name,
                 std::string_view extra_value_text, Dialect dialect, Escaping escaping) {
  // Under allow-utf-8 a name that is not classic goes inside the braces, first, quoted.
  const bool name_inside = escaping == Escaping::kAllowUtf8 && !shm::is_classic_metric_name(name);
  if (name_inside) out.push_back('{');
  append_metric_name(out, name, suffix, escaping);
  if (!labels.empty() || !extra_name.empty()) {
    out.push_back(name_inside ? ',' : '{');
    bool first = true;
    bool extra_written = extra_name.empty();
    const auto put = [&](std::string_view label_name, std::string_view value) {
      if (!first) out.push_back(',');
      first = false;
      append_label_name(out, label_name, escaping);
      out.append("=\"");
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
  } else if (name_inside) {
    out.push_back('}');
  }
  out.push_back(' ');
}

void append_family(std::string& out, const MetricFamily& family, Dialect dialect, Escaping escaping) {
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
  append_family_header(out, family.name, family.help, family.type, dialect, escaping);
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
      append_head(out, family.name, "_sum", sorted, {}, {}, dialect, escaping);
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
      append_head(out, family.name, suffix, *labels, extra_name, extra_value, dialect, escaping);
    };
    // A summary's and (text format 0.0.4 order) a histogram's _count and _sum lines.
    const auto count_and_sum = [&](std::uint64_t sample_count, double sample_sum) {
      head("_count");
      count(sample_count);
      append_tail(out, m);
      head("_sum");
      value(sample_sum);
      append_tail(out, m);
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
        count_and_sum(m.summary.sample_count, m.summary.sample_sum);
        for (const auto& q : m.summary.quantile) {
          head({}, "quantile", bound(q.quantile));
          value(q.value);
          append_tail(out, m);
        }
        break;
      case MetricType::Histogram: {
        if (!client) count_and_sum(m.histogram.sample_count, m.histogram.sample_sum);
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

void append_families(std::string& out, const std::vector<MetricFamily>& families, Dialect dialect,
                     Escaping escaping) {
  for (const MetricFamily& family : families) append_family(out, family, dialect, escaping);
}

std::string serialize(const std::vector<MetricFamily>& families, Dialect dialect, Escaping escaping) {
  std::string out;
  append_families(out, families, dialect, escaping);
  return out;
}

}  // namespace rankstat::exposition
