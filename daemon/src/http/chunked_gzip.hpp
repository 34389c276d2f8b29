#pragma once

// gzip of a body made of chunks (one per family of a scrape) that re-deflates only the chunks whose text
// changed since the previous body. Each chunk goes through the one Deflater (gzip.hpp) on its own; an
// unchanged chunk reuses its deflated bytes, so an unchanged family costs a memcmp instead of a deflate
// and an unchanged body costs nothing. The result is one ordinary gzip member (GzipMember) that any
// inflater (zlib, Go's compress/gzip) reads.
// Not thread-safe; keep one per producer of bodies.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "http/gzip.hpp"

namespace rankstat::http {

class ChunkedGzip {
 public:
  // Neighbouring chunks smaller than this are merged (compressed as one): each chunk is compressed on
  // its own, so tiny ones would lose the redundancy between families.
  static constexpr std::size_t kMinChunkBytes = std::size_t{64} * 1024;

  explicit ChunkedGzip(int level = kDefaultGzipLevel) : deflater_(level) {}

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

  // A new level starts over: no chunk is reused across levels.
  void set_level(int level);
  [[nodiscard]] int level() const { return deflater_.level(); }
  // Which deflater serves the current level: "isa-l" or "zlib".
  [[nodiscard]] std::string_view engine() const { return deflater_.engine(); }
  // Of the last compress(): how many chunks were deflated and how many were reused.
  [[nodiscard]] std::size_t chunks_compressed() const { return compressed_; }
  [[nodiscard]] std::size_t chunks_reused() const { return reused_; }

 private:
  struct Chunk {
    std::size_t begin = 0;  // where its text is in the previous body
    std::size_t end = 0;
    std::string deflated;
    std::uint32_t crc = 0;
  };
  // Merges small neighbours into ends_; throws std::invalid_argument when the boundaries do not cover
  // the body in order.
  void plan_chunks(const std::vector<std::size_t>& chunk_ends, std::size_t body_size);
  // Deflates the chunks whose text changed; true when every chunk was reused.
  bool update_chunks(const std::string& body, const std::string& previous);
  std::shared_ptr<const std::string> write_member();

  Deflater deflater_;
  std::string bodies_[2];
  int next_ = 0;  // bodies_[next_] is the next body, bodies_[1 - next_] the previous one
  std::vector<Chunk> chunks_;
  std::vector<std::size_t> ends_;
  std::shared_ptr<const std::string> last_;
  std::shared_ptr<std::string> spare_;  // the member before last_, reused when no response holds it
  std::size_t compressed_ = 0;
  std::size_t reused_ = 0;
};

}  // namespace rankstat::http
