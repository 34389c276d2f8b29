// The CLI's HTTP client against a tiny server in the test: one thread, POSIX sockets on 127.0.0.1 with an
// ephemeral port, serving one canned answer per connection (or none, for the timeout).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "http_client.hpp"

using namespace std::chrono_literals;
using rankstat::cli::Endpoint;
using rankstat::cli::http_get;
using rankstat::cli::HttpFailure;

namespace {

// Listens on 127.0.0.1:0; serve() answers one connection on a thread and keeps the request it read.
class OneShotServer {
 public:
  OneShotServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd_, 4) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
  }
  ~OneShotServer() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  OneShotServer(const OneShotServer&) = delete;
  OneShotServer& operator=(const OneShotServer&) = delete;

  Endpoint endpoint() const { return Endpoint{"127.0.0.1", std::to_string(port_), false}; }

  // Answers the next connection with `answer` once the request's headers are in; with `hold`, answers
  // nothing and keeps the connection open that long.
  void serve(std::string answer, std::chrono::milliseconds hold = 0ms) {
    thread_ = std::thread([this, answer = std::move(answer), hold] {
      const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      char buffer[4096];
      while (request_.find("\r\n\r\n") == std::string::npos) {
        pollfd ready{client, POLLIN, 0};
        if (::poll(&ready, 1, 5000) <= 0) break;
        const ssize_t got = ::read(client, buffer, sizeof buffer);
        if (got <= 0) break;
        request_.append(buffer, static_cast<std::size_t>(got));
      }
      if (hold > 0ms) {
        std::this_thread::sleep_for(hold);
      } else {
        std::size_t sent = 0;
        while (sent < answer.size()) {
          const ssize_t n = ::write(client, answer.data() + sent, answer.size() - sent);
          if (n <= 0) break;
          sent += static_cast<std::size_t>(n);
        }
      }
      ::close(client);
    });
  }

  // The request as received; call after the exchange (joins the server thread).
  const std::string& request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::string request_;
};

std::string answer(int status, const std::string& reason, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// A port nothing listens on: bound, then closed.
std::string free_port() {
  OneShotServer probe;
  return probe.endpoint().port;
}

}  // namespace

TEST_CASE("the HTTP client returns the status, content type and body of a 200 answer") {
  OneShotServer server;
  server.serve(answer(200, "OK", R"({"ranks":[]})"));
  const auto reply = http_get(server.endpoint(), "/api/v1/ranks", 5s);
  CHECK(reply.failure == HttpFailure::kNone);
  CHECK(reply.status == 200);
  CHECK(reply.content_type == "application/json");
  CHECK(reply.body == R"({"ranks":[]})");
  const std::string& request = server.request();
  CHECK(request.starts_with("GET /api/v1/ranks HTTP/1.1\r\n"));
  CHECK(request.find("Authorization") == std::string::npos);
}

TEST_CASE("the HTTP client reads a chunked answer") {
  OneShotServer server;
  server.serve(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  const auto reply = http_get(server.endpoint(), "/", 5s);
  CHECK(reply.failure == HttpFailure::kNone);
  CHECK(reply.body == "abcde");
}

TEST_CASE("the HTTP client hands a non-200 status to the caller rather than failing") {
  OneShotServer server;
  server.serve(answer(404, "Not Found", "no such rank"));
  const auto reply = http_get(server.endpoint(), "/api/v1/ranks/x", 5s);
  CHECK(reply.failure == HttpFailure::kNone);
  CHECK(reply.status == 404);
  CHECK(reply.body == "no such rank");
}

TEST_CASE("the HTTP client sends basic-auth credentials when given a user") {
  OneShotServer server;
  server.serve(answer(200, "OK", "{}"));
  rankstat::cli::ClientSecurity security;
  security.username = "operator";
  security.password = "secret";
  const auto reply = http_get(server.endpoint(), "/", 5s, security);
  CHECK(reply.status == 200);
  // base64("operator:secret")
  CHECK(server.request().find("\r\nAuthorization: Basic b3BlcmF0b3I6c2VjcmV0\r\n") != std::string::npos);
}

TEST_CASE("the HTTP client reports a refused connection as unreachable, naming the address") {
  const Endpoint nobody{"127.0.0.1", free_port(), false};
  const auto reply = http_get(nobody, "/", 5s);
  CHECK(reply.failure == HttpFailure::kUnreachable);
  CHECK(reply.error == "cannot connect to 127.0.0.1:" + nobody.port + ": Connection refused");
}

TEST_CASE("the HTTP client gives up on a server that never answers within its timeout") {
  OneShotServer server;
  server.serve("", 3s);
  const auto start = std::chrono::steady_clock::now();
  const auto reply = http_get(server.endpoint(), "/", 300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(reply.failure == HttpFailure::kTimeout);
  CHECK(reply.error.find("timed out") != std::string::npos);
  CHECK(took >= 250ms);
  CHECK(took < 2s);
}

TEST_CASE("the HTTP client refuses an answer that is not HTTP") {
  OneShotServer server;
  server.serve("SSH-2.0-OpenSSH_9.2\r\n\r\n");
  const auto reply = http_get(server.endpoint(), "/", 5s);
  CHECK(reply.failure == HttpFailure::kProtocol);
  CHECK_FALSE(reply.error.empty());
}

TEST_CASE("the HTTP client sends extra header fields and returns the answer's fields by lower-case name") {
  OneShotServer server;
  server.serve("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nX-Thing: a b\r\nContent-Length: 2\r\n\r\nzz");
  const auto reply = http_get(server.endpoint(), "/metrics", 5s, {}, {{"Accept-Encoding", "gzip"}});
  CHECK(reply.status == 200);
  CHECK(reply.headers.at("content-encoding") == "gzip");
  CHECK(reply.headers.at("x-thing") == "a b");
  CHECK(reply.body == "zz");  // returned as sent: no decoding
  CHECK(server.request().find("\r\nAccept-Encoding: gzip\r\n") != std::string::npos);
}

TEST_CASE("the HTTP client reports an answer cut short of its Content-Length") {
  OneShotServer server;
  server.serve("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this");
  const auto reply = http_get(server.endpoint(), "/", 5s);
  CHECK(reply.failure == HttpFailure::kProtocol);
  CHECK(reply.error.find("cut short") != std::string::npos);
}
