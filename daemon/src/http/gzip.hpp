#pragma once

// gzip (RFC 1952) encoding of whole in-memory bodies with plain zlib.
// Pure functions: safe to call from any thread concurrently.

#include <cstddef>
#include <string>
#include <string_view>

namespace rankstat::http {

// Fast levels (1..3) are the right trade-off for scrape bodies: most of the size win for a
// fraction of the CPU of level 6+.
inline constexpr int kDefaultGzipLevel = 1;

// Guards decompression of untrusted input against "zip bombs".
inline constexpr std::size_t kDefaultMaxDecompressedBytes = std::size_t{1} << 30;

// Returns a complete gzip member holding `data`. `level` is a zlib level: 0..9 or -1 (zlib default).
// Throws std::runtime_error when zlib fails (e.g. an invalid level or out of memory).
std::string gzip_compress(std::string_view data, int level = kDefaultGzipLevel);

// Inverse of gzip_compress. Throws std::runtime_error when the input is not one complete gzip member
// (corrupt, truncated, or followed by trailing bytes) or inflates beyond `max_output_bytes`.
std::string gzip_decompress(std::string_view gzip_data,
                            std::size_t max_output_bytes = kDefaultMaxDecompressedBytes);

}  // namespace rankstat::http
