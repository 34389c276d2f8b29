// The daemon's address as given on the command line: "host:port", ":port", "[v6]:port", optionally
// prefixed with "http://" or "https://" (TLS; a trailing "/" is tolerated).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace rankstat::cli {

struct Endpoint {
  std::string host;  // without brackets
  std::string port;
  bool tls = false;  // "https://": the daemon serves TLS (--web.config.file with tls_server_config)

  std::string display() const;  // host:port, brackets for IPv6
};

// nullopt (with `error` set) when the text is not an address.
std::optional<Endpoint> parse_address(std::string_view text, std::string& error);

}  // namespace rankstat::cli
