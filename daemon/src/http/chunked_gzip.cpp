#include "http/chunked_gzip.hpp"

#include <cstring>
#include <stdexcept>

namespace rankstat::http {

void ChunkedGzip::set_level(int level) {
  if (level == deflater_.level()) return;
  deflater_.set_level(level);
  chunks_.clear();
  last_.reset();
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

void ChunkedGzip::plan_chunks(const std::vector<std::size_t>& chunk_ends, std::size_t body_size) {
  ends_.clear();
  std::size_t begin = 0;
  for (const std::size_t end : chunk_ends) {
    if (end < begin || end > body_size) throw std::invalid_argument("gzip: chunk boundaries out of order");
    if (end - (ends_.empty() ? 0 : ends_.back()) >= kMinChunkBytes) ends_.push_back(end);
    begin = end;
  }
  if (begin != body_size) throw std::invalid_argument("gzip: chunks do not cover the body");
  if (ends_.empty() || ends_.back() != body_size) ends_.push_back(body_size);
}

bool ChunkedGzip::update_chunks(const std::string& body, const std::string& previous) {
  bool all_reused = chunks_.size() == ends_.size() && last_ != nullptr;
  if (chunks_.size() < ends_.size()) chunks_.resize(ends_.size());
  std::size_t begin = 0;
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
        chunk.crc = gzip_crc32(text);
        deflater_.deflate(text, chunk.deflated);
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
  return all_reused;
}

std::shared_ptr<const std::string> ChunkedGzip::compress(const std::vector<std::size_t>& chunk_ends) {
  const std::string& body = bodies_[next_];
  const std::string& previous = bodies_[1 - next_];
  compressed_ = 0;
  reused_ = 0;
  plan_chunks(chunk_ends, body.size());
  const bool all_reused = update_chunks(body, previous);
  next_ = 1 - next_;  // this body becomes the previous one
  if (all_reused) return last_;
  return write_member();
}

std::shared_ptr<const std::string> ChunkedGzip::write_member() {
  std::size_t deflated_bytes = 0;
  for (const Chunk& c : chunks_) deflated_bytes += c.deflated.size();
  // The previous member's storage is reused once no response holds it any more.
  std::shared_ptr<std::string> out = std::move(spare_);
  if (out == nullptr || out.use_count() != 1) out = std::make_shared<std::string>();
  GzipMember member(*out, deflated_bytes + 20);
  for (const Chunk& c : chunks_) member.append(c.deflated, c.crc, c.end - c.begin);
  member.finish();
  spare_ = std::const_pointer_cast<std::string>(std::move(last_));
  last_ = out;
  return last_;
}

}  // namespace rankstat::http
