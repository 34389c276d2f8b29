#pragma once

// gzip (RFC 1952) for rankstatd's responses: the one deflater every gzip body goes through (a whole
// body here, the scrape's family chunks in chunked_gzip.hpp), and the inflater the tests and the CLI use.
//
// Level 1 (the default) deflates with ISA-L's igzip when the build found libisal (several times faster
// than zlib's level 1, with a slightly better ratio); other levels, or no ISA-L, use zlib.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rankstat::http {

// Fast levels (1..3) are the right trade-off for scrape bodies: most of the size win for a
// fraction of the CPU of level 6+.
inline constexpr int kDefaultGzipLevel = 1;

// Guards decompression of untrusted input against "zip bombs".
inline constexpr std::size_t kDefaultMaxDecompressedBytes = std::size_t{1} << 30;

// Raw deflate of independent pieces of text. Each piece is compressed with no history from earlier
// ones and ends with a sync flush (byte aligned, not final), so pieces can be concatenated, in any
// combination, into one deflate stream that a final empty block closes (GzipMember does). Not
// thread-safe: one per thread or per producer of bodies.
class Deflater {
 public:
  // `level` is a zlib level: 0..9 or -1 (zlib's default). Throws std::runtime_error for an invalid one.
  explicit Deflater(int level = kDefaultGzipLevel);
  ~Deflater();
  Deflater(const Deflater&) = delete;
  Deflater& operator=(const Deflater&) = delete;
  Deflater(Deflater&&) = delete;
  Deflater& operator=(Deflater&&) = delete;

  // Same contract as the constructor; keeps the current level if the new one is refused.
  void set_level(int level);
  [[nodiscard]] int level() const { return level_; }
  // Which deflater serves the current level: "isa-l" or "zlib".
  [[nodiscard]] std::string_view engine() const;

  // Replaces `out` with `text` deflated (empty text: empty output). Throws std::runtime_error if the
  // deflater fails.
  void deflate(std::string_view text, std::string& out);

 private:
  [[nodiscard]] bool use_isal() const;
  void start_zlib(int level);
  void deflate_zlib(std::string_view text, std::string& out);
  void deflate_isal(std::string_view text, std::string& out);

  struct Engines;
  std::unique_ptr<Engines> engines_;
  int level_;
  std::vector<unsigned char> scratch_;  // grows to the largest piece's output; never shrinks
};

// CRC-32 as gzip's trailer wants it, and the CRC of two concatenated pieces from theirs.
std::uint32_t gzip_crc32(std::string_view text);
std::uint32_t gzip_crc32_combine(std::uint32_t first, std::uint32_t second, std::size_t second_length);

// Frames deflated pieces (Deflater::deflate) as one gzip member: header, the pieces, an empty final
// block, CRC-32 and length of the uncompressed text.
class GzipMember {
 public:
  // Starts `out` over with the header; `reserve` is the expected total size.
  GzipMember(std::string& out, std::size_t reserve);
  // A piece's deflate bytes, with the CRC-32 and length of the text they hold.
  void append(std::string_view deflated, std::uint32_t crc, std::size_t text_length);
  void finish();

 private:
  std::string& out_;
  std::uint32_t crc_;
  std::uint64_t length_ = 0;
};

// Returns a complete gzip member holding `data`. `level` as for Deflater.
// Throws std::runtime_error when the deflater fails (e.g. an invalid level or out of memory).
std::string gzip_compress(std::string_view data, int level = kDefaultGzipLevel);

// Inverse of gzip_compress. Throws std::runtime_error when the input is not one complete gzip member
// (corrupt, truncated, or followed by trailing bytes) or inflates beyond `max_output_bytes`.
std::string gzip_decompress(std::string_view gzip_data,
                            std::size_t max_output_bytes = kDefaultMaxDecompressedBytes);

}  // namespace rankstat::http
