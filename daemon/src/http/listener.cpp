#include "http/listener.hpp"

#include <boost/asio/ip/v6_only.hpp>

#include <sys/socket.h>

#include <cerrno>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "rankstat/flags/host_port.hpp"

namespace rankstat::http::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

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

}  // namespace

std::string format_endpoint(const tcp::endpoint& endpoint) {
  const std::string host = endpoint.address().to_string();
  const std::string port = std::to_string(endpoint.port());
  return endpoint.address().is_v6() ? "[" + host + "]:" + port : host + ":" + port;
}

std::vector<std::unique_ptr<Listener>> open_listeners(asio::io_context& io, const ServerOptions& options) {
  std::vector<std::unique_ptr<Listener>> listeners;
  if (!options.listener_fds.empty()) {
    for (const int fd : options.listener_fds) {
      auto listener = std::make_unique<Listener>(io);
      adopt_listener(listener->acceptor, fd);
      listener->endpoint = listener->acceptor.local_endpoint();
      listeners.push_back(std::move(listener));
    }
    return listeners;
  }
  if (options.listen_addresses.empty()) throw std::invalid_argument("HTTP server needs a listen address");
  for (const std::string& address : options.listen_addresses) {
    auto listener = std::make_unique<Listener>(io);
    bind_listener(listener->acceptor, io, address);
    listener->endpoint = listener->acceptor.local_endpoint();
    listeners.push_back(std::move(listener));
  }
  return listeners;
}

}  // namespace rankstat::http::detail
