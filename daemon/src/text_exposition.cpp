#include "text_exposition.hpp"

#define ZLIB_CONST
#include <zlib.h>

#ifdef RANKSTAT_HAVE_ISAL
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#endif

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
  for (const ClientMetric& m : family.metric) {
    const std::vector<ClientMetric::Label>* labels = &m.label;
    if (client) {
      sorted = m.label;
      std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
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
        head("_count");
        count(m.histogram.sample_count);
        append_tail(out, m);
        head("_sum");
        value(m.histogram.sample_sum);
        append_tail(out, m);
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

// ---------------------------------------------------------------------------------------------------
// ChunkedGzip

struct ChunkedGzip::Stream {
  z_stream z{};
  bool initialised = false;
#ifdef RANKSTAT_HAVE_ISAL
  isal_zstream isal{};
  std::vector<std::uint8_t> level_buffer = std::vector<std::uint8_t>(ISAL_DEF_LVL1_DEFAULT);
#endif
  ~Stream() {
    if (initialised) deflateEnd(&z);
  }
};

ChunkedGzip::ChunkedGzip(int level) : stream_(std::make_unique<Stream>()), level_(level) {
  set_level(level);
}

ChunkedGzip::~ChunkedGzip() = default;

bool ChunkedGzip::use_isal() const {
#ifdef RANKSTAT_HAVE_ISAL
  return level_ == 1;
#else
  return false;
#endif
}

std::string_view ChunkedGzip::engine() const {
  return use_isal() ? "isa-l" : "zlib";
}

void ChunkedGzip::set_level(int level) {
  if (stream_->initialised && level == level_) return;
  if (stream_->initialised) {
    deflateEnd(&stream_->z);
    stream_->initialised = false;
  }
  stream_->z = z_stream{};
  // Raw deflate (negative window bits): the gzip header and trailer are written here.
  if (deflateInit2(&stream_->z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("gzip: deflateInit2 failed for level " + std::to_string(level));
  }
  stream_->initialised = true;
  level_ = level;
  chunks_.clear();
  last_.reset();
}

namespace {

std::uint32_t crc_of(std::string_view text) {
#ifdef RANKSTAT_HAVE_ISAL
  return crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(text.data()), text.size());
#else
  return static_cast<std::uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(text.data()), text.size()));
#endif
}

}  // namespace

void ChunkedGzip::deflate_chunk(std::string_view text, Chunk& chunk) {
  chunk.crc = crc_of(text);
  chunk.deflated.clear();
  if (text.empty()) return;
  std::vector<unsigned char>& buffer = scratch_;
  // Room for incompressible input (stored blocks) plus the sync flush's empty stored block; the buffer
  // only grows (no clearing of new bytes on every chunk).
  const std::size_t room = text.size() + text.size() / 8 + 1024;
  if (buffer.size() < room) buffer.resize(room);
  std::size_t produced = 0;
#ifdef RANKSTAT_HAVE_ISAL
  if (use_isal()) {
    isal_zstream& z = stream_->isal;
    isal_deflate_init(&z);  // a fresh stream per chunk: no history shared with other chunks
    z.level = 1;
    z.level_buf = stream_->level_buffer.data();
    z.level_buf_size = static_cast<std::uint32_t>(stream_->level_buffer.size());
    z.flush = SYNC_FLUSH;
    z.end_of_stream = 0;
    z.gzip_flag = IGZIP_DEFLATE;
    z.next_in = reinterpret_cast<std::uint8_t*>(const_cast<char*>(text.data()));
    z.avail_in = static_cast<std::uint32_t>(text.size());
    for (;;) {
      z.next_out = buffer.data() + produced;
      z.avail_out = static_cast<std::uint32_t>(buffer.size() - produced);
      if (isal_deflate(&z) != COMP_OK) throw std::runtime_error("gzip: isal_deflate failed");
      produced = buffer.size() - z.avail_out;
      // Flushed once all input is taken and output space is left (or the stream waits for a header).
      if (z.avail_in == 0 && (z.avail_out != 0 || z.internal_state.state == ZSTATE_NEW_HDR)) break;
      buffer.resize(buffer.size() * 2);
    }
    chunk.deflated.assign(reinterpret_cast<const char*>(buffer.data()), produced);
    return;
  }
#endif
  z_stream& z = stream_->z;
  if (deflateReset(&z) != Z_OK) throw std::runtime_error("gzip: deflateReset failed");
  z.next_in = reinterpret_cast<const Bytef*>(text.data());
  z.avail_in = static_cast<uInt>(text.size());
  for (;;) {
    z.next_out = buffer.data() + produced;
    z.avail_out = static_cast<uInt>(buffer.size() - produced);
    const int rc = deflate(&z, Z_SYNC_FLUSH);
    produced = buffer.size() - z.avail_out;
    if (rc != Z_OK && rc != Z_BUF_ERROR) throw std::runtime_error("gzip: deflate failed");
    // Done when all input is taken and zlib left output space unused (the flush is complete).
    if (z.avail_in == 0 && z.avail_out != 0) break;
    buffer.resize(buffer.size() * 2);
  }
  chunk.deflated.assign(reinterpret_cast<const char*>(buffer.data()), produced);
}

std::string& ChunkedGzip::next_body() {
  std::string& body = bodies_[next_];
  body.clear();
  return body;
}

std::shared_ptr<const std::string> ChunkedGzip::compress(std::string_view body,
                                                         const std::vector<std::size_t>& chunk_ends) {
  next_body().assign(body);
  return compress(chunk_ends);
}

std::shared_ptr<const std::string> ChunkedGzip::compress(const std::vector<std::size_t>& chunk_ends) {
  const std::string& body = bodies_[next_];
  const std::string& previous = bodies_[1 - next_];
  compressed_ = 0;
  reused_ = 0;
  ends_.clear();
  std::size_t begin = 0;
  for (const std::size_t end : chunk_ends) {
    if (end < begin || end > body.size()) throw std::invalid_argument("gzip: chunk boundaries out of order");
    if (end - (ends_.empty() ? 0 : ends_.back()) >= kMinChunkBytes) ends_.push_back(end);
    begin = end;
  }
  if (begin != body.size()) throw std::invalid_argument("gzip: chunks do not cover the body");
  if (ends_.empty() || ends_.back() != body.size()) ends_.push_back(body.size());

  bool all_reused = chunks_.size() == ends_.size() && last_ != nullptr;
  if (chunks_.size() < ends_.size()) chunks_.resize(ends_.size());
  begin = 0;
  for (std::size_t i = 0; i < ends_.size(); ++i) {
    const std::size_t end = ends_[i];
    const std::string_view text(body.data() + begin, end - begin);
    Chunk& chunk = chunks_[i];
    const std::size_t old_size = chunk.end - chunk.begin;
    if (chunk.end <= previous.size() && old_size == text.size() &&
        std::memcmp(previous.data() + chunk.begin, text.data(), text.size()) == 0 &&
        (!text.empty() || chunk.deflated.empty())) {
      ++reused_;
    } else {
      try {
        deflate_chunk(text, chunk);
      } catch (...) {
        chunks_.clear();  // the cache no longer matches any body
        last_.reset();
        throw;
      }
      ++compressed_;
      all_reused = false;
    }
    chunk.begin = begin;
    chunk.end = end;
    begin = end;
  }
  chunks_.resize(ends_.size());
  next_ = 1 - next_;  // this body becomes the previous one
  if (all_reused) return last_;

  std::size_t deflated_bytes = 0;
  for (const Chunk& c : chunks_) deflated_bytes += c.deflated.size();
  // The previous member's storage is reused once no response holds it any more.
  std::shared_ptr<std::string> out = std::move(spare_);
  if (out == nullptr || out.use_count() != 1) out = std::make_shared<std::string>();
  out->clear();
  out->reserve(10 + deflated_bytes + 2 + 8);
  // Member header: ID1 ID2, CM=8 (deflate), no flags, no mtime, XFL 0, OS 3 (Unix).
  static constexpr char kHeader[10] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, 0, 3};
  out->append(kHeader, sizeof kHeader);
  uLong crc = crc32_z(0, nullptr, 0);
  std::uint64_t length = 0;
  for (const Chunk& c : chunks_) {
    out->append(c.deflated);
    crc = crc32_combine(crc, c.crc, static_cast<z_off_t>(c.end - c.begin));
    length += c.end - c.begin;
  }
  // An empty final block with fixed codes (BFINAL 1, BTYPE 01, end-of-block), then CRC-32 and ISIZE.
  out->push_back('\x03');
  out->push_back('\x00');
  const auto crc32_value = static_cast<std::uint32_t>(crc);
  const auto isize = static_cast<std::uint32_t>(length & 0xffffffffu);
  for (int shift = 0; shift < 32; shift += 8)
    out->push_back(static_cast<char>((crc32_value >> shift) & 0xff));
  for (int shift = 0; shift < 32; shift += 8) out->push_back(static_cast<char>((isize >> shift) & 0xff));
  spare_ = std::const_pointer_cast<std::string>(std::move(last_));
  last_ = out;
  return last_;
}

}  // namespace rankstat::exposition
