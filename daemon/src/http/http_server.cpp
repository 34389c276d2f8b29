// Server: the public face of the HTTP layer, a thin handle on detail::ServerCore (accept_loop.hpp).

#include "http/http_server.hpp"

#include <boost/asio/ssl/context.hpp>

#include <spdlog/spdlog.h>

#include <exception>
#include <utility>

#include "http/accept_loop.hpp"
#include "http/listener.hpp"

namespace rankstat::http {

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
  return detail::format_endpoint(core_->bound_endpoint());
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

Counters Server::counters() const {
  Counters counters;
  core_->counters().read_into(counters);
  return counters;
}
std::uint64_t Server::active_connections() const {
  return core_->counters().active_connections.load(std::memory_order_relaxed);
}

}  // namespace rankstat::http
