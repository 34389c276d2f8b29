// Prometheus text format 0.0.4 written directly into a std::string, byte for byte as prometheus-cpp's
// TextSerializer (1.0.x) writes it, without iostreams; and gzip of such a body that re-compresses only
// the families whose text changed since the previous body.
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
#include <memory>
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

// gzip (RFC 1952) of a body made of chunks (one per family), built from independently compressed
// chunks: each chunk is a raw deflate stream ended with a sync flush (byte aligned, not final), the
// member ends with an empty final block, and the CRC-32 is combined from the chunks' CRCs. A chunk whose
// text equals the text at the same position in the previous body reuses its compressed bytes, so an
// unchanged family costs a memcmp instead of a deflate, and an unchanged body costs nothing.
// The result is one ordinary gzip member that any inflater (zlib, Go's compress/gzip) reads.
// Level 1 (rankstatd's default) deflates with ISA-L's igzip when the build found libisal (several
// times faster than zlib's level 1, with a slightly better ratio); other levels, or no ISA-L, use zlib.
// Not thread-safe; keep one per producer of bodies.
class ChunkedGzip {
 public:
  // Neighbouring chunks smaller than this are merged (compressed as one): each chunk is compressed on
  // its own, so tiny ones would lose the redundancy between families.
  static constexpr std::size_t kMinChunkBytes = std::size_t{64} * 1024;

  explicit ChunkedGzip(int level = 1);
  ~ChunkedGzip();
  ChunkedGzip(const ChunkedGzip&) = delete;
  ChunkedGzip& operator=(const ChunkedGzip&) = delete;

  // The buffer to write the next body into: empty, with the capacity of an earlier body (two buffers
  // alternate, so the previous body stays for the comparison without being copied).
  std::string& next_body();
  // Compresses the body written into next_body(). `chunk_ends[i]` is the offset where chunk i ends; the
  // last must equal the body's size. Returns the complete gzip member, shared so that a response can
  // hold it without a copy. Throws std::invalid_argument on bad boundaries, std::runtime_error if the
  // deflater fails.
  std::shared_ptr<const std::string> compress(const std::vector<std::size_t>& chunk_ends);
  // The same for a body held elsewhere (copied into next_body() first).
  std::shared_ptr<const std::string> compress(std::string_view body,
                                              const std::vector<std::size_t>& chunk_ends);

  void set_level(int level);
  int level() const { return level_; }
  // Which deflater serves the current level: "isa-l" or "zlib".
  std::string_view engine() const;
  // Of the last compress(): how many chunks were deflated and how many were reused.
  std::size_t chunks_compressed() const { return compressed_; }
  std::size_t chunks_reused() const { return reused_; }

 private:
  struct Chunk {
    std::size_t begin = 0;  // where its text is in the previous body
    std::size_t end = 0;
    std::string deflated;
    std::uint32_t crc = 0;
  };
  void deflate_chunk(std::string_view text, Chunk& chunk);
  bool use_isal() const;

  struct Stream;
  std::unique_ptr<Stream> stream_;
  int level_;
  std::string bodies_[2];
  int next_ = 0;  // bodies_[next_] is the next body, bodies_[1 - next_] the previous one
  std::vector<Chunk> chunks_;
  std::vector<unsigned char> scratch_;
  std::vector<std::size_t> ends_;
  std::shared_ptr<const std::string> last_;
  std::shared_ptr<std::string> spare_;  // the member before last_, reused when no response holds it
  std::size_t compressed_ = 0;
  std::size_t reused_ = 0;
};

}  // namespace rankstat::exposition
