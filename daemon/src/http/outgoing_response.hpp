#pragma once

// From a request read off the wire to the response written back: the Request the handler sees, the
// handler's call (an exception becomes a 500), the Response negotiated against Accept-Encoding (gzip
// here or the handler's own) and framed for Beast, and what an unreadable request is answered with.
// Internal to rankstat_http; everything runs on the io thread.

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/span.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/span_body.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/http_server.hpp"

namespace rankstat::http::detail {

class ServerCore;

inline constexpr std::string_view kServerName = "rankstatd";
inline constexpr std::string_view kPlainTextType = "text/plain; charset=utf-8";

// Handlers may echo attacker-controlled targets; keep log lines bounded.
std::string_view loggable(std::string_view text);

// What a request that could not be read is answered with.
struct Rejection {
  boost::beast::http::status status;
  std::string_view body;
};

// nullopt: the peer went away, the read deadline passed (beast::error::timeout) or the server is
// shutting down, and the connection just closes.
std::optional<Rejection> rejection_for(const boost::system::error_code& ec);

Request request_from(const boost::beast::http::request<boost::beast::http::string_body>& message);

// The response being written, with the body it points into: owned, or shared with the handler (its
// cached exposition or gzip), gzipped here when the client accepts it.
class OutgoingResponse {
 public:
  using Message = boost::beast::http::response<boost::beast::http::span_body<const char>>;

  explicit OutgoingResponse(int gzip_level) : gzip_level_(gzip_level) {}

  void prepare(Response response, const Request& request, unsigned version, bool keep_alive, bool head_only);
  void prepare_plain(boost::beast::http::status status, std::string_view body, unsigned version,
                     bool keep_alive);
  Message& message() { return message_; }
  // After the write: frees the body, or drops our reference to the handler's.
  void release();

 private:
  // The gzip body for a client that accepts gzip: the handler's own, or compressed here when the body is
  // worth it; false when the plain body is to be sent.
  bool take_gzip(Response& response, const Request& request);
  void start_message(unsigned status, unsigned version);

  int gzip_level_;
  // Points into owned_body_ or *shared_body_, which stay untouched until the write completes.
  Message message_;
  std::string owned_body_;
  std::shared_ptr<const std::string> shared_body_;
};

// Calls the handler and prepares its response, or a 500 when that response cannot be sent as is.
void answer(OutgoingResponse& out, const ServerCore& server, const Request& request, unsigned version,
            bool keep_alive, bool head_only);

}  // namespace rankstat::http::detail
