#pragma once

// The accept loop: ServerCore owns the listeners, admits each accepted connection or refuses it with a
// 503 (its peer at max_connections_per_peer, or every slot busy and nobody to evict), keeps the
// registry of open sessions that eviction and stop() walk, and holds the server's counters.
// Internal to rankstat_http.
//
// Thread contract: everything runs on the io thread, except the counter cells, which any thread may
// read. ServerCore is shared by the Server and every session, so that completions arriving after
// ~Server() never dangle.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "http/counters.hpp"
#include "http/http_server.hpp"
#include "http/listener.hpp"

namespace rankstat::http::detail {

// What the accept loop needs of a connection, whatever its stream (plain TCP or TLS).
class SessionBase {
 public:
  SessionBase() = default;
  SessionBase(const SessionBase&) = delete;
  SessionBase& operator=(const SessionBase&) = delete;
  SessionBase(SessionBase&&) = delete;
  SessionBase& operator=(SessionBase&&) = delete;
  virtual ~SessionBase() = default;
  // What evicting this connection would cost, lower first; nullopt: never evicted (see ConnectionPhase).
  [[nodiscard]] virtual std::optional<int> eviction_rank() const = 0;
  [[nodiscard]] virtual std::chrono::steady_clock::time_point phase_since() const = 0;
  virtual void evict() = 0;
  virtual void on_server_stop() = 0;
  virtual void force_close() = 0;
};

// The server's rows of counters.hpp as atomic cells. Relaxed: the counters are independent monotonic
// statistics (active_connections a level), not synchronisation.
struct CounterCells {
  // NOLINTNEXTLINE(bugprone-macro-parentheses): `member` names the field being declared
#define RANKSTAT_HTTP_COUNTER_CELL(member, ...) std::atomic<std::uint64_t> member{0};
  RANKSTAT_HTTP_SERVER_COUNTERS(RANKSTAT_HTTP_COUNTER_CELL)
#undef RANKSTAT_HTTP_COUNTER_CELL

  static void add_one(std::atomic<std::uint64_t>& cell) {
    cell.fetch_add(1, std::memory_order_relaxed);
  }
  // Copies the server's rows into `out` (the handler's rows stay as they are).
  void read_into(Counters& out) const;
};

class ServerCore : public std::enable_shared_from_this<ServerCore> {
 public:
  // Opens the listeners (listener.hpp); throws as Server's constructor documents.
  ServerCore(boost::asio::io_context& io, ServerOptions options, Handler handler);

  void start();
  void set_tls_context(std::shared_ptr<boost::asio::ssl::context> tls);
  [[nodiscard]] bool serves_tls() const { return tls_ != nullptr; }
  void stop();
  // Server destroyed: close everything and never call the handler again.
  void tear_down();

  [[nodiscard]] const ServerOptions& options() const { return options_; }
  [[nodiscard]] const Handler& handler() const { return handler_; }
  [[nodiscard]] bool stopping() const { return stopping_; }
  [[nodiscard]] bool torn_down() const { return torn_down_; }
  [[nodiscard]] const boost::asio::ip::tcp::endpoint& bound_endpoint() const {
    return listeners_.front()->endpoint;
  }
  [[nodiscard]] std::vector<std::string> bound_addresses() const;

  // A session registers itself for its lifetime, under its peer_of() address.
  void add_session(SessionBase* session, const boost::asio::ip::address& peer);
  // Idempotent: an evicted session leaves at eviction and again (a no-op) when it is destroyed.
  void remove_session(SessionBase* session, const boost::asio::ip::address& peer);

  CounterCells& counters() { return counters_; }
  [[nodiscard]] const CounterCells& counters() const { return counters_; }

 private:
  void accept_next(Listener& listener);
  void on_accept(Listener& listener, const boost::system::error_code& ec,
                 boost::asio::ip::tcp::socket socket);
  [[nodiscard]] bool peer_at_limit(const boost::asio::ip::address& peer) const;
  // Closes the connection least worth keeping to make room for a newcomer; false if every connection
  // is handling or writing a response.
  bool evict_one();
  [[nodiscard]] std::vector<SessionBase*> session_snapshot() const {
    return {sessions_.begin(), sessions_.end()};
  }

  ServerOptions options_;
  Handler handler_;
  // The context new connections get; replaced on reload, while open connections keep theirs.
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::vector<std::unique_ptr<Listener>> listeners_;  // never empty after construction, never changed
  bool started_ = false;
  bool stopping_ = false;
  bool torn_down_ = false;
  // Non-owning: each session registers itself for its lifetime so that stop() can reach it.
  std::unordered_set<SessionBase*> sessions_;
  std::map<boost::asio::ip::address, std::size_t> connections_per_peer_;  // peer_of() -> open sessions
  CounterCells counters_;
};

}  // namespace rankstat::http::detail
