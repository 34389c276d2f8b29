// The real rankstatd's HTTP listener under abuse: malformed and oversized requests, unknown paths and
// methods, slow clients, more connections than allowed, 50 concurrent scrapers. It keeps answering,
// with bounded memory, and nothing over HTTP changes its state. (tests/unit/http covers the transport
// in-process; this is the daemon as deployed.)
#include <sys/socket.h>
#include <unistd.h>

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
    const int fd = connect_loopback(daemon.port());
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

TEST_CASE("connections beyond the limit get 503 and service resumes once they go away") {
  Served served;
  DaemonUnderTest daemon(served.shm.path(), {"--web.max-connections=16", "--web.read-timeout=10s"});
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    const int fd = connect_loopback(daemon.port());
    REQUIRE(fd >= 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(200ms);  // all accepted
  const auto extra = raw_exchange(daemon.port(), "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 3s);
  REQUIRE(extra);
  CHECK(status_of(*extra) == 503);
  for (int fd : idle) ::close(fd);
  REQUIRE(wait_until(
      [&] {
        auto r = daemon.get("/metrics");
        return r && r->status == 200;
      },
      5s));
  CHECK(value_of(scrape(daemon), "rankstat_http_connections_rejected_total").value_or(0) >= 1);
  report_count("http_connections_over_limit", 1);
}

TEST_CASE("50 concurrent scrapers all get complete answers") {
  Served served;
  DaemonUnderTest daemon(served.shm.path(), kFlags);
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
