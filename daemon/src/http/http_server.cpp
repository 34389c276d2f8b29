#include "http/http_server.hpp"

#include "http/gzip.hpp"
#include "rankstat/flags/host_port.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/span.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/span_body.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <unordered_set>

namespace rankstat::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// ---------------------------------------------------------------------------------------------
// Accept-Encoding negotiation (RFC 9110 section 12.5.3)

namespace {

constexpr bool is_optional_whitespace(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim_optional_whitespace(std::string_view text) {
  while (!text.empty() && is_optional_whitespace(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_optional_whitespace(text.back())) text.remove_suffix(1);
  return text;
}

constexpr char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

// Splits off the text before the first `separator`; `rest` keeps what follows it.
std::string_view take_until(std::string_view& rest, char separator) {
  const std::size_t position = rest.find(separator);
  const std::string_view head = rest.substr(0, position);
  rest = position == std::string_view::npos ? std::string_view{} : rest.substr(position + 1);
  return head;
}

enum class QValue { kZero, kPositive, kMalformed };

// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ); extra fraction digits are tolerated
// because some clients send them.
QValue parse_qvalue(std::string_view text) {
  if (text.empty() || (text.front() != '0' && text.front() != '1')) return QValue::kMalformed;
  const bool leading_one = text.front() == '1';
  std::string_view fraction = text.substr(1);
  if (!fraction.empty()) {
    if (fraction.front() != '.') return QValue::kMalformed;
    fraction.remove_prefix(1);
  }
  bool nonzero_fraction = false;
  for (const char digit : fraction) {
    if (digit < '0' || digit > '9') return QValue::kMalformed;
    nonzero_fraction = nonzero_fraction || digit != '0';
  }
  if (leading_one) return nonzero_fraction ? QValue::kMalformed : QValue::kPositive;
  return nonzero_fraction ? QValue::kPositive : QValue::kZero;
}

}  // namespace

bool accepts_gzip(std::string_view accept_encoding) {
  std::optional<bool> gzip_acceptable;      // from explicit "gzip"/"x-gzip" entries
  std::optional<bool> wildcard_acceptable;  // from "*" entries
  std::string_view remaining = accept_encoding;
  while (!remaining.empty()) {
    std::string_view parameters = take_until(remaining, ',');
    const std::string_view coding = trim_optional_whitespace(take_until(parameters, ';'));
    if (coding.empty()) continue;

    bool acceptable = true;  // an absent q means q=1
    bool malformed = false;
    while (!parameters.empty()) {
      std::string_view value = take_until(parameters, ';');
      const std::string_view name = trim_optional_whitespace(take_until(value, '='));
      if (!equals_ignoring_case(name, "q")) continue;
      const QValue q = parse_qvalue(trim_optional_whitespace(value));
      malformed = q == QValue::kMalformed;
      acceptable = q == QValue::kPositive;
    }
    if (malformed) continue;

    if (equals_ignoring_case(coding, "gzip") || equals_ignoring_case(coding, "x-gzip")) {
      gzip_acceptable = gzip_acceptable.value_or(true) && acceptable;
    } else if (coding == "*") {
      wildcard_acceptable = wildcard_acceptable.value_or(false) || acceptable;
    }
  }
  if (gzip_acceptable.has_value()) return *gzip_acceptable;
  return wildcard_acceptable.value_or(false);
}

// ---------------------------------------------------------------------------------------------
// Listen address parsing and binding

namespace {

std::runtime_error invalid_listen_address(const std::string& address, std::string_view reason) {
  return std::runtime_error("invalid listen address '" + address + "': " + std::string(reason));
}

// The shared host:port grammar; an empty host means all interfaces, port 0 any free port.
flags::HostPort parse_listen_address(const std::string& address) {
  flags::HostPortParse parsed =
      flags::parse_host_port(address, {.allow_scheme = false, .allow_port_zero = true});
  if (!parsed.value) throw invalid_listen_address(address, parsed.error);
  return *parsed.value;
}

void open_listener(tcp::acceptor& acceptor, const tcp::endpoint& endpoint, bool dual_stack, error_code& ec) {
  acceptor.open(endpoint.protocol(), ec);
  if (ec) return;
  // Lets a restarted daemon rebind while old connections sit in TIME_WAIT.
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (ec) return;
  if (dual_stack) {
    error_code ignored;  // IPv4-mapped addresses are a bonus; IPv6-only kernels still work
    acceptor.set_option(asio::ip::v6_only(false), ignored);
  }
  acceptor.bind(endpoint, ec);
  if (ec) return;
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
}

void bind_listener(tcp::acceptor& acceptor, asio::io_context& io, const std::string& address) {
  const flags::HostPort spec = parse_listen_address(address);
  const auto fail = [&address](const error_code& ec) {
    return std::runtime_error("cannot listen on '" + address + "': " + ec.message());
  };
  error_code ec;

  if (spec.host.empty()) {
    // "All interfaces": one dual-stack IPv6 socket, falling back to IPv4 where IPv6 is disabled.
    open_listener(acceptor, tcp::endpoint(tcp::v6(), spec.port), true, ec);
    if (ec == boost::system::errc::address_family_not_supported ||
        ec == boost::system::errc::address_not_available) {
      error_code ignored;
      acceptor.close(ignored);
      ec.clear();
      open_listener(acceptor, tcp::endpoint(tcp::v4(), spec.port), false, ec);
    }
    if (ec) throw fail(ec);
    return;
  }

  tcp::endpoint endpoint;
  const asio::ip::address literal = asio::ip::make_address(spec.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(literal, spec.port);
  } else {
    // Blocking name resolution is acceptable here: the constructor runs once, at startup.
    tcp::resolver resolver(io);
    const auto results = resolver.resolve(spec.host, spec.port_text(),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      throw std::runtime_error("cannot listen on '" + address + "': cannot resolve host '" + spec.host +
                               "': " + (ec ? ec.message() : std::string("no addresses")));
    }
    endpoint = results.begin()->endpoint();
  }
  open_listener(acceptor, endpoint, false, ec);
  if (ec) throw fail(ec);
}

// Takes over a listening socket someone else opened (systemd socket activation).
void adopt_listener(tcp::acceptor& acceptor, int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("cannot use inherited socket " + std::to_string(fd) + ": " +
                             std::system_category().message(errno));
  }
  if (address.ss_family != AF_INET && address.ss_family != AF_INET6) {
    throw std::runtime_error("inherited socket " + std::to_string(fd) + " is not an IPv4 or IPv6 socket");
  }
  error_code ec;
  acceptor.assign(address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) throw std::runtime_error("cannot use inherited socket " + std::to_string(fd) + ": " + ec.message());
}

std::string format_endpoint(const tcp::endpoint& endpoint) {
  const std::string host = endpoint.address().to_string();
  const std::string port = std::to_string(endpoint.port());
  return endpoint.address().is_v6() ? "[" + host + "]:" + port : host + ":" + port;
}

// Handlers may echo attacker-controlled targets; keep log lines bounded.
std::string_view loggable(std::string_view text) {
  constexpr std::size_t kMaxLoggedChars = 200;
  return text.substr(0, kMaxLoggedChars);
}

std::string refusal_response(std::string_view body) {
  return "HTTP/1.1 503 Service Unavailable\r\nServer: rankstatd\r\n"
         "Content-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\nConnection: close\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

// Sent with a non-blocking write to refused connections: a fresh socket's send buffer is empty, so
// this never blocks and needs no per-connection state.
const std::string& overload_response() {
  static const std::string response = refusal_response("too many open connections\n");
  return response;
}
const std::string& peer_limit_response() {
  static const std::string response = refusal_response("too many open connections from your address\n");
  return response;
}

// The address that max_connections_per_peer counts against. An IPv4 client of a dual-stack listener
// arrives IPv4-mapped and counts as its IPv4 address; an IPv6 client counts as its /64, since anyone
// with one IPv6 address usually has the whole /64 to pick from.
asio::ip::address peer_of(const asio::ip::address& address) {
  if (!address.is_v6()) return address;
  const asio::ip::address_v6 v6 = address.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6);
  asio::ip::address_v6::bytes_type bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return asio::ip::address_v6(bytes);
}

// A list-valued field may arrive split over several header lines; RFC 9110 defines them as one
// comma-separated list.
template <typename Message>
std::string joined_values(const Message& message, bhttp::field field) {
  std::string joined;
  const auto [first, last] = message.equal_range(field);
  for (auto it = first; it != last; ++it) {
    if (!joined.empty()) joined += ", ";
    joined.append(it->value());
  }
  return joined;
}

constexpr std::string_view kServerName = "rankstatd";
constexpr std::string_view kPlainTextType = "text/plain; charset=utf-8";
// Read-buffer headroom beyond header+body limits for chunk framing and the next pipelined request.
constexpr std::size_t kReadBufferSlackBytes = 4096;
constexpr std::size_t kMaxReadChunkBytes = 16384;
// After an error response the peer gets this long (at most) to stop sending before we close, so
// that unread input does not turn our close into a RST that destroys the response in flight.
constexpr std::chrono::milliseconds kMaxLingerTime{1000};
constexpr std::size_t kMaxLingerBytes = 65536;
constexpr std::chrono::milliseconds kAcceptRetryDelay{100};

// What the server needs of a connection, whatever its stream (plain TCP or TLS).
class SessionBase {
 public:
  SessionBase() = default;
  SessionBase(const SessionBase&) = delete;
  SessionBase& operator=(const SessionBase&) = delete;
  virtual ~SessionBase() = default;
  // What evicting this connection would cost, lower first; nullopt: never evicted (see ConnectionPhase).
  [[nodiscard]] virtual std::optional<int> eviction_rank() const = 0;
  [[nodiscard]] virtual std::chrono::steady_clock::time_point phase_since() const = 0;
  virtual void evict() = 0;
  virtual void on_server_stop() = 0;
  virtual void force_close() = 0;
};

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// One listening socket with its accept-retry timer.
struct Listener {
  explicit Listener(asio::io_context& io) : acceptor(io), retry_timer(io) {}
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  tcp::endpoint endpoint;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// detail::ServerCore: listener plus the state shared with every connection. Lives as long as the Server
// or any connection; touched only on the io thread except for the atomic counters.

namespace detail {

class ServerCore : public std::enable_shared_from_this<ServerCore> {
 public:
  ServerCore(asio::io_context& io, ServerOptions options, Handler handler)
      : options_(std::move(options)), handler_(std::move(handler)), tls_(options_.tls) {
    if (!handler_) throw std::invalid_argument("HTTP server needs a request handler");
    if (!options_.listener_fds.empty()) {
      for (const int fd : options_.listener_fds) {
        auto listener = std::make_unique<Listener>(io);
        adopt_listener(listener->acceptor, fd);
        listener->endpoint = listener->acceptor.local_endpoint();
        listeners_.push_back(std::move(listener));
      }
    } else {
      if (options_.listen_addresses.empty())
        throw std::invalid_argument("HTTP server needs a listen address");
      for (const std::string& address : options_.listen_addresses) {
        auto listener = std::make_unique<Listener>(io);
        bind_listener(listener->acceptor, io, address);
        listener->endpoint = listener->acceptor.local_endpoint();
        listeners_.push_back(std::move(listener));
      }
    }
  }

  void start() {
    if (started_ || stopping_) return;
    started_ = true;
    for (const auto& listener : listeners_) {
      spdlog::debug("HTTP server accepting on {}{}", format_endpoint(listener->endpoint),
                    tls_ ? " (TLS)" : "");
      accept_next(*listener);
    }
  }

  void set_tls_context(std::shared_ptr<asio::ssl::context> tls) {
    if (tls_ == nullptr || tls == nullptr) {
      throw std::invalid_argument("HTTP and HTTPS cannot be switched while the server runs");
    }
    tls_ = std::move(tls);
  }
  bool serves_tls() const { return tls_ != nullptr; }

  void stop();
  // Server destroyed: close everything and never call the handler again.
  void tear_down();

  const ServerOptions& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  bool stopping() const { return stopping_; }
  bool torn_down() const { return torn_down_; }
  const tcp::endpoint& bound_endpoint() const { return listeners_.front()->endpoint; }
  std::vector<std::string> bound_addresses() const {
    std::vector<std::string> addresses;
    for (const auto& listener : listeners_) addresses.push_back(format_endpoint(listener->endpoint));
    return addresses;
  }

  void add_session(SessionBase* session, const asio::ip::address& peer) {
    sessions_.insert(session);
    ++connections_per_peer_[peer];
    active_connections_.store(sessions_.size(), std::memory_order_relaxed);
  }
  // Idempotent: an evicted session leaves at eviction and again (a no-op) when it is destroyed.
  void remove_session(SessionBase* session, const asio::ip::address& peer) {
    if (sessions_.erase(session) == 0) return;
    const auto count = connections_per_peer_.find(peer);
    if (count != connections_per_peer_.end() && --count->second == 0) connections_per_peer_.erase(count);
    active_connections_.store(sessions_.size(), std::memory_order_relaxed);
  }

  void count_request() { requests_total_.fetch_add(1, std::memory_order_relaxed); }
  void count_bad_request() { bad_requests_total_.fetch_add(1, std::memory_order_relaxed); }
  void count_header_timeout() { header_timeouts_total_.fetch_add(1, std::memory_order_relaxed); }
  void count_tls_handshake_failure() {
    tls_handshake_failures_total_.fetch_add(1, std::memory_order_relaxed);
  }

  // Relaxed: the counters are independent monotonic statistics, not synchronisation.
  std::atomic<std::uint64_t> requests_total_{0};
  std::atomic<std::uint64_t> connections_rejected_total_{0};
  std::atomic<std::uint64_t> connections_refused_per_peer_total_{0};
  std::atomic<std::uint64_t> evicted_idle_total_{0};
  std::atomic<std::uint64_t> evicted_reading_headers_total_{0};
  std::atomic<std::uint64_t> evicted_reading_body_total_{0};
  std::atomic<std::uint64_t> header_timeouts_total_{0};
  std::atomic<std::uint64_t> active_connections_{0};
  std::atomic<std::uint64_t> bad_requests_total_{0};
  std::atomic<std::uint64_t> tls_handshake_failures_total_{0};

 private:
  void accept_next(Listener& listener);
  void on_accept(Listener& listener, const error_code& ec, tcp::socket socket);
  void refuse(tcp::socket& socket, const std::string& response);
  bool peer_at_limit(const asio::ip::address& peer) const {
    if (options_.max_connections_per_peer == 0) return false;
    const auto count = connections_per_peer_.find(peer);
    return count != connections_per_peer_.end() && count->second >= options_.max_connections_per_peer;
  }
  // Closes the connection least worth keeping to make room for a newcomer; false if every connection
  // is handling or writing a response.
  bool evict_one();
  std::vector<SessionBase*> session_snapshot() const { return {sessions_.begin(), sessions_.end()}; }

  ServerOptions options_;
  Handler handler_;
  // The context new connections get; replaced on reload, while open connections keep theirs.
  std::shared_ptr<asio::ssl::context> tls_;
  std::vector<std::unique_ptr<Listener>> listeners_;  // never empty after construction
  bool started_ = false;
  bool stopping_ = false;
  bool torn_down_ = false;
  // Non-owning: each session registers itself for its lifetime so that stop() can reach it.
  std::unordered_set<SessionBase*> sessions_;
  std::map<asio::ip::address, std::size_t> connections_per_peer_;  // peer_of() -> open sessions
};

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Session: one TCP connection, split by job: ConnectionPhase (what eviction ranks it by),
// RequestReader (reading requests within limits and deadlines), OutgoingResponse (the response being
// written). Owned by its pending asynchronous operation (shared_from_this); all members are touched
// only on the io thread.

namespace {

std::chrono::steady_clock::time_point header_deadline(std::chrono::steady_clock::time_point started,
                                                      const ServerOptions& options) {
  return started + std::min(options.header_timeout, options.read_timeout);
}

std::size_t read_buffer_limit(const ServerOptions& options) {
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
  RequestReader(Stream& stream, detail::ServerCore& server, ConnectionPhase& phase)
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
    if (ec == beast::error::timeout && phase_.first_request) server_.count_header_timeout();
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
      server_.count_header_timeout();
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
  detail::ServerCore& server_;  // the session holds the owning reference
  ConnectionPhase& phase_;
  beast::flat_buffer buffer_;  // bounded: a client can never make us buffer more than the limits
  std::size_t read_chunk_bytes_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::size_t lingered_bytes_ = 0;
};

// What a request that could not be read is answered with.
struct Rejection {
  bhttp::status status;
  std::string_view body;
};

// nullopt: the peer went away, the read deadline passed (beast::error::timeout) or the server is
// shutting down, and the connection just closes.
std::optional<Rejection> rejection_for(const error_code& ec) {
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    return Rejection{bhttp::status::request_header_fields_too_large, "request header too large\n"};
  }
  if (ec == bhttp::error::body_limit)
    return Rejection{bhttp::status::payload_too_large, "request body too large\n"};
  if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
      ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) {
    return std::nullopt;
  }
  return Rejection{bhttp::status::bad_request, "bad request\n"};
}

Request request_from(const bhttp::request<bhttp::string_body>& message) {
  Request request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.accept_encoding = joined_values(message, bhttp::field::accept_encoding);
  if (const auto authorization = message.find(bhttp::field::authorization); authorization != message.end()) {
    request.authorization = std::string(authorization->value());
  }
  return request;
}

Response call_handler(const Handler& handler, const Request& request) {
  try {
    Response response = handler(request);
    if (response.status < 100 || response.status > 999) {
      throw std::out_of_range("invalid HTTP status " + std::to_string(response.status));
    }
    return response;
  } catch (const std::exception& error) {
    spdlog::error("HTTP handler failed for {} {}: {}", request.method, loggable(request.target),
                  error.what());
  } catch (...) {
    spdlog::error("HTTP handler failed for {} {}: unknown exception", request.method,
                  loggable(request.target));
  }
  Response failure;
  failure.status = 500;
  failure.content_type = std::string(kPlainTextType);
  failure.body = "internal server error\n";
  return failure;
}

// The response being written, with the body it points into: owned, or shared with the handler (its
// cached exposition or gzip), gzipped here when the client accepts it.
class OutgoingResponse {
 public:
  explicit OutgoingResponse(int gzip_level) : gzip_level_(gzip_level) {}

  void prepare(Response response, const Request& request, unsigned version, bool keep_alive, bool head_only) {
    const bool negotiable = response.compressible || response.precompressed_gzip != nullptr;
    const bool gzip_encoded =
        negotiable && accepts_gzip(request.accept_encoding) && take_gzip(response, request);
    if (!gzip_encoded) {
      if (response.shared_body != nullptr) {
        shared_body_ = std::move(response.shared_body);
      } else {
        owned_body_ = std::move(response.body);
      }
    }
    const std::string& body = shared_body_ != nullptr ? *shared_body_ : owned_body_;

    start_message(response.status, version);
    if (!response.content_type.empty()) message_.set(bhttp::field::content_type, response.content_type);
    if (gzip_encoded) message_.set(bhttp::field::content_encoding, "gzip");
    if (negotiable) message_.set(bhttp::field::vary, "Accept-Encoding");
    for (const auto& [name, value] : response.extra_headers) message_.insert(name, value);
    message_.keep_alive(keep_alive);
    // Set explicitly (never prepare_payload) so that HEAD reports the length a GET would get.
    message_.content_length(body.size());
    if (!head_only) message_.body() = beast::span<const char>(body.data(), body.size());
  }

  void prepare_plain(bhttp::status status, std::string_view body, unsigned version, bool keep_alive) {
    shared_body_.reset();
    owned_body_.assign(body);
    start_message(static_cast<unsigned>(status), version);
    message_.set(bhttp::field::content_type, kPlainTextType);
    message_.keep_alive(keep_alive);
    message_.content_length(owned_body_.size());
    message_.body() = beast::span<const char>(owned_body_.data(), owned_body_.size());
  }

  bhttp::response<bhttp::span_body<const char>>& message() { return message_; }

  // After the write: frees the body, or drops our reference to the handler's.
  void release() {
    message_ = {};
    shared_body_.reset();
    owned_body_ = std::string();
  }

 private:
  static const std::string& plain_body(const Response& response) {
    return response.shared_body != nullptr ? *response.shared_body : response.body;
  }

  // The gzip body for a client that accepts gzip: the handler's own, or compressed here when the body is
  // worth it; false when the plain body is to be sent.
  bool take_gzip(Response& response, const Request& request) {
    if (response.precompressed_gzip != nullptr) {
      shared_body_ = std::move(response.precompressed_gzip);
      return true;
    }
    if (!response.compressible || plain_body(response).size() < kMinCompressibleBodyBytes) return false;
    try {
      owned_body_ = gzip_compress(plain_body(response), gzip_level_);
      return true;
    } catch (const std::exception& error) {
      spdlog::warn("gzip failed, sending {} uncompressed: {}", loggable(request.target), error.what());
    }
    return false;
  }

  void start_message(unsigned status, unsigned version) {
    message_ = {};
    message_.result(status);
    message_.version(version);
    message_.set(bhttp::field::server, kServerName);
  }

  int gzip_level_;
  // Points into owned_body_ or *shared_body_, which stay untouched until the write completes.
  bhttp::response<bhttp::span_body<const char>> message_;
  std::string owned_body_;
  std::shared_ptr<const std::string> shared_body_;
};

// Calls the handler and prepares its response, or a 500 when that response cannot be sent as is.
void answer(OutgoingResponse& out, const detail::ServerCore& server, const Request& request, unsigned version,
            bool keep_alive, bool head_only) {
  Response response = call_handler(server.handler(), request);
  try {
    // The handler may have called stop(); the connection must then close after this response.
    out.prepare(std::move(response), request, version, keep_alive && !server.stopping(), head_only);
  } catch (const std::exception& error) {
    // E.g. an extra header Beast cannot hold; an exception must never escape into io_context::run().
    spdlog::error("HTTP response for {} {} is unusable: {}", request.method, loggable(request.target),
                  error.what());
    out.prepare_plain(bhttp::status::internal_server_error, "internal server error\n", version, keep_alive);
  }
}

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
  Session(std::shared_ptr<detail::ServerCore> server, tcp::socket socket, asio::ip::address peer,
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
      server_->count_tls_handshake_failure();
      if (ec == beast::error::timeout) server_->count_header_timeout();
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
    server_->count_request();
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
    server_->count_bad_request();
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

  std::shared_ptr<detail::ServerCore> server_;
  std::shared_ptr<asio::ssl::context> tls_;  // null for plain HTTP; outlives stream_, which refers to it
  Stream stream_;
  ConnectionPhase phase_;
  RequestReader<Stream> reader_;  // refers to stream_ and phase_
  OutgoingResponse response_;
  asio::ip::address peer_;  // peer_of() the remote address: what max_connections_per_peer counts
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// detail::ServerCore members that need Session

// Listener references stay valid: listeners_ is filled in the constructor and never changes after.
void detail::ServerCore::accept_next(Listener& listener) {
  listener.acceptor.async_accept(
      [self = shared_from_this(), &listener](const error_code& ec, tcp::socket socket) {
        self->on_accept(listener, ec, std::move(socket));
      });
}

void detail::ServerCore::on_accept(Listener& listener, const error_code& ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted || stopping_) return;
  if (ec) {
    // Typically EMFILE/ENFILE: back off instead of spinning on a listener that stays readable.
    spdlog::warn("HTTP accept failed on {}: {}; retrying", format_endpoint(listener.endpoint), ec.message());
    listener.retry_timer.expires_after(kAcceptRetryDelay);
    listener.retry_timer.async_wait([self = shared_from_this(), &listener](const error_code& wait_error) {
      if (!wait_error && !self->stopping_) self->accept_next(listener);
    });
    return;
  }
  error_code endpoint_error;
  const tcp::endpoint remote = socket.remote_endpoint(endpoint_error);
  if (endpoint_error) {  // already reset by the peer
    error_code ignored;
    socket.close(ignored);
  } else if (const asio::ip::address peer = peer_of(remote.address()); peer_at_limit(peer)) {
    connections_refused_per_peer_total_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("HTTP connection from {} refused: its address already holds {} connections",
                  remote.address().to_string(), options_.max_connections_per_peer);
    refuse(socket, peer_limit_response());
  } else if (sessions_.size() >= options_.max_connections && !evict_one()) {
    connections_rejected_total_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("HTTP connection rejected: {} connections already open, all busy", sessions_.size());
    refuse(socket, overload_response());
  } else {
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // responses go out in one write; no need to batch
    if (tls_ != nullptr) {
      std::make_shared<Session<TlsStream>>(shared_from_this(), std::move(socket), peer, tls_)->start();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(shared_from_this(), std::move(socket), peer, nullptr)
          ->start();
    }
  }
  accept_next(listener);
}

bool detail::ServerCore::evict_one() {
  // A linear scan: it runs only at the limit, and max_connections is small (64 by default).
  SessionBase* victim = nullptr;
  int victim_rank = 0;
  for (SessionBase* session : sessions_) {
    const std::optional<int> rank = session->eviction_rank();
    if (!rank) continue;
    if (victim == nullptr || *rank < victim_rank ||
        (*rank == victim_rank && session->phase_since() < victim->phase_since())) {
      victim = session;
      victim_rank = *rank;
    }
  }
  if (victim == nullptr) return false;
  auto& counter = victim_rank <= 1   ? evicted_idle_total_
                  : victim_rank == 2 ? evicted_reading_headers_total_
                                     : evicted_reading_body_total_;
  counter.fetch_add(1, std::memory_order_relaxed);
  victim->evict();
  return true;
}

void detail::ServerCore::refuse(tcp::socket& socket, const std::string& response) {
  error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(response), ignored);
  socket.close(ignored);
}

void detail::ServerCore::stop() {
  if (stopping_) return;
  stopping_ = true;
  error_code ignored;
  for (const auto& listener : listeners_) {
    listener->acceptor.close(ignored);
    listener->retry_timer.cancel();
  }
  for (SessionBase* session : session_snapshot()) session->on_server_stop();
}

void detail::ServerCore::tear_down() {
  torn_down_ = true;  // first, so that no request is handed over even if what follows throws
  stop();
  for (SessionBase* session : session_snapshot()) session->force_close();
}

// ---------------------------------------------------------------------------------------------
// Server

Server::Server(boost::asio::io_context& io, ServerOptions options, Handler handler)
    : core_(std::make_shared<detail::ServerCore>(io, std::move(options), std::move(handler))) {}

Server::~Server() {
  try {
    core_->tear_down();
  } catch (const std::exception& error) {
    // Only allocation or timer failures get here; the handler is already cut off.
    spdlog::warn("HTTP server teardown incomplete: {}", error.what());
  }
}

void Server::start() {
  core_->start();
}
void Server::stop() {
  core_->stop();
}

std::uint16_t Server::port() const {
  return core_->bound_endpoint().port();
}
std::string Server::bound_address() const {
  return format_endpoint(core_->bound_endpoint());
}
std::vector<std::string> Server::bound_addresses() const {
  return core_->bound_addresses();
}
void Server::set_tls_context(std::shared_ptr<boost::asio::ssl::context> tls) {
  core_->set_tls_context(std::move(tls));
}
bool Server::serves_tls() const {
  return core_->serves_tls();
}

std::uint64_t Server::requests_total() const {
  return core_->requests_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::connections_rejected_total() const {
  return core_->connections_rejected_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::connections_refused_per_peer_total() const {
  return core_->connections_refused_per_peer_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::connections_evicted_idle_total() const {
  return core_->evicted_idle_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::connections_evicted_reading_headers_total() const {
  return core_->evicted_reading_headers_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::connections_evicted_reading_body_total() const {
  return core_->evicted_reading_body_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::header_timeouts_total() const {
  return core_->header_timeouts_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::active_connections() const {
  return core_->active_connections_.load(std::memory_order_relaxed);
}
std::uint64_t Server::bad_requests_total() const {
  return core_->bad_requests_total_.load(std::memory_order_relaxed);
}
std::uint64_t Server::tls_handshake_failures_total() const {
  return core_->tls_handshake_failures_total_.load(std::memory_order_relaxed);
}

}  // namespace rankstat::http
