#include "address.hpp"

#include <charconv>

namespace rankstat::cli {

std::string Endpoint::display() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port;
  return host + ":" + port;
}

std::optional<Endpoint> parse_address(std::string_view text, std::string& error) {
  std::string_view rest = text;
  bool tls = false;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
    tls = true;
  }
  while (rest.ends_with('/')) rest.remove_suffix(1);
  Endpoint endpoint;
  endpoint.tls = tls;
  std::string_view port;
  if (rest.starts_with('[')) {
    const auto close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      error = "expected [ipv6]:port, got '" + std::string(text) + "'";
      return std::nullopt;
    }
    endpoint.host = std::string(rest.substr(1, close - 1));
    port = rest.substr(close + 2);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      error = "expected host:port, got '" + std::string(text) + "'";
      return std::nullopt;
    }
    endpoint.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  if (endpoint.host.empty()) endpoint.host = "127.0.0.1";  // ":9473", as the daemon's listen flag
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
    error = "invalid port in '" + std::string(text) + "'";
    return std::nullopt;
  }
  endpoint.port = std::string(port);
  return endpoint;
}

}  // namespace rankstat::cli
