#include "http/gzip.hpp"
#include "http/http_server.hpp"
#include "http_test_client.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rankstat::http::Handler;
using rankstat::http::Request;
using rankstat::http::Response;
using rankstat::http::Server;
using rankstat::http::ServerOptions;
using rankstat::http::testing::ClientResponse;
using rankstat::http::testing::TestConnection;

namespace {

ServerOptions loopback_options() {
  ServerOptions options;
  options.listen_addresses = {"127.0.0.1:0"};
  return options;
}

// Runs one Server on its own io thread, as the daemon does. The destructor stops the server and
// waits a bounded time for the io thread to drain, so a hung connection cannot hang the test run.
class RunningServer {
 public:
  RunningServer(ServerOptions options, Handler handler) {
    server_.emplace(io_, std::move(options), std::move(handler));
    server_->start();
    io_finished_ = io_done_.get_future();
    io_thread_ = std::thread([this] {
      io_.run();
      io_done_.set_value();
    });
  }

  ~RunningServer() {
    boost::asio::post(io_, [this] { server_->stop(); });
    if (io_finished_.wait_for(5s) != std::future_status::ready) io_.stop();
    io_thread_.join();
    server_.reset();
  }

  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;

  Server& server() { return *server_; }
  [[nodiscard]] std::uint16_t port() const { return server_->port(); }

  // Runs `work` on the io thread, as the server's contract requires, and waits for it.
  template <typename Work>
  void run_on_io_thread(Work work) {
    std::promise<void> done;
    boost::asio::post(io_, [&] {
      work();
      done.set_value();
    });
    REQUIRE(done.get_future().wait_for(5s) == std::future_status::ready);
  }

 private:
  boost::asio::io_context io_;
  std::optional<Server> server_;
  std::promise<void> io_done_;
  std::future<void> io_finished_;
  std::thread io_thread_;
};

// The handler runs on the io thread while tests read from theirs: this is the only shared state.
class RequestLog {
 public:
  void record(const Request& request) {
    std::lock_guard lock(mutex_);
    requests_.push_back(request);
  }
  std::vector<Request> snapshot() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Request> requests_;
};

Response text_response(std::string body) {
  Response response;
  response.content_type = "text/plain";
  response.body = std::move(body);
  return response;
}

Handler echo_target_handler() {
  return [](const Request& request) {
    Response response;
    response.content_type = "text/plain; charset=utf-8";
    response.body = "you asked for " + request.target + "\n";
    return response;
  };
}

// Highly compressible and large enough to cross the 1 KiB compression threshold.
std::string metrics_like_body(std::size_t lines) {
  std::string body;
  for (std::size_t i = 0; i < lines; ++i) {
    body += "rankstat_samples_total{rank=\"" + std::to_string(i) + "\",job=\"train\"} " +
            std::to_string(i * 7) + "\n";
  }
  return body;
}

Handler compressible_handler(std::string body) {
  return [body = std::move(body)](const Request&) {
    Response response;
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    response.body = body;
    response.compressible = true;
    return response;
  };
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return predicate();
}

}  // namespace

TEST_CASE("a GET is answered with the handler's body, Content-Length and headers") {
  RequestLog log;
  RunningServer running(loopback_options(), [&log](const Request& request) {
    log.record(request);
    Response response;
    response.content_type = "text/plain; charset=utf-8";
    response.body = "hello from " + request.target;
    response.extra_headers = {{"Cache-Control", "no-store"}, {"X-Rankstat-Ranks", "8"}};
    return response;
  });
  TestConnection client(running.port());

  const ClientResponse response =
      client.request("GET", "/x?rank=3", "Accept: text/plain\r\nAccept-Encoding: identity\r\n");

  CHECK(response.status == 200);
  CHECK(response.version == "HTTP/1.1");
  CHECK(response.body == "hello from /x?rank=3");
  CHECK(response.header("content-length") == std::to_string(response.body.size()));
  CHECK(response.header("content-type") == "text/plain; charset=utf-8");
  CHECK(response.header("server") == "rankstatd");
  CHECK(response.header("cache-control") == "no-store");
  CHECK(response.header("x-rankstat-ranks") == "8");
  CHECK_FALSE(response.has_header("content-encoding"));
  CHECK_FALSE(response.has_header("vary"));

  const std::vector<Request> requests = log.snapshot();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].method == "GET");
  CHECK(requests[0].target == "/x?rank=3");
  CHECK(requests[0].accept_encoding == "identity");
  CHECK(running.server().counters().requests_total == 1);
}

TEST_CASE("a HEAD response carries the GET headers but no body") {
  RunningServer running(loopback_options(), echo_target_handler());
  TestConnection client(running.port());

  const ClientResponse head = client.request("HEAD", "/metrics");
  // Had the server sent body bytes after the HEAD header, this keep-alive GET would misparse.
  const ClientResponse get = client.request("GET", "/metrics");

  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(get.body == "you asked for /metrics\n");
  CHECK(head.header("content-length") == std::to_string(get.body.size()));
  CHECK(head.header("content-type") == get.header("content-type"));
  CHECK_FALSE(client.closed_by_server_within(100ms));
  CHECK(client.received().empty());
}

TEST_CASE("a client that accepts gzip gets a gzip body that decompresses to the original") {
  const std::string body = metrics_like_body(200);
  RunningServer running(loopback_options(), compressible_handler(body));
  TestConnection client(running.port());

  const ClientResponse response =
      client.request("GET", "/metrics", "Accept-Encoding: deflate, GZIP;q=0.8, br\r\n");

  CHECK(response.status == 200);
  CHECK(response.header("content-encoding") == "gzip");
  CHECK(response.header("vary") == "Accept-Encoding");
  CHECK(response.body.size() < body.size() / 4);
  CHECK(rankstat::http::gzip_decompress(response.body) == body);
}

TEST_CASE("a client that refuses gzip with q=0 gets plain text") {
  const std::string body = metrics_like_body(200);
  RunningServer running(loopback_options(), compressible_handler(body));
  TestConnection client(running.port());

  const ClientResponse response = client.request("GET", "/metrics", "Accept-Encoding: gzip;q=0, *;q=0.5\r\n");

  CHECK(response.status == 200);
  CHECK_FALSE(response.has_header("content-encoding"));
  CHECK(response.header("vary") == "Accept-Encoding");
  CHECK(response.body == body);
}

TEST_CASE("a client that asks for identity, or says nothing, gets plain text") {
  const std::string body = metrics_like_body(200);
  RunningServer running(loopback_options(), compressible_handler(body));
  TestConnection client(running.port());

  const ClientResponse identity = client.request("GET", "/metrics", "Accept-Encoding: identity\r\n");
  const ClientResponse silent = client.request("GET", "/metrics");

  for (const ClientResponse& response : {identity, silent}) {
    CHECK(response.status == 200);
    CHECK_FALSE(response.has_header("content-encoding"));
    CHECK(response.header("vary") == "Accept-Encoding");
    CHECK(response.body == body);
  }
}

TEST_CASE("a response chosen by other request headers names them in Vary before Accept-Encoding") {
  const std::string body = metrics_like_body(200);
  RunningServer running(loopback_options(), [&body](const Request&) {
    Response response;
    response.body = body;
    response.compressible = true;
    response.vary = "Accept";
    return response;
  });
  TestConnection client(running.port());

  const ClientResponse zipped = client.request("GET", "/metrics", "Accept-Encoding: gzip\r\n");
  const ClientResponse plain = client.request("GET", "/metrics");

  CHECK(zipped.header("vary") == "Accept, Accept-Encoding");
  CHECK(plain.header("vary") == "Accept, Accept-Encoding");
}

TEST_CASE("a response that is never compressed names only the headers that chose it in Vary") {
  RunningServer running(loopback_options(), [](const Request&) {
    Response response;
    response.body = "chosen by Accept\n";
    response.vary = "Accept";
    return response;
  });
  TestConnection client(running.port());

  const ClientResponse response = client.request("GET", "/metrics", "Accept-Encoding: gzip\r\n");

  CHECK_FALSE(response.has_header("content-encoding"));
  CHECK(response.header("vary") == "Accept");
}

TEST_CASE("an Accept-Encoding split over several header lines is read as one list") {
  const std::string body = metrics_like_body(200);
  RunningServer running(loopback_options(), compressible_handler(body));
  TestConnection client(running.port());

  const ClientResponse response =
      client.request("GET", "/metrics", "Accept-Encoding: br\r\nAccept-Encoding: gzip\r\n");

  CHECK(response.header("content-encoding") == "gzip");
  CHECK(rankstat::http::gzip_decompress(response.body) == body);
}

TEST_CASE("a compressible body under 1 KiB is sent uncompressed even to a gzip client") {
  RunningServer running(loopback_options(), compressible_handler("tiny body\n"));
  TestConnection client(running.port());

  const ClientResponse response = client.request("GET", "/metrics", "Accept-Encoding: gzip\r\n");

  CHECK_FALSE(response.has_header("content-encoding"));
  CHECK(response.header("vary") == "Accept-Encoding");
  CHECK(response.body == "tiny body\n");
}

TEST_CASE("a precompressed body is sent as-is to gzip clients and the plain body to the others") {
  const std::string body = metrics_like_body(100);
  const auto cached_gzip = std::make_shared<const std::string>(rankstat::http::gzip_compress(body, 9));
  RunningServer running(loopback_options(), [&body, cached_gzip](const Request&) {
    Response response;
    response.content_type = "text/plain";
    response.body = body;
    response.precompressed_gzip = cached_gzip;
    return response;
  });
  TestConnection client(running.port());

  const ClientResponse gzipped = client.request("GET", "/metrics", "Accept-Encoding: *\r\n");
  const ClientResponse plain = client.request("GET", "/metrics", "Accept-Encoding: br\r\n");

  CHECK(gzipped.header("content-encoding") == "gzip");
  CHECK(gzipped.body == *cached_gzip);
  CHECK_FALSE(plain.has_header("content-encoding"));
  CHECK(plain.body == body);
  CHECK(plain.header("vary") == "Accept-Encoding");
}

TEST_CASE("a HEAD request for a gzip response reports the compressed length") {
  const std::string body = metrics_like_body(200);
  RunningServer running(loopback_options(), compressible_handler(body));
  TestConnection client(running.port());

  const ClientResponse head = client.request("HEAD", "/metrics", "Accept-Encoding: gzip\r\n");
  const ClientResponse get = client.request("GET", "/metrics", "Accept-Encoding: gzip\r\n");

  CHECK(head.header("content-encoding") == "gzip");
  CHECK(head.body.empty());
  CHECK(head.header("content-length") == std::to_string(get.body.size()));
}

TEST_CASE("a POST is answered with 405 and an Allow header and the connection stays usable") {
  RequestLog log;
  RunningServer running(loopback_options(), [&log](const Request& request) {
    log.record(request);
    return text_response("ok");
  });
  TestConnection client(running.port());

  // The body must be consumed, not mistaken for the start of the next request.
  client.send(rankstat::http::testing::request_text("POST", "/metrics", "Content-Length: 5\r\n") + "hello");
  const ClientResponse rejected = client.read_response();
  CHECK(rejected.status == 405);
  CHECK(rejected.header("allow") == "GET, HEAD");
  CHECK(rejected.header("content-length") == std::to_string(rejected.body.size()));

  const ClientResponse accepted = client.request("GET", "/metrics");
  CHECK(accepted.status == 200);
  CHECK(accepted.body == "ok");
  CHECK(log.snapshot().size() == 1);
}

TEST_CASE("garbage bytes get a 400 and a close, and the next connection is still served") {
  RunningServer running(loopback_options(), echo_target_handler());

  TestConnection garbage(running.port());
  garbage.send(std::string("\x16\x03\x01\x02\x00 not http at all\r\n\r\n", 23));
  const ClientResponse rejected = garbage.read_response();
  CHECK(rejected.status == 400);
  CHECK(rejected.header("connection") == "close");
  CHECK(garbage.closed_by_server_within(3s));

  TestConnection next(running.port());
  CHECK(next.request("GET", "/after").body == "you asked for /after\n");
  CHECK(running.server().counters().bad_requests_total == 1);
}

TEST_CASE("a 20 KiB request header gets 431 and the connection is closed") {
  RunningServer running(loopback_options(), echo_target_handler());
  TestConnection client(running.port());

  client.send(rankstat::http::testing::request_text(
      "GET", "/metrics", "X-Padding: " + std::string(std::size_t{20} * 1024, 'a') + "\r\n"));
  const ClientResponse response = client.read_response();

  CHECK(response.status == 431);
  CHECK(client.closed_by_server_within(3s));
  CHECK(running.server().counters().bad_requests_total == 1);
}

TEST_CASE("a request body over the limit gets 413") {
  RunningServer running(loopback_options(), echo_target_handler());
  TestConnection client(running.port());

  client.send(rankstat::http::testing::request_text("GET", "/metrics", "Content-Length: 100000\r\n"));
  const ClientResponse response = client.read_response();

  CHECK(response.status == 413);
  CHECK(client.closed_by_server_within(3s));
}

TEST_CASE(
    "a slow client that sends half a request is cut off after the read timeout while others are served") {
  ServerOptions options = loopback_options();
  options.read_timeout = 300ms;
  RunningServer running(options, echo_target_handler());

  TestConnection slow(running.port());
  const auto started = std::chrono::steady_clock::now();
  slow.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");

  TestConnection prompt(running.port());
  CHECK(prompt.request("GET", "/prompt").status == 200);

  REQUIRE(slow.closed_by_server_within(5s));
  const auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(elapsed >= 250ms);
  CHECK(elapsed < 3s);
  CHECK(slow.received().empty());
}

TEST_CASE("a keep-alive connection left idle is closed after the idle timeout") {
  ServerOptions options = loopback_options();
  options.idle_keepalive_timeout = 300ms;
  RunningServer running(options, echo_target_handler());
  TestConnection client(running.port());

  CHECK(client.request("GET", "/once").status == 200);
  const auto idle_since = std::chrono::steady_clock::now();

  REQUIRE(client.closed_by_server_within(5s));
  CHECK(std::chrono::steady_clock::now() - idle_since >= 250ms);
}

TEST_CASE("at the connection limit the connection idle longest is evicted to admit a newcomer") {
  constexpr std::size_t kMaxConnections = 5;
  ServerOptions options = loopback_options();
  options.max_connections = kMaxConnections;
  options.max_connections_per_peer = 0;
  RunningServer running(options, echo_target_handler());

  std::vector<TestConnection> idle;
  for (std::size_t i = 0; i < kMaxConnections; ++i) {
    idle.emplace_back(running.port());
    CHECK(idle.back().request("GET", "/warm").status == 200);  // now idle between requests, in this order
  }
  REQUIRE(eventually([&] { return running.server().active_connections() == kMaxConnections; }));

  TestConnection newcomer(running.port());
  CHECK(newcomer.request("GET", "/new").body == "you asked for /new\n");
  CHECK(idle[0].closed_by_server_within(3s));
  for (std::size_t i = 1; i < kMaxConnections; ++i) CHECK_FALSE(idle[i].closed_by_server_within(50ms));
  CHECK(idle[1].request("GET", "/kept").body == "you asked for /kept\n");
  CHECK(running.server().counters().connections_evicted_idle_total == 1);
  CHECK(running.server().counters().connections_rejected_total == 0);
  CHECK(running.server().active_connections() == kMaxConnections);
}

TEST_CASE(
    "idle connections are evicted before ones reading headers, the slowest header reader next, and a "
    "connection that has sent nothing yet counts as a header reader") {
  ServerOptions options = loopback_options();
  options.max_connections = 3;
  options.max_connections_per_peer = 0;
  RunningServer running(options, echo_target_handler());

  TestConnection slowest(running.port());
  slowest.send("GET /a HTTP/1.1\r\n");
  std::this_thread::sleep_for(50ms);
  TestConnection slow(running.port());
  slow.send("GET /b HTTP/1.1\r\n");
  std::this_thread::sleep_for(50ms);
  // Newest and silent: a scraper that has just connected, not an idle client. Ranked as an idle
  // connection, every flood of newcomers would evict it before its request arrives.
  TestConnection silent(running.port());
  REQUIRE(eventually([&] { return running.server().active_connections() == 3; }));

  // No idle connection: the header reader waiting longest makes room.
  TestConnection first(running.port());
  CHECK(first.request("GET", "/first").status == 200);
  CHECK(slowest.closed_by_server_within(3s));
  CHECK_FALSE(silent.closed_by_server_within(50ms));

  // `first` is idle again after its answer and goes before any header reader.
  TestConnection second(running.port());
  second.send("GET /second HTTP/1.1\r\n");
  CHECK(first.closed_by_server_within(3s));
  // Three header readers again (slow, silent, second): the one waiting longest goes.
  TestConnection third(running.port());
  CHECK(third.request("GET", "/third").status == 200);
  CHECK(slow.closed_by_server_within(3s));
  CHECK_FALSE(silent.closed_by_server_within(50ms));
  CHECK_FALSE(second.closed_by_server_within(50ms));
  CHECK(running.server().counters().connections_evicted_idle_total == 1);
  CHECK(running.server().counters().connections_evicted_reading_headers_total == 2);
}

TEST_CASE("a newcomer gets 503 only when every open connection is busy writing a response") {
  constexpr std::size_t kBodyBytes = std::size_t{16} << 20;
  const std::string large_body(kBodyBytes, 'x');
  ServerOptions options = loopback_options();
  options.max_connections = 2;
  options.max_connections_per_peer = 0;
  RunningServer running(options, [&large_body](const Request&) {
    Response response;
    response.content_type = "application/octet-stream";
    response.shared_body = std::make_shared<const std::string>(large_body);
    return response;
  });
  // Small receive windows keep both 16 MiB responses in the writing phase.
  std::vector<TestConnection> downloaders;
  for (int i = 0; i < 2; ++i) {
    downloaders.emplace_back(running.port(), 20s, 16 * 1024);
    downloaders.back().send(rankstat::http::testing::request_text("GET", "/large"));
    REQUIRE(downloaders.back().read_header().status == 200);
  }
  TestConnection refused(running.port());
  CHECK(refused.closed_by_server_within(3s));
  CHECK(refused.received().rfind("HTTP/1.1 503", 0) == 0);
  CHECK(running.server().counters().connections_rejected_total == 1);

  downloaders[0].close();
  REQUIRE(eventually([&] { return running.server().active_connections() == 1; }));
  TestConnection latecomer(running.port(), 20s);
  latecomer.send(rankstat::http::testing::request_text("GET", "/late"));
  CHECK(latecomer.read_header().status == 200);
}

TEST_CASE("a peer holding max_connections_per_peer gets 503 while another address is served") {
  ServerOptions options = loopback_options();
  options.max_connections_per_peer = 3;
  RunningServer running(options, echo_target_handler());

  std::vector<TestConnection> held;
  for (int i = 0; i < 3; ++i) held.emplace_back(running.port(), 10s, 0, "127.0.0.2");
  REQUIRE(eventually([&] { return running.server().active_connections() == 3; }));

  TestConnection fourth(running.port(), 10s, 0, "127.0.0.2");
  CHECK(fourth.closed_by_server_within(3s));
  CHECK(fourth.received().rfind("HTTP/1.1 503", 0) == 0);
  CHECK(fourth.received().find("from your address") != std::string::npos);
  CHECK(running.server().counters().connections_refused_per_peer_total == 1);

  TestConnection other_peer(running.port());
  CHECK(other_peer.request("GET", "/other").status == 200);
  held[0].close();
  REQUIRE(eventually([&] { return running.server().active_connections() == 3; }));
  TestConnection again(running.port(), 10s, 0, "127.0.0.2");
  CHECK(again.request("GET", "/again").status == 200);
}

TEST_CASE(
    "a client that does not finish its headers within the header timeout is closed before the read timeout") {
  ServerOptions options = loopback_options();
  options.header_timeout = 300ms;
  options.read_timeout = 10s;
  RunningServer running(options, echo_target_handler());

  TestConnection silent(running.port());
  TestConnection dripping(running.port());
  const auto started = std::chrono::steady_clock::now();
  dripping.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  REQUIRE(dripping.closed_by_server_within(5s));
  REQUIRE(silent.closed_by_server_within(5s));
  const auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(elapsed >= 250ms);
  CHECK(elapsed < 3s);
  CHECK(dripping.received().empty());
  // Beast closes the socket when the deadline fires and completes the read (which counts) afterwards.
  CHECK(eventually([&] { return running.server().counters().header_timeouts_total == 2; }));
}

TEST_CASE("a request body may arrive after the header timeout as long as the read timeout holds") {
  ServerOptions options = loopback_options();
  options.header_timeout = 200ms;
  options.read_timeout = 3s;
  RunningServer running(options, echo_target_handler());

  TestConnection client(running.port());
  client.send("GET /with-body HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n\r\n");
  std::this_thread::sleep_for(500ms);
  client.send("body");
  CHECK(client.read_response().body == "you asked for /with-body\n");
  CHECK(running.server().counters().header_timeouts_total == 0);
}

TEST_CASE("50 concurrent clients doing keep-alive requests all get their own answers") {
  constexpr int kClients = 50;
  constexpr int kRequestsPerClient = 5;
  ServerOptions options = loopback_options();
  options.max_connections_per_peer = 0;  // every client is 127.0.0.1
  RunningServer running(options, echo_target_handler());

  // Catch2 assertions are not thread-safe: workers record failures, the test thread checks them.
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> clients;
  clients.reserve(kClients);
  for (int client_index = 0; client_index < kClients; ++client_index) {
    clients.emplace_back([&, client_index] {
      try {
        TestConnection client(running.port());
        for (int request_index = 0; request_index < kRequestsPerClient; ++request_index) {
          const std::string target =
              "/c" + std::to_string(client_index) + "/r" + std::to_string(request_index);
          const ClientResponse response = client.request("GET", target);
          if (response.status != 200 || response.body != "you asked for " + target + "\n") {
            failures[static_cast<std::size_t>(client_index)] =
                "wrong answer for " + target + ": " + response.body;
            return;
          }
        }
      } catch (const std::exception& error) {
        failures[static_cast<std::size_t>(client_index)] = error.what();
      }
    });
  }
  for (std::thread& client : clients) client.join();

  for (const std::string& failure : failures) CHECK(failure.empty());
  CHECK(running.server().counters().requests_total == std::uint64_t{kClients} * kRequestsPerClient);
}

TEST_CASE("a handler exception becomes a 500 and the server keeps serving") {
  RunningServer running(loopback_options(), [](const Request& request) {
    if (request.target == "/boom") throw std::runtime_error("segment vanished");
    return text_response("fine");
  });
  TestConnection client(running.port());

  const ClientResponse failed = client.request("GET", "/boom");
  const ClientResponse recovered = client.request("GET", "/fine");

  CHECK(failed.status == 500);
  CHECK_FALSE(failed.body.empty());
  CHECK(failed.body.find("segment vanished") == std::string::npos);  // internals stay in the log
  CHECK(recovered.status == 200);
  CHECK(recovered.body == "fine");
}

TEST_CASE("a handler throwing a non-standard exception also gets a 500") {
  RunningServer running(loopback_options(), [](const Request& request) -> Response {
    if (request.target == "/odd") throw 42;
    return text_response("fine");
  });
  TestConnection client(running.port());

  CHECK(client.request("GET", "/odd").status == 500);
  CHECK(client.request("GET", "/fine").status == 200);
}

TEST_CASE("a response whose headers cannot be sent becomes a 500 and the server keeps serving") {
  RunningServer running(loopback_options(), [](const Request& request) {
    Response response = text_response("fine");
    if (request.target == "/huge-header")
      response.extra_headers.emplace_back("X-Huge", std::string(100000, 'h'));
    return response;
  });
  TestConnection client(running.port());

  CHECK(client.request("GET", "/huge-header").status == 500);
  CHECK(client.request("GET", "/fine").body == "fine");
}

TEST_CASE("a server without a handler is refused at construction") {
  boost::asio::io_context io;
  CHECK_THROWS_AS(Server(io, loopback_options(), Handler{}), std::invalid_argument);
}

TEST_CASE("an HTTP/1.0 request is answered and then the connection is closed") {
  RunningServer running(loopback_options(), echo_target_handler());
  TestConnection client(running.port());

  client.send("GET /old HTTP/1.0\r\n\r\n");
  const ClientResponse response = client.read_response();

  CHECK(response.version == "HTTP/1.0");
  CHECK(response.body == "you asked for /old\n");
  CHECK(client.closed_by_server_within(3s));
}

TEST_CASE("an HTTP/1.0 request asking for keep-alive keeps the connection open") {
  RunningServer running(loopback_options(), echo_target_handler());
  TestConnection client(running.port());

  client.send("GET /one HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  const ClientResponse first = client.read_response();
  client.send("GET /two HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  const ClientResponse second = client.read_response();

  CHECK(first.header("connection") == "keep-alive");
  CHECK(second.body == "you asked for /two\n");
}

TEST_CASE("an HTTP/1.1 client asking to close gets Connection: close and a close") {
  RunningServer running(loopback_options(), echo_target_handler());
  TestConnection client(running.port());

  const ClientResponse response = client.request("GET", "/bye", "Connection: close\r\n");

  CHECK(response.header("connection") == "close");
  CHECK(client.closed_by_server_within(3s));
}

TEST_CASE("pipelined requests are answered in order") {
  RunningServer running(loopback_options(), echo_target_handler());
  TestConnection client(running.port());

  client.send(rankstat::http::testing::request_text("GET", "/first") +
              rankstat::http::testing::request_text("HEAD", "/second") +
              rankstat::http::testing::request_text("GET", "/third"));

  CHECK(client.read_response().body == "you asked for /first\n");
  CHECK(client.read_response(true).status == 200);
  CHECK(client.read_response().body == "you asked for /third\n");
}

TEST_CASE("stop() called from the handler still delivers that response and then closes") {
  Server* server = nullptr;
  RunningServer running(loopback_options(), [&server](const Request& request) {
    if (request.target == "/quit") server->stop();
    return text_response("bye");
  });
  server = &running.server();
  TestConnection client(running.port());

  const ClientResponse response = client.request("GET", "/quit");

  CHECK(response.status == 200);
  CHECK(response.body == "bye");
  CHECK(response.header("connection") == "close");
  CHECK(client.closed_by_server_within(3s));
  CHECK_THROWS_AS(TestConnection(running.port()), std::runtime_error);
}

TEST_CASE("stop() finishes a large in-flight response and closes idle keep-alive connections") {
  constexpr std::size_t kBodyBytes = std::size_t{16} << 20;
  std::string large_body(kBodyBytes, 'x');
  for (std::size_t i = 0; i < kBodyBytes; i += 4096) large_body[i] = static_cast<char>('a' + (i / 4096) % 26);
  RunningServer running(loopback_options(), [&large_body](const Request& request) {
    Response response;
    response.content_type = "application/octet-stream";
    response.body = request.target == "/large" ? large_body : "small";
    return response;
  });

  TestConnection idle(running.port());
  CHECK(idle.request("GET", "/small").body == "small");

  // A small receive window keeps most of the 16 MiB in the server's hands when stop() runs.
  TestConnection downloader(running.port(), 20s, 16 * 1024);
  downloader.send(rankstat::http::testing::request_text("GET", "/large"));
  const ClientResponse header = downloader.read_header();
  REQUIRE(header.status == 200);
  REQUIRE(header.header("content-length") == std::to_string(kBodyBytes));

  running.run_on_io_thread([&running] { running.server().stop(); });

  CHECK(idle.closed_by_server_within(3s));
  CHECK_THROWS_AS(TestConnection(running.port()), std::runtime_error);
  CHECK(downloader.read_exactly(kBodyBytes) == large_body);
  CHECK(downloader.closed_by_server_within(3s));
}

TEST_CASE("port 0 binds an ephemeral port reported by port() and bound_address()") {
  RunningServer running(loopback_options(), echo_target_handler());

  CHECK(running.port() != 0);
  CHECK(running.server().bound_address() == "127.0.0.1:" + std::to_string(running.port()));
}

TEST_CASE("a bracketed IPv6 loopback address is accepted") {
  boost::asio::io_context io;
  ServerOptions options;
  options.listen_addresses = {"[::1]:0"};
  std::optional<Server> server;
  try {
    server.emplace(io, options, echo_target_handler());
  } catch (const std::runtime_error& error) {
    WARN("IPv6 loopback unavailable here, skipping: " << error.what());
    return;
  }
  CHECK(server->bound_address() == "[::1]:" + std::to_string(server->port()));
}

TEST_CASE("listening on a port already in use throws an error naming the address") {
  RunningServer running(loopback_options(), echo_target_handler());
  boost::asio::io_context io;
  ServerOptions options;
  options.listen_addresses = {"127.0.0.1:" + std::to_string(running.port())};

  try {
    Server clash(io, options, echo_target_handler());
    FAIL("binding an address in use succeeded");
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    CHECK(message.find(options.listen_addresses.front()) != std::string::npos);
    CHECK(message.find("in use") != std::string::npos);
  }
}

TEST_CASE("malformed listen addresses are rejected with a clear message") {
  boost::asio::io_context io;
  for (const std::string address :
       {"9473", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http", "[::1:9473", "::1:9473", "[]:9473"}) {
    ServerOptions options;
    options.listen_addresses = {address};
    INFO("listen address " << address);
    try {
      Server server(io, options, echo_target_handler());
      FAIL("accepted a malformed address");
    } catch (const std::runtime_error& error) {
      CHECK(std::string(error.what()).find(address) != std::string::npos);
    }
  }
}
