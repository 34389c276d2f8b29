// A small blocking HTTP/1.1 GET client over POSIX sockets, enough for the daemon's JSON API: one
// request per connection ("Connection: close"), identity encoding, Content-Length, chunked or
// read-to-close bodies, one deadline for the whole exchange.
#pragma once

#include <chrono>
#include <string>

#include "address.hpp"

namespace rankstat::cli {

enum class HttpFailure {
  kNone = 0,
  kUnreachable,  // name resolution, connect refused or timed out: nobody is listening there
  kTimeout,      // connected, but no complete answer before the deadline
  kProtocol,     // an answer that is not HTTP/1.x
};

struct HttpReply {
  HttpFailure failure = HttpFailure::kNone;
  std::string error;  // what went wrong, for the user
  int status = 0;
  std::string content_type;
  std::string body;
};

HttpReply http_get(const Endpoint& endpoint, const std::string& target, std::chrono::milliseconds timeout);

}  // namespace rankstat::cli
