#include "http/gzip.hpp"

#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace rankstat::http {
namespace {

// windowBits 15 (32 KiB window) + 16 selects the gzip wrapper instead of raw zlib.
constexpr int kGzipWindowBits = 15 + 16;
constexpr int kDeflateMemLevel = 8;
// zlib counts bytes in uInt (32 bits); larger buffers are fed in slices of this size.
constexpr std::size_t kMaxZlibSliceBytes = std::size_t{1} << 30;
constexpr std::size_t kInflateGrowthBytes = std::size_t{64} << 10;

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
class DeflateStream {
 public:
  explicit DeflateStream(int level) {
    const int rc =
        deflateInit2(&stream_, level, Z_DEFLATED, kGzipWindowBits, kDeflateMemLevel, Z_DEFAULT_STRATEGY);
    if (rc != Z_OK) throw zlib_failure("deflateInit2", rc, stream_.msg);
  }
  ~DeflateStream() { deflateEnd(&stream_); }
  DeflateStream(const DeflateStream&) = delete;
  DeflateStream& operator=(const DeflateStream&) = delete;
  z_stream* get() { return &stream_; }

 private:
  z_stream stream_{};
};

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

std::string gzip_compress(std::string_view data, int level) {
  DeflateStream deflater(level);
  z_stream* stream = deflater.get();

  // deflateBound is exact enough that a single slice normally finishes in one deflate() call.
  std::string compressed(deflateBound(stream, static_cast<uLong>(std::min(data.size(), kMaxZlibSliceBytes))),
                         '\0');
  std::size_t consumed = 0;
  std::size_t produced = 0;
  int flush = Z_NO_FLUSH;
  int rc = Z_OK;
  do {
    const uInt input_slice = slice_length(data.size() - consumed);
    stream->next_in = as_zlib_input(data.data() + consumed);
    stream->avail_in = input_slice;
    consumed += input_slice;
    flush = consumed == data.size() ? Z_FINISH : Z_NO_FLUSH;
    // Loop until zlib leaves output space unused: only then has it taken all of this slice.
    do {
      if (produced == compressed.size()) compressed.resize(compressed.size() * 2);
      const uInt output_slice = slice_length(compressed.size() - produced);
      stream->next_out = as_zlib_output(compressed.data() + produced);
      stream->avail_out = output_slice;
      rc = deflate(stream, flush);
      if (rc == Z_STREAM_ERROR) throw zlib_failure("deflate", rc, stream->msg);
      produced += output_slice - stream->avail_out;
    } while (stream->avail_out == 0);
  } while (flush != Z_FINISH);
  if (rc != Z_STREAM_END) throw zlib_failure("deflate", rc, stream->msg);

  compressed.resize(produced);
  return compressed;
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
