#pragma once

// A deliberately dumb blocking HTTP/1.x client over a raw loopback socket, so that tests control
// every byte sent (half requests, garbage, pipelining) and every read has a deadline: a server bug
// fails the test instead of hanging it. One instance belongs to one thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace rankstat::http::testing {

struct ClientResponse {
  std::string version;  // e.g. "HTTP/1.1"
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  bool has_header(const std::string& lower_case_name) const { return headers.count(lower_case_name) != 0; }
  std::string header(const std::string& lower_case_name) const;
};

// "GET <target> HTTP/1.1" with a Host header, any extra header lines (each ending in "\r\n") and the
// blank line.
std::string request_text(std::string_view method, std::string_view target,
                         std::string_view extra_header_lines = "");

class TestConnection {
 public:
  // Connects to 127.0.0.1:port; throws std::runtime_error when the connection is refused.
  // receive_buffer_bytes > 0 shrinks SO_RCVBUF so that the server's writes stay in flight.
  // A non-empty source_address (another loopback address, e.g. "127.0.0.2") makes the connection come
  // from a different peer as far as the server's per-peer limit is concerned.
  explicit TestConnection(std::uint16_t port, std::chrono::milliseconds io_timeout = std::chrono::seconds(10),
                          int receive_buffer_bytes = 0, const std::string& source_address = "");
  ~TestConnection();
  TestConnection(TestConnection&& other) noexcept;
  TestConnection& operator=(TestConnection&&) = delete;
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  void send(std::string_view bytes);
  // Reads one complete response; HEAD responses have no body whatever Content-Length says.
  // Throws std::runtime_error on timeout, on a close before the response is complete, or on
  // malformed framing.
  ClientResponse read_response(bool response_to_head = false);
  ClientResponse request(std::string_view method, std::string_view target,
                         std::string_view extra_header_lines = "");
  // Status line and headers only; the body is left to read_exactly().
  ClientResponse read_header();
  std::string read_exactly(std::size_t byte_count);
  // True when the server closes (EOF or reset) within `wait`; bytes received meanwhile are kept in
  // received().
  bool closed_by_server_within(std::chrono::milliseconds wait);
  const std::string& received() const { return pending_; }
  void close();

 private:
  enum class Received { data, closed, timed_out };  // closed: EOF or connection reset
  // One recv() into pending_. Throws on unexpected socket errors.
  Received receive_some(std::chrono::steady_clock::time_point deadline);
  void receive_or_throw(std::chrono::steady_clock::time_point deadline, const char* what_is_awaited);

  int fd_ = -1;
  std::chrono::milliseconds io_timeout_;
  std::string pending_;  // received and not yet consumed
};

}  // namespace rankstat::http::testing
