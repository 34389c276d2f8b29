#include "http_test_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace rankstat::http::testing {
namespace {

std::runtime_error socket_failure(const char* operation) {
  return std::runtime_error(std::string(operation) + ": " + std::generic_category().message(errno));
}

std::string lower_case(std::string_view text) {
  std::string lowered(text);
  for (char& c : lowered) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return lowered;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

ClientResponse parse_header_block(std::string_view block) {
  ClientResponse response;
  const std::size_t status_line_end = block.find("\r\n");
  const std::string_view status_line = block.substr(0, status_line_end);
  const std::size_t first_space = status_line.find(' ');
  if (first_space == std::string_view::npos || status_line.size() < first_space + 4) {
    throw std::runtime_error("malformed status line: " + std::string(status_line));
  }
  response.version = std::string(status_line.substr(0, first_space));
  response.status = static_cast<unsigned>(std::stoul(std::string(status_line.substr(first_space + 1, 3))));

  std::string_view rest =
      status_line_end == std::string_view::npos ? std::string_view{} : block.substr(status_line_end + 2);
  while (!rest.empty()) {
    const std::size_t line_end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, line_end);
    rest = line_end == std::string_view::npos ? std::string_view{} : rest.substr(line_end + 2);
    if (line.empty()) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      throw std::runtime_error("malformed header line: " + std::string(line));
    response.headers[lower_case(line.substr(0, colon))] = std::string(trim(line.substr(colon + 1)));
  }
  return response;
}

}  // namespace

std::string ClientResponse::header(const std::string& lower_case_name) const {
  const auto found = headers.find(lower_case_name);
  return found == headers.end() ? std::string() : found->second;
}

std::string request_text(std::string_view method, std::string_view target,
                         std::string_view extra_header_lines) {
  std::string text;
  text.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  text.append(extra_header_lines).append("\r\n");
  return text;
}

TestConnection::TestConnection(std::uint16_t port, std::chrono::milliseconds io_timeout,
                               int receive_buffer_bytes, const std::string& source_address)
    : io_timeout_(io_timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw socket_failure("socket");
  if (receive_buffer_bytes > 0 &&
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes) != 0) {
    const std::string reason =
        socket_failure("setsockopt(SO_RCVBUF)").what();  // before close() changes errno
    close();
    throw std::runtime_error(reason);
  }
  // Sends are blocking but bounded, like the reads.
  timeval send_timeout{};
  send_timeout.tv_sec = static_cast<time_t>(io_timeout.count() / 1000);
  send_timeout.tv_usec = static_cast<suseconds_t>((io_timeout.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);

  if (!source_address.empty()) {
    sockaddr_in source{};
    source.sin_family = AF_INET;
    if (::inet_pton(AF_INET, source_address.c_str(), &source.sin_addr) != 1 ||
        ::bind(fd_, reinterpret_cast<const sockaddr*>(&source), sizeof source) != 0) {
      close();
      throw std::runtime_error("cannot bind to source address " + source_address);
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const std::string reason = socket_failure("connect").what();  // before close() changes errno
    close();
    throw std::runtime_error(reason);
  }
}

TestConnection::~TestConnection() {
  close();
}

TestConnection::TestConnection(TestConnection&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      io_timeout_(other.io_timeout_),
      pending_(std::move(other.pending_)) {}

void TestConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TestConnection::send(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      throw socket_failure("send");
    }
    bytes.remove_prefix(static_cast<std::size_t>(sent));
  }
}

TestConnection::Received TestConnection::receive_some(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (remaining.count() <= 0) return Received::timed_out;
    pollfd readable{fd_, POLLIN, 0};
    const int ready = ::poll(&readable, 1, static_cast<int>(remaining.count()) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw socket_failure("poll");
    if (ready == 0) continue;  // the loop re-checks the deadline

    std::array<char, 65536> chunk{};
    const ssize_t received = ::recv(fd_, chunk.data(), chunk.size(), 0);
    if (received < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == ECONNRESET) return Received::closed;
      throw socket_failure("recv");
    }
    if (received == 0) return Received::closed;
    pending_.append(chunk.data(), static_cast<std::size_t>(received));
    return Received::data;
  }
}

void TestConnection::receive_or_throw(std::chrono::steady_clock::time_point deadline,
                                      const char* what_is_awaited) {
  switch (receive_some(deadline)) {
    case Received::data:
      return;
    case Received::closed:
      throw std::runtime_error(std::string("connection closed while waiting for ") + what_is_awaited);
    case Received::timed_out:
      throw std::runtime_error(std::string("timed out waiting for ") + what_is_awaited);
  }
}

ClientResponse TestConnection::read_header() {
  const auto deadline = std::chrono::steady_clock::now() + io_timeout_;
  std::size_t header_end = 0;
  while ((header_end = pending_.find("\r\n\r\n")) == std::string::npos) {
    receive_or_throw(deadline, "a complete response header");
  }
  ClientResponse response = parse_header_block(std::string_view(pending_).substr(0, header_end));
  pending_.erase(0, header_end + 4);
  return response;
}

std::string TestConnection::read_exactly(std::size_t byte_count) {
  const auto deadline = std::chrono::steady_clock::now() + io_timeout_;
  while (pending_.size() < byte_count) {
    receive_or_throw(deadline, "the rest of the body");
  }
  std::string bytes = pending_.substr(0, byte_count);
  pending_.erase(0, byte_count);
  return bytes;
}

ClientResponse TestConnection::read_response(bool response_to_head) {
  ClientResponse response = read_header();
  if (response_to_head) return response;
  if (!response.has_header("content-length")) throw std::runtime_error("response without Content-Length");
  response.body = read_exactly(std::stoull(response.header("content-length")));
  return response;
}

ClientResponse TestConnection::request(std::string_view method, std::string_view target,
                                       std::string_view extra_header_lines) {
  send(request_text(method, target, extra_header_lines));
  return read_response(method == "HEAD");
}

bool TestConnection::closed_by_server_within(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    switch (receive_some(deadline)) {
      case Received::data:
        continue;
      case Received::closed:
        return true;
      case Received::timed_out:
        return false;
    }
  }
}

}  // namespace rankstat::http::testing
