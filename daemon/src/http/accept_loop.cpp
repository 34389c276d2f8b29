#include "http/accept_loop.hpp"

#include <boost/asio/ssl/context.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "http/session.hpp"

namespace rankstat::http::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::chrono::milliseconds kAcceptRetryDelay{100};

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

void refuse(tcp::socket& socket, const std::string& response) {
  error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(response), ignored);
  socket.close(ignored);
}

}  // namespace

void CounterCells::read_into(Counters& out) const {
  // NOLINTNEXTLINE(bugprone-macro-parentheses): `member` names a field on both sides
#define RANKSTAT_HTTP_COUNTER_READ(member, ...) out.member = member.load(std::memory_order_relaxed);
  RANKSTAT_HTTP_SERVER_COUNTERS(RANKSTAT_HTTP_COUNTER_READ)
#undef RANKSTAT_HTTP_COUNTER_READ
}

ServerCore::ServerCore(asio::io_context& io, ServerOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)), tls_(options_.tls) {
  if (!handler_) throw std::invalid_argument("HTTP server needs a request handler");
  listeners_ = open_listeners(io, options_);
}

void ServerCore::start() {
  if (started_ || stopping_) return;
  started_ = true;
  for (const auto& listener : listeners_) {
    spdlog::debug("HTTP server accepting on {}{}", format_endpoint(listener->endpoint), tls_ ? " (TLS)" : "");
    accept_next(*listener);
  }
}

void ServerCore::set_tls_context(std::shared_ptr<asio::ssl::context> tls) {
  if (tls_ == nullptr || tls == nullptr) {
    throw std::invalid_argument("HTTP and HTTPS cannot be switched while the server runs");
  }
  tls_ = std::move(tls);
}

std::vector<std::string> ServerCore::bound_addresses() const {
  std::vector<std::string> addresses;
  addresses.reserve(listeners_.size());
  for (const auto& listener : listeners_) addresses.push_back(format_endpoint(listener->endpoint));
  return addresses;
}

void ServerCore::add_session(SessionBase* session, const asio::ip::address& peer) {
  sessions_.insert(session);
  ++connections_per_peer_[peer];
  counters_.active_connections.store(sessions_.size(), std::memory_order_relaxed);
}

void ServerCore::remove_session(SessionBase* session, const asio::ip::address& peer) {
  if (sessions_.erase(session) == 0) return;
  const auto count = connections_per_peer_.find(peer);
  if (count != connections_per_peer_.end() && --count->second == 0) connections_per_peer_.erase(count);
  counters_.active_connections.store(sessions_.size(), std::memory_order_relaxed);
}

bool ServerCore::peer_at_limit(const asio::ip::address& peer) const {
  if (options_.max_connections_per_peer == 0) return false;
  const auto count = connections_per_peer_.find(peer);
  return count != connections_per_peer_.end() && count->second >= options_.max_connections_per_peer;
}

// Listener references stay valid: listeners_ is filled in the constructor and never changes after.
void ServerCore::accept_next(Listener& listener) {
  listener.acceptor.async_accept(
      [self = shared_from_this(), &listener](const error_code& ec, tcp::socket socket) {
        self->on_accept(listener, ec, std::move(socket));
      });
}

void ServerCore::on_accept(Listener& listener, const error_code& ec, tcp::socket socket) {
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
    CounterCells::add_one(counters_.connections_refused_per_peer_total);
    spdlog::debug("HTTP connection from {} refused: its address already holds {} connections",
                  remote.address().to_string(), options_.max_connections_per_peer);
    refuse(socket, peer_limit_response());
  } else if (sessions_.size() >= options_.max_connections && !evict_one()) {
    CounterCells::add_one(counters_.connections_rejected_total);
    spdlog::debug("HTTP connection rejected: {} connections already open, all busy", sessions_.size());
    refuse(socket, overload_response());
  } else {
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // responses go out in one write; no need to batch
    start_session(shared_from_this(), std::move(socket), peer, tls_);
  }
  accept_next(listener);
}

bool ServerCore::evict_one() {
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
  CounterCells::add_one(victim_rank <= 1   ? counters_.connections_evicted_idle_total
                        : victim_rank == 2 ? counters_.connections_evicted_reading_headers_total
                                           : counters_.connections_evicted_reading_body_total);
  victim->evict();
  return true;
}

void ServerCore::stop() {
  if (stopping_) return;
  stopping_ = true;
  error_code ignored;
  for (const auto& listener : listeners_) {
    listener->acceptor.close(ignored);
    listener->retry_timer.cancel();
  }
  for (SessionBase* session : session_snapshot()) session->on_server_stop();
}

void ServerCore::tear_down() {
  torn_down_ = true;  // first, so that no request is handed over even if what follows throws
  stop();
  for (SessionBase* session : session_snapshot()) session->force_close();
}

}  // namespace rankstat::http::detail
