#include "http/outgoing_response.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include <spdlog/spdlog.h>

#include <exception>
#include <stdexcept>
#include <utility>

#include "http/accept_encoding.hpp"
#include "http/accept_loop.hpp"
#include "http/gzip.hpp"

namespace rankstat::http::detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

namespace {

// A list-valued field may arrive split over several header lines; RFC 9110 defines them as one
// comma-separated list.
template <typename Message>
std::string joined_values(const Message& message, bhttp::field field) {
  std::string joined;
  const auto [first, last] = message.equal_range(field);
  for (auto it = first; it != last; ++it) {
    if (!joined.empty()) joined += ", ";
    joined.append(it->value());
  }
  return joined;
}

Response call_handler(const Handler& handler, const Request& request) {
  try {
    Response response = handler(request);
    if (response.status < 100 || response.status > 999) {
      throw std::out_of_range("invalid HTTP status " + std::to_string(response.status));
    }
    return response;
  } catch (const std::exception& error) {
    spdlog::error("HTTP handler failed for {} {}: {}", request.method, loggable(request.target),
                  error.what());
  } catch (...) {
    spdlog::error("HTTP handler failed for {} {}: unknown exception", request.method,
                  loggable(request.target));
  }
  Response failure;
  failure.status = 500;
  failure.content_type = std::string(kPlainTextType);
  failure.body = "internal server error\n";
  return failure;
}

const std::string& plain_body(const Response& response) {
  return response.shared_body != nullptr ? *response.shared_body : response.body;
}

}  // namespace

std::string_view loggable(std::string_view text) {
  constexpr std::size_t kMaxLoggedChars = 200;
  return text.substr(0, kMaxLoggedChars);
}

std::optional<Rejection> rejection_for(const error_code& ec) {
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    return Rejection{bhttp::status::request_header_fields_too_large, "request header too large\n"};
  }
  if (ec == bhttp::error::body_limit)
    return Rejection{bhttp::status::payload_too_large, "request body too large\n"};
  if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
      ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) {
    return std::nullopt;
  }
  return Rejection{bhttp::status::bad_request, "bad request\n"};
}

Request request_from(const bhttp::request<bhttp::string_body>& message) {
  Request request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.accept = joined_values(message, bhttp::field::accept);
  request.accept_encoding = joined_values(message, bhttp::field::accept_encoding);
  if (const auto authorization = message.find(bhttp::field::authorization); authorization != message.end()) {
    request.authorization = std::string(authorization->value());
  }
  return request;
}

void OutgoingResponse::prepare(Response response, const Request& request, unsigned version, bool keep_alive,
                               bool head_only) {
  const bool negotiable = response.compressible || response.precompressed_gzip != nullptr;
  const bool gzip_encoded =
      negotiable && accepts_gzip(request.accept_encoding) && take_gzip(response, request);
  if (!gzip_encoded) {
    if (response.shared_body != nullptr) {
      shared_body_ = std::move(response.shared_body);
    } else {
      owned_body_ = std::move(response.body);
    }
  }
  const std::string& body = shared_body_ != nullptr ? *shared_body_ : owned_body_;

  start_message(response.status, version);
  if (!response.content_type.empty()) message_.set(bhttp::field::content_type, response.content_type);
  if (gzip_encoded) message_.set(bhttp::field::content_encoding, "gzip");
  if (negotiable) {
    message_.set(bhttp::field::vary, response.vary.empty() ? std::string("Accept-Encoding")
                                                           : response.vary + ", Accept-Encoding");
  } else if (!response.vary.empty()) {
    message_.set(bhttp::field::vary, response.vary);
  }
  for (const auto& [name, value] : response.extra_headers) message_.insert(name, value);
  message_.keep_alive(keep_alive);
  // Set explicitly (never prepare_payload) so that HEAD reports the length a GET would get.
  message_.content_length(body.size());
  if (!head_only) message_.body() = beast::span<const char>(body.data(), body.size());
}

void OutgoingResponse::prepare_plain(bhttp::status status, std::string_view body, unsigned version,
                                     bool keep_alive) {
  shared_body_.reset();
  owned_body_.assign(body);
  start_message(static_cast<unsigned>(status), version);
  message_.set(bhttp::field::content_type, kPlainTextType);
  message_.keep_alive(keep_alive);
  message_.content_length(owned_body_.size());
  message_.body() = beast::span<const char>(owned_body_.data(), owned_body_.size());
}

void OutgoingResponse::release() {
  message_ = {};
  shared_body_.reset();
  owned_body_ = std::string();
}

bool OutgoingResponse::take_gzip(Response& response, const Request& request) {
  if (response.precompressed_gzip != nullptr) {
    shared_body_ = std::move(response.precompressed_gzip);
    return true;
  }
  if (!response.compressible || plain_body(response).size() < kMinCompressibleBodyBytes) return false;
  try {
    owned_body_ = gzip_compress(plain_body(response), gzip_level_);
    return true;
  } catch (const std::exception& error) {
    spdlog::warn("gzip failed, sending {} uncompressed: {}", loggable(request.target), error.what());
  }
  return false;
}

void OutgoingResponse::start_message(unsigned status, unsigned version) {
  message_ = {};
  message_.result(status);
  message_.version(version);
  message_.set(bhttp::field::server, kServerName);
}

void answer(OutgoingResponse& out, const ServerCore& server, const Request& request, unsigned version,
            bool keep_alive, bool head_only) {
  Response response = call_handler(server.handler(), request);
  try {
    // The handler may have called stop(); the connection must then close after this response.
    out.prepare(std::move(response), request, version, keep_alive && !server.stopping(), head_only);
  } catch (const std::exception& error) {
    // E.g. an extra header Beast cannot hold; an exception must never escape into io_context::run().
    spdlog::error("HTTP response for {} {} is unusable: {}", request.method, loggable(request.target),
                  error.what());
    out.prepare_plain(bhttp::status::internal_server_error, "internal server error\n", version, keep_alive);
  }
}

}  // namespace rankstat::http::detail
