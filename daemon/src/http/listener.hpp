#pragma once

// The server's listening sockets: bound from "host:port" addresses (IPv6 dual-stack for "all
// interfaces", host names resolved once, at startup) or adopted from systemd socket activation.
// Internal to rankstat_http; used on the io thread.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <string>
#include <vector>

#include "http/http_server.hpp"

namespace rankstat::http::detail {

// One listening socket with its accept-retry timer.
struct Listener {
  explicit Listener(boost::asio::io_context& io) : acceptor(io), retry_timer(io) {}
  boost::asio::ip::tcp::acceptor acceptor;
  boost::asio::steady_timer retry_timer;
  boost::asio::ip::tcp::endpoint endpoint;  // where it is bound (the port chosen for port 0)
};

// One listener per options.listener_fds entry when there are any, else per options.listen_addresses
// entry, in the order given. Throws std::runtime_error naming the address and the OS error (address in
// use, bad address, unresolvable host, an inherited socket that is not IPv4 or IPv6) and
// std::invalid_argument when there is nothing to listen on.
std::vector<std::unique_ptr<Listener>> open_listeners(boost::asio::io_context& io,
                                                      const ServerOptions& options);

// "127.0.0.1:41234" or "[::1]:41234".
std::string format_endpoint(const boost::asio::ip::tcp::endpoint& endpoint);

}  // namespace rankstat::http::detail
