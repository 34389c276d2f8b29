#include "http_client.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

namespace rankstat::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Owns a socket descriptor.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until `fd` is ready for `events`; false on timeout or error.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

// Connects to the first address of `endpoint` that accepts within the deadline.
int connect_to(const Endpoint& endpoint, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  const int gai = ::getaddrinfo(endpoint.host.c_str(), endpoint.port.c_str(), &hints, &results);
  if (gai != 0) {
    error = "cannot resolve " + endpoint.host + ": " + ::gai_strerror(gai);
    return -1;
  }
  int connected = -1;
  error = "cannot connect to " + endpoint.display();
  for (addrinfo* ai = results; ai != nullptr && connected < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      int so_error = ETIMEDOUT;
      socklen_t length = sizeof so_error;
      if (wait_ready(fd, POLLOUT, deadline) &&
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &length) == 0) {
        rc = so_error == 0 ? 0 : -1;
        errno = so_error;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      connected = fd;
    } else {
      error = "cannot connect to " + endpoint.display() + ": " + std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(results);
  return connected;
}

// Decodes a chunked body; false if it is malformed or incomplete.
bool decode_chunked(std::string_view raw, std::string& out) {
  std::size_t pos = 0;
  for (;;) {
    const auto eol = raw.find("\r\n", pos);
    if (eol == std::string_view::npos) return false;
    std::size_t size = 0;
    std::size_t digits = 0;
    for (std::size_t i = pos; i < eol && std::isxdigit(static_cast<unsigned char>(raw[i])); ++i, ++digits) {
      const char c = raw[i];
      const std::size_t nibble =
          c <= '9' ? static_cast<std::size_t>(c - '0') : static_cast<std::size_t>(std::tolower(c) - 'a' + 10);
      if (size > (std::size_t{1} << 40)) return false;
      size = size * 16 + nibble;
    }
    if (digits == 0) return false;
    if (size == 0) return true;
    const std::size_t data = eol + 2;
    if (raw.size() < data + size + 2) return false;
    out.append(raw.substr(data, size));
    pos = data + size + 2;
  }
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t group = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size())
      group |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(group >> 18) & 63];
    out += kAlphabet[(group >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(group >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[group & 63] : '=';
  }
  return out;
}

std::string openssl_errors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    text += text.empty() ? "" : "; ";
    text += buffer;
  }
  return text.empty() ? "unknown TLS error" : text;
}

enum class IoStatus { kOk, kClosed, kTimeout, kFailed };

// A connected socket, plain or with a TLS session on top; both sides wait with poll() under one deadline.
class Connection {
 public:
  explicit Connection(int fd) : socket_(fd) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (context_ != nullptr) SSL_CTX_free(context_);
  }

  // Handshakes as a TLS client; false with `error` set when the daemon or its certificate is refused or
  // ours is.
  bool start_tls(const Endpoint& endpoint, const ClientSecurity& security, Clock::time_point deadline,
                 std::string& error) {
    context_ = SSL_CTX_new(TLS_client_method());
    if (context_ == nullptr) return tls_failure("cannot create a TLS context", error);
    SSL_CTX_set_min_proto_version(context_, TLS1_2_VERSION);
    // The server may close without close_notify once the response is complete (Content-Length tells).
    SSL_CTX_set_options(context_, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(context_, SSL_VERIFY_PEER, nullptr);
    const int trusted = security.ca_file.empty()
                            ? SSL_CTX_set_default_verify_paths(context_)
                            : SSL_CTX_load_verify_locations(context_, security.ca_file.c_str(), nullptr);
    if (trusted != 1) return tls_failure("cannot read the CA file " + security.ca_file, error);
    if (!security.cert_file.empty()) {
      const std::string& key = security.key_file.empty() ? security.cert_file : security.key_file;
      if (SSL_CTX_use_certificate_chain_file(context_, security.cert_file.c_str()) != 1) {
        return tls_failure("cannot read the client certificate " + security.cert_file, error);
      }
      if (SSL_CTX_use_PrivateKey_file(context_, key.c_str(), SSL_FILETYPE_PEM) != 1 ||
          SSL_CTX_check_private_key(context_) != 1) {
        return tls_failure("cannot use the client key " + key, error);
      }
    }
    ssl_ = SSL_new(context_);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, socket_.fd()) != 1) return tls_failure("cannot start TLS", error);
    // The daemon's certificate must name what we connect to: an IP address as an IP SAN, a host name as
    // a DNS SAN (then also sent as SNI).
    const std::string& name = security.server_name.empty() ? endpoint.host : security.server_name;
    unsigned char address[16];
    const bool is_ip =
        ::inet_pton(AF_INET, name.c_str(), address) == 1 || ::inet_pton(AF_INET6, name.c_str(), address) == 1;
    X509_VERIFY_PARAM* verify = SSL_get0_param(ssl_);
    if (is_ip) {
      X509_VERIFY_PARAM_set1_ip_asc(verify, name.c_str());
    } else {
      // SSL_set_tlsext_host_name without its C cast.
      SSL_ctrl(ssl_, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(name.c_str()));
      SSL_set1_host(ssl_, name.c_str());
    }
    for (;;) {
      const int rc = SSL_connect(ssl_);
      if (rc == 1) return true;
      const IoStatus status = wait_for_ssl(rc, deadline);
      if (status == IoStatus::kOk) continue;
      if (status == IoStatus::kTimeout) {
        error = "timed out in the TLS handshake with " + endpoint.display();
        return false;
      }
      const long verdict = SSL_get_verify_result(ssl_);
      const std::string reason =
          verdict != X509_V_OK ? std::string(X509_verify_cert_error_string(verdict)) : openssl_errors();
      error = "TLS handshake with " + endpoint.display() + " failed: " + reason;
      return false;
    }
  }

  IoStatus send_all(std::string_view data, Clock::time_point deadline) {
    std::size_t sent = 0;
    while (sent < data.size()) {
      if (ssl_ != nullptr) {
        const int n = SSL_write(ssl_, data.data() + sent, static_cast<int>(data.size() - sent));
        if (n > 0) {
          sent += static_cast<std::size_t>(n);
          continue;
        }
        if (const IoStatus status = wait_for_ssl(n, deadline); status != IoStatus::kOk) return status;
        continue;
      }
      if (!wait_ready(socket_.fd(), POLLOUT, deadline)) return IoStatus::kTimeout;
      const ssize_t n = ::send(socket_.fd(), data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return IoStatus::kFailed;
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    return IoStatus::kOk;
  }

  // Appends what arrives to `out`; kClosed at the end of the stream.
  IoStatus receive(std::string& out, Clock::time_point deadline) {
    char buffer[16384];
    for (;;) {
      if (ssl_ != nullptr) {
        const int n = SSL_read(ssl_, buffer, sizeof buffer);
        if (n > 0) {
          out.append(buffer, static_cast<std::size_t>(n));
          return IoStatus::kOk;
        }
        if (SSL_get_error(ssl_, n) == SSL_ERROR_ZERO_RETURN) return IoStatus::kClosed;
        if (const IoStatus status = wait_for_ssl(n, deadline); status != IoStatus::kOk) return status;
        continue;
      }
      if (!wait_ready(socket_.fd(), POLLIN, deadline)) return IoStatus::kTimeout;
      const ssize_t n = ::recv(socket_.fd(), buffer, sizeof buffer, 0);
      if (n == 0) return IoStatus::kClosed;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return IoStatus::kFailed;
      }
      out.append(buffer, static_cast<std::size_t>(n));
      return IoStatus::kOk;
    }
  }

 private:
  // After an SSL call returned `rc`: waits for what it needs; kFailed when it failed for good.
  IoStatus wait_for_ssl(int rc, Clock::time_point deadline) {
    switch (SSL_get_error(ssl_, rc)) {
      case SSL_ERROR_WANT_READ:
        return wait_ready(socket_.fd(), POLLIN, deadline) ? IoStatus::kOk : IoStatus::kTimeout;
      case SSL_ERROR_WANT_WRITE:
        return wait_ready(socket_.fd(), POLLOUT, deadline) ? IoStatus::kOk : IoStatus::kTimeout;
      case SSL_ERROR_ZERO_RETURN:
        return IoStatus::kClosed;
      default:
        return IoStatus::kFailed;
    }
  }

  bool tls_failure(const std::string& what, std::string& error) {
    error = what + ": " + openssl_errors();
    return false;
  }

  Socket socket_;
  SSL_CTX* context_ = nullptr;
  SSL* ssl_ = nullptr;
};

}  // namespace

HttpReply http_get(const Endpoint& endpoint, const std::string& target, std::chrono::milliseconds timeout,
                   const ClientSecurity& security) {
  HttpReply reply;
  const auto deadline = Clock::now() + timeout;
  const int fd = connect_to(endpoint, deadline, reply.error);
  if (fd < 0) {
    reply.failure = HttpFailure::kUnreachable;
    return reply;
  }
  Connection connection(fd);
  if (endpoint.tls && !connection.start_tls(endpoint, security, deadline, reply.error)) {
    reply.failure = HttpFailure::kTls;
    return reply;
  }
  std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + endpoint.display() +
                        "\r\nUser-Agent: rankstat/" RANKSTAT_VERSION
                        "\r\nAccept: application/json\r\nConnection: close\r\n";
  if (!security.username.empty()) {
    request += "Authorization: Basic " + base64(security.username + ":" + security.password) + "\r\n";
  }
  request += "\r\n";
  const IoStatus sent = connection.send_all(request, deadline);
  std::fill(request.begin(), request.end(), '\0');  // it may hold the password
  if (sent == IoStatus::kTimeout) {
    reply.failure = HttpFailure::kTimeout;
    reply.error = "timed out sending to " + endpoint.display();
    return reply;
  }
  if (sent != IoStatus::kOk) {
    reply.failure = HttpFailure::kUnreachable;
    reply.error = "cannot send to " + endpoint.display() + ": " + std::strerror(errno);
    return reply;
  }
  std::string raw;
  for (;;) {
    const IoStatus status = connection.receive(raw, deadline);
    if (status == IoStatus::kClosed) break;
    if (status == IoStatus::kTimeout) {
      reply.failure = HttpFailure::kTimeout;
      reply.error = "timed out waiting for " + endpoint.display() + target;
      return reply;
    }
    if (status == IoStatus::kFailed) {
      // A reset after a complete answer is still an answer; otherwise the daemon went away.
      if (!raw.empty()) break;
      reply.failure = endpoint.tls ? HttpFailure::kTls : HttpFailure::kUnreachable;
      reply.error = "connection to " + endpoint.display() + " failed" +
                    (endpoint.tls ? ": " + openssl_errors() : ": " + std::string(std::strerror(errno)));
      return reply;
    }
    if (raw.size() > (std::size_t{256} << 20)) {
      reply.failure = HttpFailure::kProtocol;
      reply.error = "answer from " + endpoint.display() + " is larger than 256 MiB";
      return reply;
    }
  }
  const auto header_end = raw.find("\r\n\r\n");
  int major = 0;
  int minor = 0;
  int status = 0;
  if (header_end == std::string::npos ||
      std::sscanf(raw.c_str(), "HTTP/%d.%d %d", &major, &minor, &status) != 3 || major != 1) {
    reply.failure = HttpFailure::kProtocol;
    reply.error = endpoint.display() + " did not answer with HTTP/1.x";
    return reply;
  }
  reply.status = status;
  bool chunked = false;
  std::size_t content_length = std::string::npos;
  std::string_view head(raw.data(), header_end);
  std::size_t line_start = head.find("\r\n");
  while (line_start != std::string_view::npos && line_start < head.size()) {
    line_start += 2;
    auto line_end = head.find("\r\n", line_start);
    if (line_end == std::string_view::npos) line_end = head.size();
    const std::string_view line = head.substr(line_start, line_end - line_start);
    const auto colon = line.find(':');
    if (colon != std::string_view::npos) {
      const std::string name = lower(line.substr(0, colon));
      const std::string value = trim(line.substr(colon + 1));
      if (name == "content-type") reply.content_type = value;
      if (name == "transfer-encoding") chunked = lower(value).find("chunked") != std::string::npos;
      if (name == "content-length")
        content_length = static_cast<std::size_t>(std::strtoull(value.c_str(), nullptr, 10));
    }
    line_start = line_end;
  }
  const std::string_view body(raw.data() + header_end + 4, raw.size() - header_end - 4);
  if (chunked) {
    if (!decode_chunked(body, reply.body)) {
      reply.failure = HttpFailure::kProtocol;
      reply.error = "incomplete chunked answer from " + endpoint.display();
    }
  } else if (content_length != std::string::npos) {
    if (body.size() < content_length) {
      reply.failure = HttpFailure::kProtocol;
      reply.error = "answer from " + endpoint.display() + " was cut short";
    } else {
      reply.body = std::string(body.substr(0, content_length));
    }
  } else {
    reply.body = std::string(body);
  }
  return reply;
}

}  // namespace rankstat::cli
