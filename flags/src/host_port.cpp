#include "rankstat/flags/host_port.hpp"

#include <charconv>
#include <utility>

namespace rankstat::flags {
namespace {

HostPortParse refuse(std::string reason) {
  return HostPortParse{std::nullopt, std::move(reason)};
}

}  // namespace

std::string HostPort::display(std::string_view empty_host) const {
  const std::string shown = host.empty() ? std::string(empty_host) : host;
  if (shown.find(':') != std::string::npos) return "[" + shown + "]:" + port_text();
  return shown + ":" + port_text();
}

HostPortParse parse_host_port(std::string_view text, const HostPortOptions& options) {
  HostPort result;
  std::string_view rest = text;
  if (options.allow_scheme) {
    if (rest.starts_with("http://")) {
      rest.remove_prefix(7);
    } else if (rest.starts_with("https://")) {
      rest.remove_prefix(8);
      result.tls = true;
    }
    while (rest.ends_with('/')) rest.remove_suffix(1);
  }

  std::string_view port;
  if (rest.starts_with('[')) {
    const std::size_t closing = rest.find(']');
    if (closing == std::string_view::npos) return refuse("missing ']'");
    result.host = std::string(rest.substr(1, closing - 1));
    if (result.host.empty()) return refuse("empty IPv6 address");
    if (closing + 1 >= rest.size() || rest[closing + 1] != ':') return refuse("expected ':port' after ']'");
    port = rest.substr(closing + 2);
  } else {
    const std::size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return refuse("expected host:port or :port");
    result.host = std::string(rest.substr(0, colon));
    if (result.host.find(':') != std::string::npos)
      return refuse("IPv6 addresses must be bracketed, e.g. [::1]:9473");
    if (result.host.find_first_of("/[] ") != std::string::npos)
      return refuse("'" + result.host + "' is not a host");
    port = rest.substr(colon + 1);
  }

  const unsigned lowest = options.allow_port_zero ? 0 : 1;
  unsigned number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number < lowest ||
      number > 65535) {
    return refuse("port must be a number from " + std::to_string(lowest) + " to 65535");
  }
  result.port = static_cast<std::uint16_t>(number);
  return HostPortParse{std::move(result), {}};
}

}  // namespace rankstat::flags
