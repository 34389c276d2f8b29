#pragma once

// Minimal asynchronous HTTP/1.1 server for rankstatd's scrape and API endpoints.
// It knows nothing of what it serves: every GET/HEAD is answered by the caller's Handler.
//
// Threading contract: the server runs on a caller-owned io_context that exactly one thread runs.
// The constructor may run on any thread before that thread starts; start(), stop(), the destructor
// and the Handler all run on the io thread (or while the io_context is not running). The counters are
// the exception: they may be read from any thread.
//
// The implementation is cut by job, each file internal to rankstat_http: accept_encoding (gzip
// negotiation), listener (bind, adopt, format addresses), accept_loop (ServerCore: admission, eviction,
// the session registry, the counters), session (one connection), request_reader (reading within limits
// and deadlines), outgoing_response (handler call and response framing), gzip.

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/accept_encoding.hpp"  // accepts_gzip(), part of this interface since the server negotiates
#include "http/counters.hpp"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace rankstat::http {

namespace detail {
class ServerCore;
}  // namespace detail

struct Request {
  std::string method;  // "GET" or "HEAD": other methods never reach the handler
  std::string target;  // path and query exactly as sent, e.g. "/metrics?x=1"
  std::string accept;  // the Accept header(s), joined: /metrics reads its `escaping` parameter
  std::string accept_encoding;
  std::string authorization;  // the Authorization header ("" when absent); a secret, never log it
};

struct Response {
  unsigned status = 200;
  std::string content_type;  // e.g. "text/plain; version=0.0.4; charset=utf-8"; omitted when empty
  std::string body;          // uncompressed body
  // Uncompressed body owned by the handler (a buffer it reuses between scrapes); sent instead of `body`
  // when set. The handler must not modify it while anyone else holds a reference.
  std::shared_ptr<const std::string> shared_body;
  // Let the server gzip the body when the client accepts gzip (q>0) and it is at least
  // kMinCompressibleBodyBytes long.
  bool compressible = false;
  // Optional gzip of `body` (e.g. cached between scrapes); sent as-is whenever the client accepts
  // gzip, whatever the body size. Shared so that the cache is not copied per request.
  std::shared_ptr<const std::string> precompressed_gzip;
  // Request headers besides Accept-Encoding that chose this body (e.g. "Accept" for /metrics, whose
  // escaping scheme the Accept header picks), for the Vary header: caches must not serve one scraper the
  // body another asked for. The server adds Accept-Encoding itself when the body is compressible.
  std::string vary;
  // Added verbatim; names and values must not contain CR or LF.
  std::vector<std::pair<std::string, std::string>> extra_headers;
};

// Called on the io thread; must not block for long since it stalls every connection. An exception
// becomes a 500 response and is logged.
using Handler = std::function<Response(const Request&)>;

// Smaller bodies are not worth the gzip header and CPU.
inline constexpr std::size_t kMinCompressibleBodyBytes = 1024;

struct ServerOptions {
  // Each "host:port", ":port" (all interfaces, dual-stack when IPv6 is available), "[::1]:port";
  // port 0 = ephemeral. One listener per entry (e.g. "0.0.0.0:9473" and "[::]:9473").
  std::vector<std::string> listen_addresses{":9473"};
  // Listening sockets handed over by the caller (systemd socket activation); when not empty they are
  // served instead of listen_addresses, and the server owns (closes) them.
  std::vector<int> listener_fds;
  // Serve HTTPS with this context (certificates, versions, client verification); null: plain HTTP.
  // The TLS handshake runs under header_timeout, like a request's headers.
  std::shared_ptr<boost::asio::ssl::context> tls;
  // At this many open connections a newcomer evicts one that is not serving anybody: first a finished
  // or idle one (oldest idle first), then one still reading its request (longest reading first). Only
  // when every connection is handling or writing a response does the newcomer get a 503.
  std::size_t max_connections = 64;
  // Open connections allowed per peer address (an IPv6 peer is its /64, an IPv4-mapped address its IPv4
  // address, loopback one peer like any other); a newcomer beyond it gets a 503. 0 = no limit.
  std::size_t max_connections_per_peer = 8;
  // A client must send complete request headers within this long of its first byte (of accepting, for
  // a connection's first request), or it is closed. Capped by read_timeout.
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds read_timeout{
      10000};  // whole-request deadline, headers and body (slowloris defence)
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds idle_keepalive_timeout{60000};  // between requests on a kept-alive connection
  std::uint32_t max_header_bytes = 8192;                    // larger header -> 431 and close
  std::uint64_t max_body_bytes = 4096;                      // GET-only server; larger body -> 413 and close
  int gzip_level = 1;                                       // zlib level for on-the-fly compression
};

class Server {
 public:
  // Binds and listens at once (or adopts listener_fds) so that configuration errors surface at startup;
  // throws std::runtime_error naming the address and the OS error (e.g. address in use, bad address).
  // Host names are resolved here, synchronously. `io` must outlive the Server; `handler` must not
  // be empty (std::invalid_argument).
  Server(boost::asio::io_context& io, ServerOptions options, Handler handler);
  // Closes the listener and every connection; pending operations complete as aborted.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  Server(Server&&) = delete;
  Server& operator=(Server&&) = delete;

  // Begins accepting. Calling it twice, or after stop(), has no effect.
  void start();
  // Stops accepting (new connections are refused by the OS). Responses being written are finished,
  // requests being received are answered, then those connections close; idle keep-alive
  // connections close at once. Final: the server cannot be restarted. May be called from inside
  // the handler.
  void stop();

  // Connections accepted from now on use `tls` (certificates reloaded on SIGHUP); connections already
  // open keep the context they started with. The server must have been built with a TLS context and
  // `tls` must not be null (std::invalid_argument): switching between HTTP and HTTPS needs a restart.
  void set_tls_context(std::shared_ptr<boost::asio::ssl::context> tls);
  [[nodiscard]] bool serves_tls() const;

  [[nodiscard]] std::uint16_t port() const;  // the first listener's bound port, useful with port 0
  [[nodiscard]] std::string bound_address()
      const;  // the first listener, e.g. "127.0.0.1:41234" or "[::1]:41234"
  [[nodiscard]] std::vector<std::string> bound_addresses() const;  // every listener, in the order given

  // The server's rows of http::Counters (counters.hpp; the handler's rows stay 0). Any thread may call
  // these.
  [[nodiscard]] Counters counters() const;
  [[nodiscard]] std::uint64_t active_connections() const;  // open connections now

 private:
  // Shared with every connection so that completions arriving after ~Server() never dangle.
  std::shared_ptr<detail::ServerCore> core_;
};

}  // namespace rankstat::http
