#pragma once

// Reading a connection's requests: ConnectionPhase (where the exchange is, what eviction ranks it by)
// and RequestReader (one request at a time within the header and body limits, under the idle, header
// and whole-request deadlines; after the last response, lingering). Internal to rankstat_http: only
// session.cpp includes it. Everything runs on the io thread.

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "http/accept_loop.hpp"
#include "http/http_server.hpp"

namespace rankstat::http::detail {

namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = boost::asio::ip::tcp;
using boost::system::error_code;

// Read-buffer headroom beyond header+body limits for chunk framing and the next pipelined request.
inline constexpr std::size_t kReadBufferSlackBytes = 4096;
inline constexpr std::size_t kMaxReadChunkBytes = 16384;
// After an error response the peer gets this long (at most) to stop sending before we close, so
// that unread input does not turn our close into a RST that destroys the response in flight.
inline constexpr std::chrono::milliseconds kMaxLingerTime{1000};
inline constexpr std::size_t kMaxLingerBytes = 65536;

inline std::chrono::steady_clock::time_point header_deadline(std::chrono::steady_clock::time_point started,
                                                             const ServerOptions& options) {
  return started + std::min(options.header_timeout, options.read_timeout);
}

inline std::size_t read_buffer_limit(const ServerOptions& options) {
  const std::uint64_t headroom = std::uint64_t{options.max_header_bytes} + kReadBufferSlackBytes;
  const std::uint64_t limit =
      options.max_body_bytes > UINT64_MAX - headroom ? UINT64_MAX : options.max_body_bytes + headroom;
  return static_cast<std::size_t>(std::min<std::uint64_t>(limit, SIZE_MAX));
}

// Where a connection is in its exchange and since when: what eviction ranks it by.
struct ConnectionPhase {
  enum class Phase { kAwaitingRequest, kReadingHeader, kReadingBody, kHandling, kWriting, kLingering };

  // What evicting this connection would cost, lower first: 0 finished (lingering after its last
  // response), 1 idle between requests, 2 still reading request headers (or not yet sent its first
  // request), 3 reading a request body;
  // nullopt while handling or writing a response, which is never interrupted.
  [[nodiscard]] std::optional<int> eviction_rank() const {
    switch (phase) {
      case Phase::kLingering:
        return 0;
      case Phase::kAwaitingRequest:
        // A connection whose first request has not arrived yet is a newcomer, not an idle client: it
        // ranks with the header readers (oldest first), so a flood of newcomers cannot evict a scraper
        // that has just connected.
        return first_request ? 2 : 1;
      case Phase::kReadingHeader:
        return 2;
      case Phase::kReadingBody:
        return 3;
      case Phase::kHandling:
      case Phase::kWriting:
        return std::nullopt;
    }
    return std::nullopt;
  }

  Phase phase = Phase::kAwaitingRequest;
  // When the current phase began: among equally ranked connections, the one idle longest or reading
  // its request longest (the slowest) goes first.
  std::chrono::steady_clock::time_point since;
  std::chrono::steady_clock::time_point request_deadline;
  bool first_request = true;
};

// Reads a connection's requests one at a time, within the header and body limits and under the idle,
// header and whole-request deadlines; after the last response, discards what the peer still sends.
// Completion handlers own the session, which owns this reader, so `this` outlives every operation.
template <typename Stream>
class RequestReader {
  using Phase = ConnectionPhase::Phase;

 public:
  RequestReader(Stream& stream, ServerCore& server, ConnectionPhase& phase)
      : stream_(stream),
        server_(server),
        phase_(phase),
        buffer_(read_buffer_limit(server.options())),
        read_chunk_bytes_(std::min(kMaxReadChunkBytes, buffer_.max_size())) {}

  // Waits for the first byte of the next request under the idle timeout, so that the (shorter)
  // header and whole-request deadlines only start once the client actually sends something. Calls
  // done(ec) once the request is read or reading it failed; a connection closed before its request
  // starts is closed here and done is dropped.
  template <typename Done>
  void read_next(Done done) {
    if (buffer_.size() > 0) {  // a pipelined request is already buffered
      read_request(std::move(done));
      return;
    }
    phase_.phase = Phase::kAwaitingRequest;
    if (!phase_.first_request) {
      phase_.since = std::chrono::steady_clock::now();
      lowest().expires_after(server_.options().idle_keepalive_timeout);
    }
    stream_.async_read_some(
        buffer_.prepare(read_chunk_bytes_),
        [this, done = std::move(done)](const error_code& ec, std::size_t bytes_read) mutable {
          on_request_started(ec, bytes_read, std::move(done));
        });
  }

  [[nodiscard]] const bhttp::request<bhttp::string_body>& request() const { return parser_->get(); }
  // A parser serves one request; frees its memory once the request is copied out.
  void release_request() { parser_.reset(); }

  // Half-closes, then discards input until the peer closes or a short deadline passes.
  template <typename KeepAlive>
  void linger_then_close(KeepAlive keep_alive) {
    phase_.phase = Phase::kLingering;
    error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    lowest().expires_after(
        std::min<std::chrono::milliseconds>(kMaxLingerTime, server_.options().read_timeout));
    buffer_.clear();
    lingered_bytes_ = 0;
    discard_input(std::move(keep_alive));
  }

 private:
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  template <typename Done>
  void on_request_started(const error_code& ec, std::size_t bytes_read, Done done) {
    // A connection's first request runs under the header deadline from accept: a silent client counts.
    if (ec == beast::error::timeout && phase_.first_request) {
      CounterCells::add_one(server_.counters().header_timeouts_total);
    }
    if (ec || server_.stopping()) {  // peer closed, idle timeout, or server stopping
      lowest().close();
      return;
    }
    buffer_.commit(bytes_read);
    read_request(std::move(done));
  }

  // Headers first, under the header deadline; then the body, if any, under what is left of the
  // whole-request deadline. Both run from the request's first byte (from accept for the first request).
  template <typename Done>
  void read_request(Done done) {
    const auto started = phase_.first_request ? phase_.since : std::chrono::steady_clock::now();
    phase_.first_request = false;
    phase_.request_deadline = started + server_.options().read_timeout;
    lowest().expires_at(header_deadline(started, server_.options()));
    phase_.phase = Phase::kReadingHeader;
    phase_.since = started;
    parser_.emplace();
    parser_->header_limit(server_.options().max_header_bytes);
    parser_->body_limit(server_.options().max_body_bytes);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [this, done = std::move(done)](const error_code& ec, std::size_t /*bytes_read*/) mutable {
          on_header(ec, std::move(done));
        });
  }

  template <typename Done>
  void on_header(const error_code& ec, Done done) {
    if (ec == beast::error::timeout) {
      CounterCells::add_one(server_.counters().header_timeouts_total);
      spdlog::debug("HTTP connection closed: request headers incomplete after the header timeout");
    }
    if (ec || parser_->is_done()) {
      done(ec);
      return;
    }
    phase_.phase = Phase::kReadingBody;
    phase_.since = std::chrono::steady_clock::now();
    lowest().expires_at(phase_.request_deadline);
    bhttp::async_read(stream_, buffer_, *parser_,
                      [done = std::move(done)](const error_code& read_error,
                                               std::size_t /*bytes_read*/) mutable { done(read_error); });
  }

  template <typename KeepAlive>
  void discard_input(KeepAlive keep_alive) {
    stream_.async_read_some(
        buffer_.prepare(read_chunk_bytes_),
        [this, keep_alive = std::move(keep_alive)](const error_code& ec, std::size_t bytes_read) mutable {
          lingered_bytes_ += bytes_read;
          if (ec || lingered_bytes_ > kMaxLingerBytes) {
            lowest().close();
            return;
          }
          discard_input(std::move(keep_alive));
        });
  }

  Stream& stream_;
  ServerCore& server_;  // the session holds the owning reference
  ConnectionPhase& phase_;
  beast::flat_buffer buffer_;  // bounded: a client can never make us buffer more than the limits
  std::size_t read_chunk_bytes_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::size_t lingered_bytes_ = 0;
};

}  // namespace rankstat::http::detail
