// The real rankstatd's HTTP listener under abuse: malformed and oversized requests, unknown paths and
// methods, slow clients, more connections than allowed, 50 concurrent scrapers. It keeps answering,
// with bounded memory, and nothing over HTTP changes its state. (tests/unit/http covers the transport
// in-process; this is the daemon as deployed.)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "fault_support.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace rankstat::faults;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kFlags = {"--shm.scan-interval=100ms", "--liveness.interval=50ms",
                                         "--web.read-timeout=1s"};

// ASan keeps freed memory in quarantine (up to 256 MiB), so resident size says little there.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t kMaxRssGrowthKib = 512 * 1024;
#else
constexpr std::uint64_t kMaxRssGrowthKib = 32 * 1024;
#endif

std::string scrape(DaemonUnderTest& daemon) {
  auto r = daemon.get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

struct Served {
  Served() : writer(shm.path(), {"--mode=paced", "--pace-us=2000", "--seconds=120"}) {
    REQUIRE(writer.wait_ready());
  }
  TempDir shm;
  FaultWriter writer;
};

// A connection from a chosen loopback source address (all of 127.0.0.0/8 is local on Linux), so that
// one test process can play many peers. Non-blocking (connected at return unless `wait_connected` is
// false); -1 on failure.
int connect_from(const std::string& source, int port, bool wait_connected = true) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (wait_connected ? 0 : SOCK_NONBLOCK), 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS)) {
    ::close(fd);
    return -1;
  }
  if (wait_connected) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

int status_of(const std::string& reply) {
  int status = 0;
  if (std::sscanf(reply.c_str(), "HTTP/1.%*d %d", &status) != 1) return 0;
  return status;
}

std::vector<std::string> malformed_requests() {
  std::vector<std::string> out = {
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\n",
      "GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'x'),
      "GET /" + std::string(100000, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(64 * 1024, 'b') + "\r\n\r\n",
      std::string("GET /\0metrics HTTP/1.1\r\nHost: a\r\n\r\n", 36),
      std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11),  // a TLS ClientHello
  };
  std::string many_headers = "GET /metrics HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 2000; ++i) many_headers += "X-" + std::to_string(i) + ": v\r\n";
  out.push_back(many_headers + "\r\n");
  std::mt19937 random(6);
  for (int n = 0; n < 8; ++n) {
    std::string noise(4096 << (n % 4), '\0');
    for (char& c : noise) c = static_cast<char>(random());
    out.push_back(noise);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "malformed and oversized requests get 4xx answers and the daemon keeps serving with bounded memory") {
  Served served;
  DaemonUnderTest daemon(served.shm.path(), kFlags);
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));
  for (int i = 0; i < 20; ++i) scrape(daemon);  // warm up: the steady state is the baseline
  const auto rss_before = rss_kib(daemon.process().pid());
  REQUIRE(rss_before);
  const std::vector<std::string> bad = malformed_requests();
  std::uint64_t sent = 0;
  std::uint64_t answered_4xx = 0;
  for (int round = 0; round < 10; ++round) {
    for (const std::string& request : bad) {
      const auto reply = raw_exchange(daemon.port(), request, 3s);
      REQUIRE(reply);
      ++sent;
      const int status = status_of(*reply);
      INFO(request.substr(0, 60));
      CHECK((status == 0 || (status >= 400 && status < 500)));  // an error answer, or just a close
      if (status >= 400 && status < 500) ++answered_4xx;
    }
    CHECK(value_of(scrape(daemon), "sglang:test_events_total").has_value());
  }
  const auto rss_after = rss_kib(daemon.process().pid());
  REQUIRE(rss_after);
  INFO("RSS before " << *rss_before << " KiB, after " << *rss_after << " KiB");
  CHECK(*rss_after <= *rss_before + kMaxRssGrowthKib);
  const std::string text = scrape(daemon);
  CHECK(value_of(text, "rankstat_http_bad_requests_total").value_or(0) >=
        static_cast<double>(answered_4xx) * 0.9);
  CHECK(answered_4xx >= sent / 2);
  CHECK(daemon.process().running());
  std::printf("malformed requests: %llu sent, %llu answered 4xx, RSS %llu -> %llu KiB\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(answered_4xx),
              static_cast<unsigned long long>(*rss_before), static_cast<unsigned long long>(*rss_after));
  report_count("http_malformed_requests", sent);
}

TEST_CASE("unknown paths get 404 and no method but GET or HEAD reaches any endpoint or changes anything") {
  Served served;
  DaemonUnderTest daemon(served.shm.path(), kFlags);
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));
  const auto files_before = served.shm.list();
  const auto ranks_before = daemon.get("/api/v1/ranks");
  REQUIRE(ranks_before);
  std::uint64_t requests = 0;
  for (const std::string target :
       {"/nope", "/metrics/extra", "/metricsx", "/api/v2/ranks", "/healthz/x", "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd", "/api/v1/ranks/no.such.rank", "/api/v1/ranks/%22%5C",
        "/api/v1/ranks/../../metrics"}) {
    const auto r = daemon.get(target);
    REQUIRE(r);
    ++requests;
    INFO(target);
    CHECK(r->status == 404);
  }
  const auto long_path = daemon.get("/" + std::string(4000, 'x'));
  REQUIRE(long_path);
  CHECK(long_path->status == 404);
  ++requests;
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "PROPFIND"}) {
    for (const char* target : {"/", "/metrics", "/healthz", "/readyz", "/api/v1/ranks",
                               "/api/v1/ranks/fault.scheduler.tp0-pp0-ep0-dp0"}) {
      const std::string request = std::string(method) + " " + target +
                                  " HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
      const auto reply = raw_exchange(daemon.port(), request, 3s);
      REQUIRE(reply);
      ++requests;
      INFO(method << " " << target);
      CHECK((status_of(*reply) == 405 || status_of(*reply) == 400));
    }
  }
  CHECK(served.shm.list() == files_before);  // nothing created, removed or renamed
  const auto ranks_after = daemon.get("/api/v1/ranks");
  REQUIRE(ranks_after);
  CHECK(ranks_after->body.size() > 0);
  CHECK(samples_of(scrape(daemon), "rankstat_rank_up").size() == 1);
  CHECK(daemon.process().running());
  report_count("http_unknown_path_and_method_requests", requests);
}

TEST_CASE("slow clients are cut off at the read deadline while other scrapers are served") {
  Served served;
  DaemonUnderTest daemon(served.shm.path(), kFlags);
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));
  constexpr int kSlow = 40;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    // One address each, so that the per-address limit (8) does not refuse them before they are slow.
    const int fd = connect_from("127.3.0." + std::to_string(i + 1), daemon.port());
    REQUIRE(fd >= 0);
    const std::string start = "GET /metrics HTTP/1.1\r\nHost: a\r\n";
    REQUIRE(::send(fd, start.data(), start.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(start.size()));
    slow.push_back(fd);
  }
  // Drip one byte per connection every 100 ms (a slowloris never finishes its headers) while scraping.
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop.load()) {
      for (int fd : slow) ::send(fd, "X", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(100ms);
    }
  });
  int fast_ok = 0;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = daemon.get("/metrics");
    if (r && r->status == 200 && std::chrono::steady_clock::now() - t0 < 2s) ++fast_ok;
    std::this_thread::sleep_for(50ms);
  }
  CHECK(fast_ok == 10);
  int cut_off = 0;
  for (int fd : slow) {
    if (closed_by_peer(fd, 5s)) ++cut_off;
  }
  stop.store(true);
  drip.join();
  for (int fd : slow) ::close(fd);
  CHECK(cut_off == kSlow);
  REQUIRE(wait_until(
      [&] { return value_of(scrape(daemon), "rankstat_http_active_connections").value_or(99) <= 1; }, 5s));
  CHECK(daemon.process().running());
  report_count("http_slow_clients", kSlow);
}

namespace {

// The attacks of issue 12 item 5, on one thread: connections that send one byte of a request and wait
// (slowloris: from one address, and from many), and thousands of connections that send nothing, from
// many addresses. Whatever the daemon closes is reopened at once, for as long as the attack runs.
class ConnectionFlood {
 public:
  struct Plan {
    int one_byte_from_one_address = 64;
    int one_byte_from_many_addresses = 64;  // one address each
    int idle = 2000;                        // 8 per address
  };

  ConnectionFlood(int port, Plan plan) : port_(port) {
    for (int i = 0; i < plan.one_byte_from_one_address; ++i) slots_.push_back({"127.0.0.2", true});
    for (int i = 0; i < plan.one_byte_from_many_addresses; ++i) {
      slots_.push_back({"127.2." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1), true});
    }
    for (int i = 0; i < plan.idle; ++i) {
      const int address = i / 8;
      slots_.push_back(
          {"127.1." + std::to_string(address / 250) + "." + std::to_string(address % 250 + 1), false});
    }
    thread_ = std::thread([this] { run(); });
  }
  ~ConnectionFlood() {
    stop_.store(true);
    thread_.join();
    for (Slot& slot : slots_) {
      if (slot.fd >= 0) ::close(slot.fd);
    }
  }
  ConnectionFlood(const ConnectionFlood&) = delete;
  ConnectionFlood& operator=(const ConnectionFlood&) = delete;

  std::uint64_t connections_opened() const { return opened_.load(); }
  std::uint64_t connections_closed_by_daemon() const { return closed_.load(); }
  std::size_t open_now() const { return open_.load(); }

 private:
  struct Slot {
    std::string source;
    bool sends_one_byte;
    int fd = -1;
    bool byte_sent = false;
  };

  void run() {
    std::vector<pollfd> polled;
    std::vector<Slot*> owners;
    char sink[4096];
    while (!stop_.load()) {
      polled.clear();
      owners.clear();
      std::size_t open = 0;
      for (Slot& slot : slots_) {
        if (slot.fd < 0) {
          slot.fd = connect_from(slot.source, port_, false);
          slot.byte_sent = false;
          if (slot.fd < 0) continue;
          ++opened_;
        }
        ++open;
        const short wanted = slot.sends_one_byte && !slot.byte_sent ? POLLOUT : POLLIN;
        polled.push_back({slot.fd, wanted, 0});
        owners.push_back(&slot);
      }
      open_.store(open);
      if (::poll(polled.data(), polled.size(), 50) <= 0) continue;
      for (std::size_t i = 0; i < polled.size(); ++i) {
        Slot& slot = *owners[i];
        const short got = polled[i].revents;
        if (got == 0) continue;
        if ((got & POLLOUT) != 0 && (got & (POLLERR | POLLHUP)) == 0) {
          slot.byte_sent = ::send(slot.fd, "G", 1, MSG_NOSIGNAL) == 1;
          continue;
        }
        // Readable, hung up or failed: the daemon answered (a 503) or closed us. Either way, reconnect.
        if ((got & POLLIN) != 0 && ::recv(slot.fd, sink, sizeof sink, 0) > 0 &&
            (got & (POLLERR | POLLHUP)) == 0) {
          continue;  // drain the 503 text; the close follows
        }
        ::close(slot.fd);
        slot.fd = -1;
        ++closed_;
      }
    }
  }

  int port_;
  std::vector<Slot> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> opened_{0};
  std::atomic<std::uint64_t> closed_{0};
  std::atomic<std::size_t> open_{0};
  std::thread thread_;
};

void raise_open_file_limit() {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  limit.rlim_cur = limit.rlim_max;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  REQUIRE(limit.rlim_cur >= 4096);
}

}  // namespace

TEST_CASE(
    "a scraper is served on every try while one-byte and idle connections flood the daemon from many "
    "addresses") {
  raise_open_file_limit();
  Served served;
  // Default HTTP limits, as deployed: 64 connections, 8 per address, 5 s for headers, 10 s per request.
  DaemonUnderTest daemon(served.shm.path(), {"--shm.scan-interval=100ms", "--liveness.interval=50ms"});
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));

  ConnectionFlood flood(daemon.port(), {});
  REQUIRE(wait_until([&] { return flood.open_now() >= 2000; }, 10s));
  std::this_thread::sleep_for(1s);  // the backlog full of attackers, every slot taken

  // Long enough for the header deadline (5 s) to cut off the one-byte connections at least once.
  const auto attack_end = std::chrono::steady_clock::now() + 8s;
  int scrapes = 0;
  int served_ok = 0;
  std::vector<double> latency_ms;
  while (std::chrono::steady_clock::now() < attack_end) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = http_get("127.0.0.1", daemon.port(), "/metrics", {}, 5s);
    latency_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ++scrapes;
    if (r && r->status == 200 && r->body.find("sglang:test_events_total") != std::string::npos) ++served_ok;
  }
  const std::uint64_t opened = flood.connections_opened();
  const std::uint64_t closed = flood.connections_closed_by_daemon();
  const std::size_t open_at_end = flood.open_now();

  const std::string text = scrape(daemon);
  const double evicted_idle = value_of(text, "rankstat_http_connections_evicted_total", {"idle"}).value_or(0);
  const double evicted_reading =
      value_of(text, "rankstat_http_connections_evicted_total", {"reading_headers"}).value_or(0);
  const double refused_per_peer =
      value_of(text, "rankstat_http_connections_refused_per_peer_total").value_or(0);
  const double header_timeouts = value_of(text, "rankstat_http_header_timeouts_total").value_or(0);
  const double rejected = value_of(text, "rankstat_http_connections_rejected_total").value_or(-1);
  std::sort(latency_ms.begin(), latency_ms.end());
  std::printf(
      "flood: %zu attacker connections open, %llu opened, %llu closed by the daemon; scrapes %d/%d served, "
      "latency p50 %.1f ms p99 %.1f ms max %.1f ms; evicted idle %.0f, evicted reading headers %.0f, "
      "refused per peer %.0f, header timeouts %.0f, rejected %.0f\n",
      open_at_end, static_cast<unsigned long long>(opened), static_cast<unsigned long long>(closed),
      served_ok, scrapes, latency_ms[latency_ms.size() / 2], latency_ms[latency_ms.size() * 99 / 100],
      latency_ms.back(), evicted_idle, evicted_reading, refused_per_peer, header_timeouts, rejected);
  // The promise is that every try is answered; how many tries fit in 8 s depends on the build (sanitizers
  // slow the daemon several-fold), so only ask for one per second on average.
  CHECK(scrapes >= 8);
  CHECK(served_ok == scrapes);
  CHECK(evicted_idle > 0);
  CHECK(refused_per_peer > 0);  // 64 one-byte connections from 127.0.0.2 against a limit of 8
  CHECK(rejected == 0);
  CHECK(daemon.process().running());
  report_count("http_flood_scrapes_served", static_cast<std::uint64_t>(served_ok));
}

TEST_CASE("a one-byte connection is closed at the header deadline even before the read deadline") {
  Served served;
  DaemonUnderTest daemon(served.shm.path(), {"--web.header-timeout=500ms", "--web.read-timeout=10s"});
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));
  const int fd = connect_loopback(daemon.port());
  REQUIRE(fd >= 0);
  REQUIRE(::send(fd, "G", 1, MSG_NOSIGNAL) == 1);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(closed_by_peer(fd, 5s));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  ::close(fd);
  // The close can reach the client just before the daemon counts it.
  CHECK(wait_until(
      [&] { return value_of(scrape(daemon), "rankstat_http_header_timeouts_total").value_or(0) >= 1; }, 2s));
}

TEST_CASE("50 concurrent scrapers all get complete answers") {
  Served served;
  std::vector<std::string> flags = kFlags;
  flags.push_back("--web.max-connections-per-peer=0");  // all 50 come from 127.0.0.1
  DaemonUnderTest daemon(served.shm.path(), flags);
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));
  constexpr int kScrapers = 50;
  constexpr int kEach = 10;
  std::atomic<int> complete{0};
  std::vector<std::thread> scrapers;
  for (int i = 0; i < kScrapers; ++i) {
    scrapers.emplace_back([&] {
      for (int n = 0; n < kEach; ++n) {
        auto r = http_get("127.0.0.1", daemon.port(), "/metrics", {}, 20s);
        if (r && r->status == 200 && r->body.find("sglang:test_events_total") != std::string::npos &&
            r->body.find("rankstat_scrape_duration_seconds") != std::string::npos) {
          ++complete;
        }
      }
    });
  }
  for (auto& t : scrapers) t.join();
  CHECK(complete.load() == kScrapers * kEach);
  CHECK(daemon.process().running());
  report_count("http_concurrent_scrapes", static_cast<std::uint64_t>(complete.load()));
}
