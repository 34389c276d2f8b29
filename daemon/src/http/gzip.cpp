#include "http/gzip.hpp"

#define ZLIB_CONST
#include <zlib.h>

#ifdef RANKSTAT_HAVE_ISAL
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#endif

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace rankstat::http {
namespace {

// windowBits 15 (32 KiB window) + 16 selects the gzip wrapper instead of raw zlib (inflate only: the
// deflater writes raw deflate and GzipMember the wrapper).
constexpr int kGzipWindowBits = 15 + 16;
constexpr int kRawDeflateWindowBits = -15;
constexpr int kDeflateMemLevel = 8;
// zlib counts bytes in uInt (32 bits); larger buffers are fed in slices of this size.
constexpr std::size_t kMaxZlibSliceBytes = std::size_t{1} << 30;
constexpr std::size_t kInflateGrowthBytes = std::size_t{64} << 10;
// Room for incompressible input (stored blocks) plus the sync flush's empty stored block.
constexpr std::size_t kDeflateSlackBytes = 1024;
std::runtime_error zlib_failure(const char* operation, int rc, const char* zlib_message) {
  std::string text = "gzip: ";
  text += operation;
  text += " failed: ";
  text += zlib_message != nullptr ? zlib_message : zError(rc);
  return std::runtime_error(text);
}

const Bytef* as_zlib_input(const char* bytes) {
  return reinterpret_cast<const Bytef*>(bytes);
}
Bytef* as_zlib_output(char* bytes) {
  return reinterpret_cast<Bytef*>(bytes);
}

uInt slice_length(std::size_t remaining) {
  return static_cast<uInt>(std::min(remaining, kMaxZlibSliceBytes));
}

// Releases zlib's internal state on every exit path, including exceptions.
class InflateStream {
 public:
  InflateStream() {
    const int rc = inflateInit2(&stream_, kGzipWindowBits);
    if (rc != Z_OK) throw zlib_failure("inflateInit2", rc, stream_.msg);
  }
  ~InflateStream() { inflateEnd(&stream_); }
  InflateStream(const InflateStream&) = delete;
  InflateStream& operator=(const InflateStream&) = delete;
  z_stream* get() { return &stream_; }

 private:
  z_stream stream_{};
};

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Deflater

struct Deflater::Engines {
  z_stream zlib{};
  bool zlib_ready = false;
#ifdef RANKSTAT_HAVE_ISAL
  isal_zstream isal{};
  std::vector<std::uint8_t> isal_level_buffer = std::vector<std::uint8_t>(ISAL_DEF_LVL1_DEFAULT);
#endif
  Engines() = default;
  Engines(const Engines&) = delete;
  Engines& operator=(const Engines&) = delete;
  Engines(Engines&&) = delete;
  Engines& operator=(Engines&&) = delete;
  ~Engines() {
    if (zlib_ready) deflateEnd(&zlib);
  }
};

Deflater::Deflater(int level) : engines_(std::make_unique<Engines>()), level_(level) {
  if (!use_isal()) start_zlib(level);
}

Deflater::~Deflater() = default;

bool Deflater::use_isal() const {
#ifdef RANKSTAT_HAVE_ISAL
  return level_ == 1;
#else
  return false;
#endif
}

std::string_view Deflater::engine() const {
  return use_isal() ? "isa-l" : "zlib";
}

void Deflater::set_level(int level) {
  if (level == level_) return;
#ifdef RANKSTAT_HAVE_ISAL
  if (level == 1) {  // igzip's level 1 needs no setup beyond its level buffer
    level_ = level;
    return;
  }
#endif
  start_zlib(level);
  level_ = level;
}

void Deflater::start_zlib(int level) {
  // Checked first so that a refused level leaves the current stream as it was.
  if (level < Z_DEFAULT_COMPRESSION || level > Z_BEST_COMPRESSION) {
    throw std::runtime_error("gzip: invalid compression level " + std::to_string(level));
  }
  // A z_stream is initialised in place (zlib's state points back at it), never copied.
  if (engines_->zlib_ready) deflateEnd(&engines_->zlib);
  engines_->zlib = z_stream{};
  engines_->zlib_ready = false;
  // Raw deflate (negative window bits): GzipMember writes the header and trailer.
  const int rc = deflateInit2(&engines_->zlib, level, Z_DEFLATED, kRawDeflateWindowBits, kDeflateMemLevel,
                              Z_DEFAULT_STRATEGY);
  if (rc != Z_OK) throw zlib_failure("deflateInit2", rc, engines_->zlib.msg);
  engines_->zlib_ready = true;
}

void Deflater::deflate(std::string_view text, std::string& out) {
  out.clear();
  if (text.empty()) return;
  const std::size_t room = text.size() + text.size() / 8 + kDeflateSlackBytes;
  if (scratch_.size() < room) scratch_.resize(room);  // no clearing of new bytes on every piece
  // igzip takes 32-bit lengths; a piece over a gigabyte (never a scrape family) goes through zlib's slices.
  if (use_isal() && text.size() <= kMaxZlibSliceBytes) {
    deflate_isal(text, out);
  } else {
    if (!engines_->zlib_ready) start_zlib(level_);  // level 1, served by ISA-L until now
    deflate_zlib(text, out);
  }
}

void Deflater::deflate_zlib(std::string_view text, std::string& out) {
  z_stream& z = engines_->zlib;
  if (deflateReset(&z) != Z_OK) throw zlib_failure("deflateReset", Z_STREAM_ERROR, z.msg);
  std::size_t consumed = 0;
  std::size_t produced = 0;
  int flush = Z_NO_FLUSH;
  do {
    const uInt input_slice = slice_length(text.size() - consumed);
    z.next_in = as_zlib_input(text.data() + consumed);
    z.avail_in = input_slice;
    consumed += input_slice;
    flush = consumed == text.size() ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    // Done with this slice when zlib took all of it and left output space unused (a flush is complete).
    for (;;) {
      if (produced == scratch_.size()) scratch_.resize(scratch_.size() * 2);
      const uInt output_slice = slice_length(scratch_.size() - produced);
      z.next_out = scratch_.data() + produced;
      z.avail_out = output_slice;
      const int rc = ::deflate(&z, flush);
      produced += output_slice - z.avail_out;
      if (rc != Z_OK && rc != Z_BUF_ERROR) throw zlib_failure("deflate", rc, z.msg);
      if (z.avail_in == 0 && z.avail_out != 0) break;
    }
  } while (flush != Z_SYNC_FLUSH);
  out.assign(reinterpret_cast<const char*>(scratch_.data()), produced);
}

void Deflater::deflate_isal([[maybe_unused]] std::string_view text, [[maybe_unused]] std::string& out) {
#ifdef RANKSTAT_HAVE_ISAL
  isal_zstream& z = engines_->isal;
  isal_deflate_init(&z);  // a fresh stream per piece: no history shared with other pieces
  z.level = 1;
  z.level_buf = engines_->isal_level_buffer.data();
  z.level_buf_size = static_cast<std::uint32_t>(engines_->isal_level_buffer.size());
  z.flush = SYNC_FLUSH;
  z.end_of_stream = 0;
  z.gzip_flag = IGZIP_DEFLATE;
  // igzip does not write through next_in; its API just lacks the const.
  z.next_in = reinterpret_cast<std::uint8_t*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<std::uint32_t>(text.size());
  std::size_t produced = 0;
  for (;;) {
    z.next_out = scratch_.data() + produced;
    z.avail_out = static_cast<std::uint32_t>(std::min(scratch_.size() - produced, kMaxZlibSliceBytes));
    const std::size_t offered = z.avail_out;
    if (isal_deflate(&z) != COMP_OK) throw std::runtime_error("gzip: isal_deflate failed");
    produced += offered - z.avail_out;
    // Flushed once all input is taken and output space is left (or the stream waits for a header).
    if (z.avail_in == 0 && (z.avail_out != 0 || z.internal_state.state == ZSTATE_NEW_HDR)) break;
    if (produced == scratch_.size()) scratch_.resize(scratch_.size() * 2);
  }
  out.assign(reinterpret_cast<const char*>(scratch_.data()), produced);
#else
  throw std::logic_error("gzip: built without ISA-L");
#endif
}

// ---------------------------------------------------------------------------------------------------
// CRC-32 and the member framing

std::uint32_t gzip_crc32(std::string_view text) {
#ifdef RANKSTAT_HAVE_ISAL
  return crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(text.data()), text.size());
#else
  return static_cast<std::uint32_t>(crc32_z(0, as_zlib_input(text.data()), text.size()));
#endif
}

std::uint32_t gzip_crc32_combine(std::uint32_t first, std::uint32_t second, std::size_t second_length) {
  return static_cast<std::uint32_t>(crc32_combine(first, second, static_cast<z_off_t>(second_length)));
}

GzipMember::GzipMember(std::string& out, std::size_t reserve) : out_(out), crc_(gzip_crc32({})) {
  out_.clear();
  out_.reserve(reserve);
  // ID1 ID2, CM=8 (deflate), no flags, no mtime, XFL 0, OS 3 (Unix).
  static constexpr char kHeader[10] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, 0, 3};
  out_.append(kHeader, sizeof kHeader);
}

void GzipMember::append(std::string_view deflated, std::uint32_t crc, std::size_t text_length) {
  out_.append(deflated);
  crc_ = gzip_crc32_combine(crc_, crc, text_length);
  length_ += text_length;
}

void GzipMember::finish() {
  // An empty final block with fixed codes (BFINAL 1, BTYPE 01, end-of-block), then CRC-32 and ISIZE
  // (the length modulo 2^32), little-endian.
  out_.push_back('\x03');
  out_.push_back('\x00');
  const auto isize = static_cast<std::uint32_t>(length_ & 0xffffffffU);
  for (int shift = 0; shift < 32; shift += 8) out_.push_back(static_cast<char>((crc_ >> shift) & 0xffU));
  for (int shift = 0; shift < 32; shift += 8) out_.push_back(static_cast<char>((isize >> shift) & 0xffU));
}

std::string gzip_compress(std::string_view data, int level) {
  Deflater deflater(level);
  std::string deflated;
  deflater.deflate(data, deflated);
  std::string out;
  GzipMember member(out, deflated.size() + 20);
  member.append(deflated, gzip_crc32(data), data.size());
  member.finish();
  return out;
}

std::string gzip_decompress(std::string_view gzip_data, std::size_t max_output_bytes) {
  InflateStream inflater;
  z_stream* stream = inflater.get();

  std::string plain;
  std::size_t consumed = 0;
  std::size_t produced = 0;
  for (;;) {
    if (stream->avail_in == 0 && consumed < gzip_data.size()) {
      const uInt input_slice = slice_length(gzip_data.size() - consumed);
      stream->next_in = as_zlib_input(gzip_data.data() + consumed);
      stream->avail_in = input_slice;
      consumed += input_slice;
    }
    if (produced == plain.size()) {
      if (produced > max_output_bytes) {
        throw std::runtime_error("gzip: inflated data exceeds the limit of " +
                                 std::to_string(max_output_bytes) + " bytes");
      }
      // One byte beyond the limit is allowed so that "exactly at the limit" is not an error.
      const std::size_t capacity_limit =
          max_output_bytes == SIZE_MAX ? max_output_bytes : max_output_bytes + 1;
      plain.resize(std::min(capacity_limit, std::max(plain.size() * 2, kInflateGrowthBytes)));
    }
    const uInt output_slice = slice_length(plain.size() - produced);
    stream->next_out = as_zlib_output(plain.data() + produced);
    stream->avail_out = output_slice;
    const int rc = inflate(stream, Z_NO_FLUSH);
    produced += output_slice - stream->avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && stream->avail_in == 0 && consumed == gzip_data.size()) {
      throw std::runtime_error("gzip: truncated gzip stream");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) throw zlib_failure("inflate", rc, stream->msg);
  }
  if (produced > max_output_bytes) {
    throw std::runtime_error("gzip: inflated data exceeds the limit of " + std::to_string(max_output_bytes) +
                             " bytes");
  }
  if (stream->avail_in != 0 || consumed != gzip_data.size()) {
    throw std::runtime_error("gzip: trailing bytes after the gzip stream");
  }

  plain.resize(produced);
  return plain;
}

}  // namespace rankstat::http
