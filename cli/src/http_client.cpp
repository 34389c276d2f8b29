#include "http_client.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
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

}  // namespace

HttpReply http_get(const Endpoint& endpoint, const std::string& target, std::chrono::milliseconds timeout) {
  HttpReply reply;
  const auto deadline = Clock::now() + timeout;
  const int fd = connect_to(endpoint, deadline, reply.error);
  if (fd < 0) {
    reply.failure = HttpFailure::kUnreachable;
    return reply;
  }
  Socket socket(fd);
  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + endpoint.display() +
                              "\r\nUser-Agent: rankstat/" RANKSTAT_VERSION
                              "\r\nAccept: application/json\r\nConnection: close\r\n\r\n";
  std::size_t sent = 0;
  while (sent < request.size()) {
    if (!wait_ready(fd, POLLOUT, deadline)) {
      reply.failure = HttpFailure::kTimeout;
      reply.error = "timed out sending to " + endpoint.display();
      return reply;
    }
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      reply.failure = HttpFailure::kUnreachable;
      reply.error = "cannot send to " + endpoint.display() + ": " + std::strerror(errno);
      return reply;
    }
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  std::string raw;
  char buffer[16384];
  for (;;) {
    if (!wait_ready(fd, POLLIN, deadline)) {
      reply.failure = HttpFailure::kTimeout;
      reply.error = "timed out waiting for " + endpoint.display() + target;
      return reply;
    }
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      // A reset after a complete answer is still an answer; otherwise the daemon went away.
      if (errno == ECONNRESET && !raw.empty()) break;
      reply.failure = HttpFailure::kUnreachable;
      reply.error = "connection to " + endpoint.display() + " failed: " + std::strerror(errno);
      return reply;
    }
    raw.append(buffer, static_cast<std::size_t>(n));
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
