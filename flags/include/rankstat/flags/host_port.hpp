// "host:port", ":port" and "[v6]:port", as rankstatd's --web.listen-address and the CLI's --address take
// them. One parser; what differs between the two is an option (scheme prefix, port 0) or the caller's
// policy (what an empty host means: all interfaces for a listener, 127.0.0.1 for the CLI).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rankstat::flags {

struct HostPortOptions {
  bool allow_scheme = false;     // an "http://" or "https://" prefix and trailing '/'s (a URL pasted in)
  bool allow_port_zero = false;  // port 0: a listener's "any free port"
};

struct HostPort {
  std::string host;  // without brackets; empty when the text was ":port"
  std::uint16_t port = 0;
  bool tls = false;  // "https://" (only with allow_scheme)

  std::string port_text() const { return std::to_string(port); }
  // host:port, with brackets around an IPv6 host; `empty_host` stands in for an empty one.
  std::string display(std::string_view empty_host = "") const;
};

struct HostPortParse {
  std::optional<HostPort> value;
  std::string error;  // when !value: the reason alone, e.g. "expected host:port or :port"
};

HostPortParse parse_host_port(std::string_view text, const HostPortOptions& options = {});

}  // namespace rankstat::flags
