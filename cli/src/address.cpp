#include "address.hpp"

#include "rankstat/flags/host_port.hpp"

namespace rankstat::cli {

std::string Endpoint::display() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port;
  return host + ":" + port;
}

// The CLI's policy over the shared host:port parser: a pasted URL is fine, ":port" is this machine and
// port 0 is no daemon's port.
std::optional<Endpoint> parse_address(std::string_view text, std::string& error) {
  const flags::HostPortParse parsed =
      flags::parse_host_port(text, {.allow_scheme = true, .allow_port_zero = false});
  if (!parsed.value) {
    error = "invalid address '" + std::string(text) + "': " + parsed.error;
    return std::nullopt;
  }
  Endpoint endpoint;
  endpoint.host = parsed.value->host.empty() ? "127.0.0.1" : parsed.value->host;
  endpoint.port = parsed.value->port_text();
  endpoint.tls = parsed.value->tls;
  return endpoint;
}

}  // namespace rankstat::cli
