#include "http/session.hpp"

#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <spdlog/spdlog.h>

#include <type_traits>
#include <utility>

#include "http/accept_loop.hpp"
#include "http/outgoing_response.hpp"
#include "http/request_reader.hpp"

namespace rankstat::http::detail {

namespace asio = boost::asio;

namespace {

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

template <typename Stream>
Stream make_stream(tcp::socket socket, asio::ssl::context* tls) {
  if constexpr (std::is_same_v<Stream, TlsStream>) {
    return Stream(std::move(socket), *tls);
  } else {
    (void)tls;
    return Stream(std::move(socket));
  }
}

// Stream is beast::tcp_stream (plain HTTP) or TlsStream; a TLS session handshakes first, under the header
// deadline, so that a client that never finishes its handshake holds its slot no longer than a silent one.
template <typename Stream>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
  using Phase = ConnectionPhase::Phase;

 public:
  Session(std::shared_ptr<ServerCore> server, tcp::socket socket, asio::ip::address peer,
          std::shared_ptr<asio::ssl::context> tls)
      : server_(std::move(server)),
        tls_(std::move(tls)),
        stream_(make_stream<Stream>(std::move(socket), tls_.get())),
        reader_(stream_, *server_, phase_),
        response_(server_->options().gzip_level),
        peer_(std::move(peer)) {
    server_->add_session(this, peer_);
  }
  ~Session() override { server_->remove_session(this, peer_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() {
    // The first request's deadlines run from accept, so a silent connection is cut off too.
    phase_.since = std::chrono::steady_clock::now();
    lowest().expires_at(header_deadline(phase_.since, server_->options()));
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      stream_.async_handshake(
          asio::ssl::stream_base::server,
          [self = this->shared_from_this()](const error_code& ec) { self->on_handshake(ec); });
    } else {
      read_next();
    }
  }

  std::optional<int> eviction_rank() const override { return phase_.eviction_rank(); }
  std::chrono::steady_clock::time_point phase_since() const override { return phase_.since; }

  // Closes at once and leaves the server's accounting now, so that the slot is free for the newcomer
  // before the aborted operations complete.
  void evict() override {
    lowest().close();
    server_->remove_session(this, peer_);
  }

  void on_server_stop() override {
    // Only connections waiting for a new request are closed; the others finish their exchange and
    // then close because the response carries "Connection: close".
    if (phase_.phase == Phase::kAwaitingRequest) lowest().close();
  }

  void force_close() override { lowest().close(); }

 private:
  // The TCP layer: deadlines, close and shutdown always act on it.
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  void on_handshake(const error_code& ec) {
    if (ec) {
      CounterCells::add_one(server_->counters().tls_handshake_failures_total);
      if (ec == beast::error::timeout) CounterCells::add_one(server_->counters().header_timeouts_total);
      spdlog::debug("TLS handshake failed: {}", ec.message());
      lowest().close();
      return;
    }
    read_next();
  }

  void read_next() {
    reader_.read_next([self = this->shared_from_this()](const error_code& ec) { self->on_request(ec); });
  }

  void on_request(const error_code& ec) {
    if (ec) {
      on_read_failure(ec);
      return;
    }
    if (server_->torn_down()) {
      lowest().close();
      return;
    }
    CounterCells::add_one(server_->counters().requests_total);
    const auto& message = reader_.request();
    const bool keep_alive = message.keep_alive() && !server_->stopping();
    const unsigned version = message.version() == 10 ? 10U : 11U;
    const bhttp::verb method = message.method();
    if (method != bhttp::verb::get && method != bhttp::verb::head) {
      response_.prepare_plain(bhttp::status::method_not_allowed, "method not allowed\n", version, keep_alive);
      response_.message().set(bhttp::field::allow, "GET, HEAD");
      send();
      return;
    }
    const Request request = request_from(message);
    reader_.release_request();  // the request is copied out; free its memory before the handler runs

    phase_.phase = Phase::kHandling;
    answer(response_, *server_, request, version, keep_alive, method == bhttp::verb::head);
    send();
  }

  void on_read_failure(const error_code& ec) {
    const std::optional<Rejection> rejection = rejection_for(ec);
    if (!rejection) {
      spdlog::debug("HTTP connection closed while reading a request: {}", ec.message());
      lowest().close();
      return;
    }
    CounterCells::add_one(server_->counters().bad_requests_total);
    spdlog::debug("HTTP request rejected with {}", static_cast<unsigned>(rejection->status));
    response_.prepare_plain(rejection->status, rejection->body, 11, false);
    send();
  }

  void send() {
    phase_.phase = Phase::kWriting;
    lowest().expires_after(server_->options().write_timeout);
    bhttp::async_write(stream_, response_.message(),
                       [self = this->shared_from_this()](
                           const error_code& ec, std::size_t /*bytes_written*/) { self->on_written(ec); });
  }

  void on_written(const error_code& ec) {
    // Beast reports end_of_stream after a complete response that announced "Connection: close".
    const bool must_close = !response_.message().keep_alive() || ec == bhttp::error::end_of_stream;
    response_.release();
    if (ec && ec != bhttp::error::end_of_stream) {
      spdlog::debug("HTTP response write failed: {}", ec.message());
      lowest().close();
      return;
    }
    if (must_close || server_->stopping()) {
      reader_.linger_then_close(this->shared_from_this());
      return;
    }
    read_next();
  }

  std::shared_ptr<ServerCore> server_;
  std::shared_ptr<asio::ssl::context> tls_;  // null for plain HTTP; outlives stream_, which refers to it
  Stream stream_;
  ConnectionPhase phase_;
  RequestReader<Stream> reader_;  // refers to stream_ and phase_
  OutgoingResponse response_;
  asio::ip::address peer_;  // peer_of() the remote address: what max_connections_per_peer counts
};

}  // namespace

void start_session(std::shared_ptr<ServerCore> server, tcp::socket socket, asio::ip::address peer,
                   std::shared_ptr<asio::ssl::context> tls) {
  if (tls != nullptr) {
    std::make_shared<Session<TlsStream>>(std::move(server), std::move(socket), std::move(peer),
                                         std::move(tls))
        ->start();
  } else {
    std::make_shared<Session<beast::tcp_stream>>(std::move(server), std::move(socket), std::move(peer),
                                                 nullptr)
        ->start();
  }
}

}  // namespace rankstat::http::detail
