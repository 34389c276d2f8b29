// Scrape-side measurements against a running rankstatd, as a Prometheus server sees them (one kept-alive
// HTTP/1.1 connection on loopback; the time is from sending the request to the last body byte; the body
// is not decompressed or parsed inside the timed part).
//
//   rankstat_bench_scrape latency   --address HOST:PORT --count K [--interval-ms I] [--gzip]
//       K scrapes, I ms apart (so that every rank has reported between two scrapes when I exceeds the
//       writers' period). Prints one JSON object: per-scrape milliseconds, wire and text bytes, sample lines.
//   rankstat_bench_scrape freshness --address HOST:PORT --seconds S
//       Opens a probe rank of its own in $RANKSTAT_SHM_DIR (tp_rank 99999) that publishes a snapshot with
//       num_running_reqs = 1, 2, 3 ... at random moments 2-12 ms apart. Half the time, each append is
//       followed by a scrape (gzip, as Prometheus asks): "direct" delay = end of the first response that
//       shows the value minus the moment it was appended. The other half, another thread scrapes back to
//       back (plain) and the delay of value k is the end of the first response showing k (or later) minus
//       its append: it also includes waiting for the scrape in flight. Prints one JSON object with every
//       delay in milliseconds.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/process.hpp"

namespace {

// A minimal HTTP/1.1 client on one kept-alive loopback connection: a request, then the head and a
// Content-Length body read with large recv() calls into a buffer kept between requests, so that the
// client adds as little as possible to the time it measures.
class Client {
 public:
  explicit Client(const std::string& address) {
    const auto colon = address.rfind(':');
    const std::string host = address.substr(0, colon);
    const std::string port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
      throw std::runtime_error("cannot resolve " + address);
    }
    fd_ = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    const bool connected = fd_ >= 0 && ::connect(fd_, found->ai_addr, found->ai_addrlen) == 0;
    freeaddrinfo(found);
    if (!connected) throw std::runtime_error("cannot connect to " + address);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One GET; returns the body as sent (gzip when asked and the server compressed it).
  const std::string& get(const std::string& target, bool gzip, bool& gzip_encoded) {
    std::string request = "GET " + target +
                          " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: rankstat-bench\r\n"
                          "Accept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n";
    if (gzip) request += "Accept-Encoding: gzip\r\n";
    request += "\r\n";
    for (std::size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      sent += static_cast<std::size_t>(n);
    }
    // Head: read until the blank line (whatever comes after it is the start of the body).
    std::size_t head_end = std::string::npos;
    while ((head_end = pending_.find("\r\n\r\n")) == std::string::npos) receive(pending_, 64 * 1024);
    const std::string head = pending_.substr(0, head_end + 2);
    const std::string lower = to_lower(head);
    if (lower.compare(0, 12, "http/1.1 200") != 0)
      throw std::runtime_error("unexpected response: " + head.substr(0, 40));
    const std::size_t length_at = lower.find("\r\ncontent-length:");
    if (length_at == std::string::npos) throw std::runtime_error("response without Content-Length");
    const std::size_t length = std::stoull(head.substr(length_at + 17));
    gzip_encoded = lower.find("\r\ncontent-encoding: gzip") != std::string::npos;
    body_.assign(pending_, head_end + 4, std::string::npos);
    pending_.clear();
    if (body_.size() > length) {  // the next response's bytes (never happens without pipelining)
      pending_.assign(body_, length, std::string::npos);
      body_.resize(length);
    }
    while (body_.size() < length) receive(body_, length - body_.size());
    return body_;
  }

 private:
  static std::string to_lower(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }
  // Appends at most `most` received bytes to `into` (at least one; throws on EOF or error).
  void receive(std::string& into, std::size_t most) {
    const std::size_t at = into.size();
    const std::size_t want = std::min<std::size_t>(most, 4u << 20);
    into.resize(at + want);
    const ssize_t n = ::recv(fd_, into.data() + at, want, 0);
    if (n <= 0) throw std::runtime_error("connection closed");
    into.resize(at + static_cast<std::size_t>(n));
  }

  int fd_ = -1;
  std::string pending_;
  std::string body_;
};

std::string gunzip(const std::string& data) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw std::runtime_error("inflateInit2");
  std::string out;
  out.resize(data.size() * 8 + 4096);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (z.total_out == out.size()) out.resize(out.size() * 2);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + z.total_out);
    z.avail_out = static_cast<uInt>(out.size() - z.total_out);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      throw std::runtime_error("inflate failed");
    }
  }
  out.resize(z.total_out);
  const bool trailing = z.avail_in != 0;
  inflateEnd(&z);
  if (trailing) throw std::runtime_error("trailing bytes after the gzip member");
  return out;
}

std::size_t sample_lines(const std::string& text) {
  std::size_t lines = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    if (text[pos] != '#') ++lines;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return lines;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int run_latency(const std::string& address, int count, int interval_ms, bool gzip) {
  // Connected after the first wait, as a scraper connects when it scrapes: rankstatd closes a connection
  // that sends no request within its header timeout (--web.header-timeout) of being accepted.
  std::optional<Client> client;
  std::vector<double> samples;
  std::size_t wire_bytes = 0;
  std::string last;
  bool encoded = false;
  for (int i = 0; i < count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    if (!client) client.emplace(address);
    const auto start = std::chrono::steady_clock::now();
    const std::string& body = client->get("/metrics", gzip, encoded);
    samples.push_back(ms_since(start));
    wire_bytes = body.size();
    if (i + 1 == count) last = body;
  }
  // Checked after the timed scrapes: the last body must be a valid gzip member holding the text.
  const std::string text = encoded ? gunzip(last) : last;
  std::printf(
      "{\"gzip\":%s,\"encoded\":%s,\"wire_bytes\":%zu,\"text_bytes\":%zu,\"sample_lines\":%zu,\"ms\":[",
      gzip ? "true" : "false", encoded ? "true" : "false", wire_bytes, text.size(), sample_lines(text));
  for (std::size_t i = 0; i < samples.size(); ++i) std::printf("%s%.4f", i ? "," : "", samples[i]);
  std::printf("]}\n");
  return 0;
}

// num_running_reqs of the probe rank in an exposition, or -1.
std::int64_t probe_value(const std::string& text) {
  static const std::string kFamily = "sglang:num_running_reqs{";
  static const std::string kLabel = "tp_rank=\"99999\"";
  std::size_t pos = text.find(kFamily);
  while (pos != std::string::npos) {
    const std::size_t end = text.find('\n', pos);
    const std::string_view line(text.data() + pos, (end == std::string::npos ? text.size() : end) - pos);
    if (line.find(kLabel) != std::string_view::npos) {
      const std::size_t space = line.rfind(' ');
      return std::stoll(std::string(line.substr(space + 1)));
    }
    pos = text.find(kFamily, pos + 1);
  }
  return -1;
}

int run_freshness(const std::string& address, double seconds) {
  rankstat::ReporterOptions options;
  options.identity.instance = "bench";
  options.identity.rank_key = "freshness-probe";
  options.identity.tp_rank = 99999;
  options.identity.flags = rankstat::shm::kFlagAllSchedulersMetrics;
  options.geometry.ring_bytes = 64 * 1024;
  rankstat::Reporter reporter;
  if (reporter.open(options) != rankstat::Status::kOk) {
    std::fprintf(stderr, "probe: %s\n", reporter.error_message().c_str());
    return 2;
  }
  rankstat::shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(rankstat::shm::ReportKind::kDecode);
  s.num_running_reqs = 0;
  reporter.report_scheduler(s);

  Client client(address);
  bool encoded = false;
  // Wait until the daemon shows the probe.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (probe_value(client.get("/metrics", false, encoded)) < 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "probe rank never appeared in /metrics\n");
      return 2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  std::mt19937 random(7);
  std::uniform_int_distribution<int> gap_us(2000, 12000);
  std::int64_t value = 0;

  // 1. Direct: append, then one scrape as Prometheus sends it (gzip); the delay is from the append to the
  //    last byte of the first response that shows the value (decompressing and parsing are not timed).
  std::vector<double> direct;
  std::size_t late = 0;
  const auto direct_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds / 2);
  while (std::chrono::steady_clock::now() < direct_until) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us(random)));
    s.num_running_reqs = ++value;
    const std::uint64_t t = rankstat::shm::monotonic_ns();
    reporter.report_scheduler(s);
    for (int attempt = 0;; ++attempt) {
      bool gz = false;
      const std::string& body = client.get("/metrics", true, gz);
      const std::uint64_t end = rankstat::shm::monotonic_ns();
      if (probe_value(gz ? gunzip(body) : body) >= value) {
        direct.push_back(static_cast<double>(end - t) / 1e6);
        break;
      }
      if (attempt == 0) ++late;  // not in the first scrape after the append
      if (attempt > 1000) throw std::runtime_error("appended value never became visible");
    }
  }

  // 2. Concurrent: another thread scrapes back to back (plain) while values are appended at random
  //    moments; the delay also includes waiting for the scrape in flight at the append to finish.
  std::mutex mutex;
  std::vector<std::uint64_t> appended_ns;  // appended_ns[k - first]: when value k was appended
  const std::int64_t first = value + 1;
  std::vector<std::pair<std::uint64_t, std::int64_t>> seen;  // (response end, value shown)
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    bool gz = false;
    while (!stop.load()) {
      const std::string& body = client.get("/metrics", false, gz);
      const std::uint64_t end = rankstat::shm::monotonic_ns();
      const std::int64_t shown = probe_value(body);
      std::lock_guard lock(mutex);
      seen.emplace_back(end, shown);
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds / 2);
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us(random)));
    s.num_running_reqs = ++value;
    const std::uint64_t t = rankstat::shm::monotonic_ns();
    reporter.report_scheduler(s);
    std::lock_guard lock(mutex);
    appended_ns.push_back(t);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop.store(true);
  scraper.join();
  reporter.close();

  std::vector<double> delays;
  std::size_t missed = 0;
  std::size_t cursor = 0;
  for (std::int64_t k = first; k <= value; ++k) {
    const std::uint64_t t = appended_ns[static_cast<std::size_t>(k - first)];
    while (cursor < seen.size() && seen[cursor].first < t) ++cursor;
    std::size_t i = cursor;
    while (i < seen.size() && seen[i].second < k) ++i;
    if (i == seen.size()) {
      ++missed;
      continue;
    }
    delays.push_back(static_cast<double>(seen[i].first - t) / 1e6);
  }
  std::printf("{\"direct_late\":%zu,\"direct_ms\":[", late);
  for (std::size_t i = 0; i < direct.size(); ++i) std::printf("%s%.4f", i ? "," : "", direct[i]);
  std::printf("],");
  std::printf("\"appends\":%lld,\"scrapes\":%zu,\"missed\":%zu,\"ms\":[",
              static_cast<long long>(value - first + 1), seen.size(), missed);
  for (std::size_t i = 0; i < delays.size(); ++i) std::printf("%s%.4f", i ? "," : "", delays[i]);
  std::printf("]}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rankstat scrape benchmark client"};
  app.require_subcommand(1);
  std::string address;
  int count = 10;
  int interval_ms = 100;
  bool gzip = false;
  double seconds = 10;
  auto* latency = app.add_subcommand("latency", "Scrape latency and size");
  latency->add_option("--address", address)->required();
  latency->add_option("--count", count);
  latency->add_option("--interval-ms", interval_ms);
  latency->add_flag("--gzip", gzip, "Send Accept-Encoding: gzip, as Prometheus does");
  auto* freshness = app.add_subcommand("freshness", "Append-to-visible delay");
  freshness->add_option("--address", address)->required();
  freshness->add_option("--seconds", seconds);
  CLI11_PARSE(app, argc, argv);
  try {
    if (latency->parsed()) return run_latency(address, count, interval_ms, gzip);
    return run_freshness(address, seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_scrape: %s\n", e.what());
    return 1;
  }
}
