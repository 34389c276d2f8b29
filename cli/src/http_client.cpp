#include "http_client.hpp"

#include <arpa/inet.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cctype>
#include <cstring>
#include <exception>
#include <optional>
#include <system_error>
#include <type_traits>

namespace rankstat::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr std::uint64_t kMaxBody = std::uint64_t{256} << 20;

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int length =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(length));
  return out;
}

// The TLS client context for `security`; nullopt with `error` set when a file cannot be used.
std::optional<asio::ssl::context> tls_context(const ClientSecurity& security, std::string& error) {
  asio::ssl::context context(asio::ssl::context::tls_client);
  SSL_CTX* native = context.native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  // The server may close without close_notify once the response is complete (Content-Length tells).
  SSL_CTX_set_options(native, SSL_OP_IGNORE_UNEXPECTED_EOF);
  error_code ec;
  context.set_verify_mode(asio::ssl::verify_peer, ec);
  if (security.ca_file.empty()) {
    context.set_default_verify_paths(ec);
    if (ec) error = "cannot read the system's CA certificates: " + ec.message();
  } else {
    context.load_verify_file(security.ca_file, ec);
    if (ec) error = "cannot read the CA file " + security.ca_file + ": " + ec.message();
  }
  if (ec) return std::nullopt;
  if (!security.cert_file.empty()) {
    const std::string& key = security.key_file.empty() ? security.cert_file : security.key_file;
    context.use_certificate_chain_file(security.cert_file, ec);
    if (ec) {
      error = "cannot read the client certificate " + security.cert_file + ": " + ec.message();
      return std::nullopt;
    }
    context.use_private_key_file(key, asio::ssl::context::pem, ec);
    if (ec || SSL_CTX_check_private_key(native) != 1) {
      error = "cannot use the client key " + key +
              (ec ? ": " + ec.message() : ": it does not match the certificate");
      return std::nullopt;
    }
  }
  return context;
}

// The daemon's certificate must name what we connect to: an IP address as an IP SAN, a host name as a
// DNS SAN (then also sent as SNI).
void expect_server_name(SSL* ssl, const std::string& name) {
  unsigned char address[16];
  const bool is_ip =
      ::inet_pton(AF_INET, name.c_str(), address) == 1 || ::inet_pton(AF_INET6, name.c_str(), address) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
  } else {
    // SSL_set_tlsext_host_name without its C cast.
    SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, const_cast<char*>(name.c_str()));
    SSL_set1_host(ssl, name.c_str());
  }
}

// One GET: connect, (handshake), write, read, each step's failure turned into the reply's words.
class Exchange {
 public:
  Exchange(const Endpoint& endpoint, const std::string& target, const ClientSecurity& security,
           const HttpHeaders& headers)
      : endpoint_(endpoint), target_(target), security_(security), headers_(headers) {}

  HttpReply run(std::chrono::milliseconds timeout) {
    asio::io_context& io = io_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!endpoint_.tls) {
      beast::tcp_stream stream(io);
      spawn(io, talk(stream, stream, nullptr, deadline));
      return std::move(reply_);
    }
    std::string error;
    std::optional<asio::ssl::context> context = tls_context(security_, error);
    if (!context) return fail(HttpFailure::kTls, error);
    beast::ssl_stream<beast::tcp_stream> stream(io, *context);
    expect_server_name(stream.native_handle(),
                       security_.server_name.empty() ? endpoint_.host : security_.server_name);
    spawn(io, talk(stream, beast::get_lowest_layer(stream), stream.native_handle(), deadline));
    return std::move(reply_);
  }

 private:
  // Runs `work` to the end: every handler has run when it returns.
  static void spawn(asio::io_context& io, asio::awaitable<void> work) {
    asio::co_spawn(io, std::move(work), [](const std::exception_ptr& e) {
      if (e) std::rethrow_exception(e);
    });
    io.run();
  }

  HttpReply fail(HttpFailure failure, std::string error) {
    reply_.failure = failure;
    reply_.error = std::move(error);
    return std::move(reply_);
  }

  void set_failure(HttpFailure failure, std::string error) {
    reply_.failure = failure;
    reply_.error = std::move(error);
  }

  // Resolves under the deadline (the resolver is cancelled when it passes).
  asio::awaitable<std::optional<tcp::resolver::results_type>> resolve(
      std::chrono::steady_clock::time_point deadline) {
    auto executor = co_await asio::this_coro::executor;
    resolver_.emplace(executor);
    // The handler may run after this coroutine moved on: it touches only members, which outlive io.run().
    asio::steady_timer timer(executor, deadline);
    timer.async_wait([this](const error_code& ec) {
      if (ec || !resolving_) return;
      resolve_timed_out_ = true;
      resolver_->cancel();
    });
    error_code ec;
    resolving_ = true;
    auto results = co_await resolver_->async_resolve(endpoint_.host, endpoint_.port,
                                                     asio::redirect_error(asio::use_awaitable, ec));
    resolving_ = false;
    timer.cancel();
    if (resolve_timed_out_) {
      set_failure(HttpFailure::kUnreachable, "cannot resolve " + endpoint_.host + ": timed out");
      co_return std::nullopt;
    }
    if (ec) {
      set_failure(HttpFailure::kUnreachable, "cannot resolve " + endpoint_.host + ": " + ec.message());
      co_return std::nullopt;
    }
    co_return results;
  }

  // `stream` is what HTTP goes over (the TLS stream or the TCP one), `transport` the TCP stream under it;
  // `ssl` is the TLS session or nullptr.
  template <class Stream>
  asio::awaitable<void> talk(Stream& stream, beast::tcp_stream& transport, SSL* ssl,
                             std::chrono::steady_clock::time_point deadline) {
    const std::string where = endpoint_.display();
    const auto results = co_await resolve(deadline);
    if (!results) co_return;
    // Connect, handshake, write and read all run under the one deadline.
    transport.expires_at(deadline);
    error_code ec;
    co_await transport.async_connect(*results, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      const std::string reason =
          ec == beast::error::timeout ? std::generic_category().message(ETIMEDOUT) : ec.message();
      set_failure(HttpFailure::kUnreachable, "cannot connect to " + where + ": " + reason);
      co_return;
    }
    if (ssl != nullptr) {
      if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
        co_await stream.async_handshake(asio::ssl::stream_base::client,
                                        asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec == beast::error::timeout) {
        set_failure(HttpFailure::kTls, "timed out in the TLS handshake with " + where);
        co_return;
      }
      if (ec) {
        const long verdict = SSL_get_verify_result(ssl);
        const std::string reason =
            verdict != X509_V_OK ? X509_verify_cert_error_string(verdict) : ec.message();
        set_failure(HttpFailure::kTls, "TLS handshake with " + where + " failed: " + reason);
        co_return;
      }
    }

    bhttp::request<bhttp::empty_body> request{bhttp::verb::get, target_, 11};
    request.set(bhttp::field::host, where);
    request.set(bhttp::field::user_agent, "rankstat/" RANKSTAT_VERSION);
    request.set(bhttp::field::connection, "close");
    if (!security_.username.empty()) {
      std::string credentials = security_.username + ":" + security_.password;
      request.set(bhttp::field::authorization, "Basic " + base64(credentials));
      std::fill(credentials.begin(), credentials.end(), '\0');
    }
    for (const auto& [name, value] : headers_) request.set(name, value);
    co_await bhttp::async_write(stream, request, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == beast::error::timeout) {
      set_failure(HttpFailure::kTimeout, "timed out sending to " + where);
      co_return;
    }
    if (ec) {
      set_failure(ssl != nullptr ? HttpFailure::kTls : HttpFailure::kUnreachable,
                  "cannot send to " + where + ": " + ec.message());
      co_return;
    }

    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxBody);
    co_await bhttp::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == beast::error::timeout) {
      set_failure(HttpFailure::kTimeout, "timed out waiting for " + where + target_);
    } else if (ec == bhttp::error::body_limit) {
      set_failure(HttpFailure::kProtocol, "answer from " + where + " is larger than 256 MiB");
    } else if (ec == bhttp::error::partial_message) {
      set_failure(HttpFailure::kProtocol, "answer from " + where + " was cut short");
    } else if (ec == bhttp::error::end_of_stream) {
      set_failure(ssl != nullptr ? HttpFailure::kTls : HttpFailure::kProtocol,
                  "connection to " + where + " failed: closed without an answer");
    } else if (ec && ec.category() != bhttp::make_error_code(bhttp::error::bad_version).category()) {
      // A reset or a TLS alert (a refused client certificate arrives here with TLS 1.3).
      set_failure(ssl != nullptr ? HttpFailure::kTls : HttpFailure::kUnreachable,
                  "connection to " + where + " failed: " + ec.message());
    } else if (ec || (parser.get().version() != 10 && parser.get().version() != 11)) {
      // Beast's parser errors (bad version, bad status line, ...), or a version other than 1.0/1.1.
      set_failure(HttpFailure::kProtocol, where + " did not answer with HTTP/1.x");
    } else {
      auto& response = parser.get();
      reply_.status = static_cast<int>(response.result_int());
      for (const auto& field : response)
        reply_.headers[lower(field.name_string())] = std::string(field.value());
      reply_.content_type = std::string(response[bhttp::field::content_type]);
      reply_.body = std::move(response.body());
    }
    error_code ignored;
    transport.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  const Endpoint& endpoint_;
  const std::string& target_;
  const ClientSecurity& security_;
  const HttpHeaders& headers_;
  HttpReply reply_;
  asio::io_context io_;  // declared before resolver_, so it outlives it (also when io.run() throws)
  std::optional<tcp::resolver> resolver_;
  bool resolving_ = false;
  bool resolve_timed_out_ = false;
};

}  // namespace

HttpReply http_get(const Endpoint& endpoint, const std::string& target, std::chrono::milliseconds timeout,
                   const ClientSecurity& security, const HttpHeaders& headers) {
  return Exchange(endpoint, target, security, headers).run(timeout);
}

}  // namespace rankstat::cli
