// A small blocking HTTP/1.1 GET client on Boost.Beast, optionally over TLS (OpenSSL), enough for the
// daemon's JSON API and the tests' scrapes: one request per connection ("Connection: close"), no
// content decoding (a gzip body is returned as sent), Content-Length, chunked or read-to-close bodies up
// to 256 MiB, one deadline for the whole exchange, basic auth, CA file, client certificate, server name.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "address.hpp"

namespace rankstat::cli {

enum class HttpFailure {
  kNone = 0,
  kUnreachable,  // name resolution, connect refused or timed out: nobody is listening there
  kTimeout,      // connected, but no complete answer before the deadline
  kProtocol,     // an answer that is not HTTP/1.x, cut short or too large
  kTls,          // the TLS handshake failed (untrusted server, refused client certificate, ...)
};

// How to reach a secured daemon (docs/operations.md "Securing rankstatd").
struct ClientSecurity {
  std::string ca_file;      // trust these CAs for the daemon's certificate; empty: the system's
  std::string cert_file;    // client certificate (PEM), for client_auth_type ...ClientCert
  std::string key_file;     // its key; empty: cert_file holds both
  std::string server_name;  // name the daemon's certificate must carry; empty: the address's host
  std::string username;     // basic auth; empty: none
  std::string password;     // a secret: taken from a file or the environment, never a flag
};

// Extra request header fields (name, value); one given here replaces the client's own (Host, User-Agent).
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpReply {
  HttpFailure failure = HttpFailure::kNone;
  std::string error;  // what went wrong, for the user
  int status = 0;
  std::string content_type;
  std::map<std::string, std::string> headers;  // lower-case names; the last of repeated fields
  std::string body;
};

HttpReply http_get(const Endpoint& endpoint, const std::string& target, std::chrono::milliseconds timeout,
                   const ClientSecurity& security = {}, const HttpHeaders& headers = {});

}  // namespace rankstat::cli
