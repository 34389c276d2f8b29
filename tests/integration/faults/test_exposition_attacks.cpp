// One rank never fails everyone's scrape (issue 12): series and identities that cannot be exposed as
// valid text format are written byte by byte into the segments of otherwise healthy ranks, next to
// healthy ranks written by the normal Reporter. A real Prometheus (Debian's, loopback, temporary storage,
// an ephemeral port) must keep the target up and store every good series; promtool must parse the
// exposition; the JSON API and `rankstat --direct` must stay valid JSON. Skipped with a WARN where
// prometheus or promtool are not installed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fault_support.hpp"
#include "rankstat/reporter.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace rankstat::faults;
using namespace std::chrono_literals;
namespace shm = rankstat::shm;
using rankstat::Reporter;
using rankstat::ReporterOptions;
using rankstat::Status;

namespace {

const std::vector<std::string> kFast = {"--shm.scan-interval=100ms", "--liveness.interval=50ms",
                                        "--label.instance=engine"};
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD, what the JSON API puts for a byte not UTF-8

// The full path of `name` on $PATH, or empty.
std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// A loopback port free at the time of asking (Prometheus binds it itself, so a race is retried).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

// A segment mapped read-write, to change its bytes after the Reporter published them, as a hostile or
// buggy writer would: the header and the cumulative block through the shmproto structs.
class RawSegment {
 public:
  explicit RawSegment(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    bytes_ = static_cast<std::size_t>(st.st_size);
    void* base = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(base != MAP_FAILED);
    base_ = static_cast<std::uint8_t*>(base);
    const auto* block = reinterpret_cast<const shm::CumulativeHeader*>(base_ + header().cumulative_offset);
    geometry_ = {block->series_capacity, block->bounds_capacity, block->values_capacity,
                 block->text_capacity};
  }
  ~RawSegment() { ::munmap(base_, bytes_); }
  RawSegment(const RawSegment&) = delete;
  RawSegment& operator=(const RawSegment&) = delete;

  shm::SegmentHeader& header() { return *reinterpret_cast<shm::SegmentHeader*>(base_); }
  shm::SeriesDescriptor& descriptor(std::uint32_t id) {
    return *reinterpret_cast<shm::SeriesDescriptor*>(base_ + header().cumulative_offset +
                                                     geometry_.descriptors_offset() +
                                                     id * sizeof(shm::SeriesDescriptor));
  }
  char* text() {
    return reinterpret_cast<char*>(base_ + header().cumulative_offset + geometry_.text_offset());
  }
  char* labels(std::uint32_t id) { return text() + descriptor(id).labels_offset; }
  std::uint32_t text_bytes() const { return geometry_.text_bytes(); }

 private:
  std::uint8_t* base_ = nullptr;
  std::size_t bytes_ = 0;
  shm::CumulativeGeometry geometry_{};
};

Reporter open_rank(const TempDir& shm_dir, const std::string& instance, shm::LabelPairs extra_labels = {}) {
  ReporterOptions options;
  options.shm_dir = shm_dir.path();
  options.identity.instance = instance;
  options.identity.model_name = "model-" + instance;
  options.identity.extra_labels = std::move(extra_labels);
  options.mode = 0640;
  Reporter reporter;
  const Status status = reporter.open(options);
  INFO(reporter.error_message());
  REQUIRE(status == Status::kOk);
  return reporter;
}

std::uint32_t counter(Reporter& r, std::string_view family, const shm::LabelPairs& labels, double value,
                      std::string_view help = "a counter") {
  std::uint32_t id = 0;
  REQUIRE(r.register_counter(family, labels, id, help) == Status::kOk);
  REQUIRE(r.counter_add(id, value) == Status::kOk);
  return id;
}

std::uint32_t histogram(Reporter& r, std::string_view family, const shm::LabelPairs& labels) {
  static constexpr double kBounds[] = {0.5, 1.0};
  std::uint32_t id = 0;
  REQUIRE(r.register_histogram(family, labels, kBounds, id, "a histogram") == Status::kOk);
  REQUIRE(r.histogram_observe(id, 0.25) == Status::kOk);
  REQUIRE(r.histogram_observe(id, 0.75) == Status::kOk);
  return id;
}

std::uint32_t summary(Reporter& r, std::string_view family, const shm::LabelPairs& labels) {
  Reporter::SeriesSpec spec;
  spec.kind = shm::SeriesKind::kSummary;
  spec.family = family;
  spec.help = "a summary";
  spec.labels = &labels;
  std::uint32_t id = 0;
  REQUIRE(r.register_series(spec, id) == Status::kOk);
  REQUIRE(r.histogram_observe(id, 2.0) == Status::kOk);
  return id;
}

std::uint32_t gauge(Reporter& r, std::string_view family, shm::GaugeMode mode, const shm::LabelPairs& labels,
                    double value) {
  std::uint32_t id = 0;
  REQUIRE(r.register_gauge(family, mode, labels, id, "a gauge") == Status::kOk);
  REQUIRE(r.gauge_set(id, value) == Status::kOk);
  return id;
}

// A good series the test expects Prometheus to store: a PromQL selector and its value.
struct Expected {
  std::string selector;
  double value;
};

// Debian's prometheus on a free loopback port with temporary storage, scraping `target_port` every
// 500 ms; killed (with its storage removed) on destruction.
class PrometheusServer {
 public:
  PrometheusServer(const std::string& binary, int target_port) {
    const std::string config = files_.path() + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
                             "scrape_configs:\n  - job_name: rankstat\n    static_configs:\n"
                             "      - targets: ['127.0.0.1:"
                          << target_port << "']\n";
    REQUIRE(::mkdir((files_.path() + "/tsdb").c_str(), 0700) == 0);
    for (int attempt = 0; attempt < 3 && port_ == 0; ++attempt) {
      const int port = free_loopback_port();
      process_ = std::make_unique<ChildProcess>(
          std::vector<std::string>{binary, "--config.file=" + config,
                                   "--storage.tsdb.path=" + files_.path() + "/tsdb",
                                   "--web.listen-address=127.0.0.1:" + std::to_string(port),
                                   "--storage.tsdb.retention.time=1h", "--log.level=warn"},
          std::map<std::string, std::string>{}, files_.path() + "/prometheus.log");
      const bool ready = wait_until(
          [&] {
            if (!process_->running()) return true;
            auto r = http_get("127.0.0.1", port, "/-/ready", {}, 2s);
            return r && r->status == 200;
          },
          30s);
      if (ready && process_->running()) {
        port_ = port;
      } else {
        process_.reset();  // the port was taken in between, or it failed: try again
      }
    }
  }
  ~PrometheusServer() {
    if (process_ && process_->running()) {
      process_->signal(SIGTERM);
      if (!process_->wait_for(10s)) process_->signal(SIGKILL);
    }
  }
  bool started() const { return port_ != 0; }
  std::string log() const { return read_file(files_.path() + "/prometheus.log"); }

  // The result vector of an instant query; an empty array on any failure.
  boost::json::array query(const std::string& expr) {
    std::string encoded;
    for (const char byte : expr) {
      const auto c = static_cast<unsigned char>(byte);
      if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') {
        encoded += static_cast<char>(c);
      } else {
        static constexpr char kHex[] = "0123456789ABCDEF";
        encoded += '%';
        encoded += kHex[c >> 4];
        encoded += kHex[c & 15];
      }
    }
    auto r = http_get("127.0.0.1", port_, "/api/v1/query?query=" + encoded, {}, 5s);
    if (!r || r->status != 200) return {};
    boost::system::error_code error;
    boost::json::value doc = boost::json::parse(r->body, error);
    if (error || !doc.is_object()) return {};
    const boost::json::value* status = doc.as_object().if_contains("status");
    if (status == nullptr || !status->is_string() || status->get_string() != "success") return {};
    return doc.as_object()["data"].as_object()["result"].as_array();
  }
  // The single value `expr` yields, or nullopt when it yields no series or several.
  std::optional<double> value(const std::string& expr) {
    const boost::json::array result = query(expr);
    if (result.size() != 1) return std::nullopt;
    return std::stod(std::string(result[0].as_object().at("value").as_array().at(1).as_string()));
  }

 private:
  TempDir files_{"rankstat-prometheus"};
  std::unique_ptr<ChildProcess> process_;
  int port_ = 0;
};

bool contains_byte(const std::string& text, unsigned char byte) {
  return text.find(static_cast<char>(byte)) != std::string::npos;
}

}  // namespace

TEST_CASE(
    "a real Prometheus keeps the target up and stores every good series while ranks declare every kind of "
    "unexposable series and identity") {
  const std::string prometheus_binary = find_program("prometheus");
  const std::string promtool = find_program("promtool");
  if (prometheus_binary.empty() || promtool.empty()) {
    WARN("skipped: needs Debian's prometheus and promtool (apt-get install prometheus)");
    return;
  }
  TempDir shm_dir;
  std::vector<Expected> good;

  // Two healthy ranks through the normal Reporter: every kind of series.
  std::vector<Reporter> healthy;
  healthy.reserve(2);  // references into these vectors are kept
  for (const std::string instance : {"healthy-a", "healthy-b"}) {
    Reporter& r = healthy.emplace_back(open_rank(shm_dir, instance));
    counter(r, "good_requests_total", {{"path", "/generate"}}, 7);
    gauge(r, "good_queue_depth", shm::GaugeMode::kLiveSum, {}, 4);
    histogram(r, "good_latency_seconds", {{"stage", "prefill"}});
    summary(r, "good_wait_seconds", {});
    const std::string engine = "engine=\"" + instance + "\"";
    good.push_back({"good_requests_total{" + engine + ",path=\"/generate\"}", 7});
    good.push_back({"good_latency_seconds_count{" + engine + ",stage=\"prefill\"}", 2});
    good.push_back({"good_latency_seconds_bucket{" + engine + ",stage=\"prefill\",le=\"+Inf\"}", 2});
    good.push_back({"good_latency_seconds_sum{" + engine + ",stage=\"prefill\"}", 1});
    good.push_back({"good_wait_seconds_count{" + engine + "}", 1});
    good.push_back({"good_wait_seconds_sum{" + engine + "}", 2});
  }
  good.push_back({"sum(good_queue_depth)", 8});

  // One rank that declares, next to a good series, every kind of bad series. Each is registered with
  // harmless bytes of the same length, then patched in the segment as a writer without our client would.
  Reporter bad = open_rank(shm_dir, "badseries");
  counter(bad, "badseries_good_total", {{"path", "/ok"}}, 5);
  good.push_back({"badseries_good_total{engine=\"badseries\",path=\"/ok\"}", 5});
  const std::uint32_t le_on_histogram = histogram(bad, "bad_le_seconds", {{"lx", "1"}});
  const std::uint32_t quantile_on_summary = summary(bad, "bad_quantile_seconds", {{"quantilx", "0.5"}});
  const std::uint32_t value_not_utf8 = counter(bad, "bad_value_total", {{"path", "ok"}}, 1);
  const std::uint32_t help_not_utf8 = counter(bad, "bad_help_total", {}, 1, "help text");
  const std::uint32_t duplicated_name = counter(bad, "bad_duplicate_total", {{"aa", "1"}, {"ab", "2"}}, 1);
  const std::uint32_t invalid_name = counter(bad, "bad_label_name_total", {{"a_b", "1"}}, 1);
  const std::uint32_t reserved_name = counter(bad, "bad_reserved_total", {{"xx_name", "1"}}, 1);
  const std::uint32_t pid_on_gauge = gauge(bad, "bad_pid_gauge", shm::GaugeMode::kAll, {{"pix", "1"}}, 1);
  const std::uint32_t family_nul = counter(bad, "bad_family_nul_total", {}, 1);
  const std::uint32_t family_not_utf8 = counter(bad, "bad_family_utf8_total", {}, 1);
  // Names outside the classic set are valid (any UTF-8 text but NUL, as prometheus_client 0.22+ takes
  // them) and written escaped: a newline or a space in a family name is `_` under the default scheme and
  // never starts a line of its own.
  const std::uint32_t family_newline = counter(bad, "new_line_total", {}, 1);
  const std::uint32_t family_space = counter(bad, "spa_ce_total", {}, 1);
  good.push_back({"new_line_total{engine=\"badseries\"}", 1});
  good.push_back({"spa_ce_total{engine=\"badseries\"}", 1});
  const std::uint32_t unterminated = counter(bad, "bad_unterminated_total", {{"k", "v"}}, 1);
  const std::uint32_t labels_past_text = counter(bad, "bad_labels_offset_total", {}, 1);
  const std::uint32_t help_past_text = counter(bad, "bad_help_offset_total", {}, 1);
  {
    RawSegment raw(bad.path());
    // A label list is [u32 length]name[u32 length]value...: the first name starts at byte 4.
    raw.labels(le_on_histogram)[5] = 'e';                            // lx -> le
    raw.labels(quantile_on_summary)[11] = 'e';                       // quantilx -> quantile
    std::memcpy(raw.labels(value_not_utf8) + 12, "\xFF\xFE", 2);     // path="\xFF\xFE"
    raw.text()[raw.descriptor(help_not_utf8).help_offset] = '\xC3';  // a lead byte without continuation
    raw.labels(duplicated_name)[16] = 'a';                           // aa="1",aa="2"
    raw.labels(invalid_name)[5] = '\xFF';                            // a\xFFb: not UTF-8
    std::memcpy(raw.labels(reserved_name) + 4, "__", 2);             // __name
    raw.labels(pid_on_gauge)[6] = 'd';  // pid on a gauge that gets a pid label itself
    raw.text()[raw.descriptor(family_nul).family_offset + 3] = '\0';
    raw.text()[raw.descriptor(family_not_utf8).family_offset + 3] = '\xFF';
    raw.text()[raw.descriptor(family_newline).family_offset + 3] = '\n';  // "new\nline_total"
    raw.text()[raw.descriptor(family_space).family_offset + 3] = ' ';
    raw.labels(unterminated)[5] = 2;  // k="v" with the value's length 2: past the end of the list
    raw.descriptor(labels_past_text).labels_offset = raw.text_bytes() - 1;
    raw.descriptor(labels_past_text).labels_bytes = 2;
    raw.descriptor(help_past_text).help_offset = 0xFFFFFF00u;
    raw.descriptor(help_past_text).help_bytes = 0x100;
  }

  // Ranks whose identity cannot label a series: every series of theirs is dropped (or the whole segment
  // refused), except where the problem concerns one kind only (`le` on histograms, `pid` on per-process
  // gauges, `quantile` on summaries), whose other series are good.
  std::vector<Reporter> identities;
  identities.reserve(8);
  auto identity_rank = [&](const std::string& instance, shm::LabelPairs extra) -> Reporter& {
    Reporter& r = identities.emplace_back(open_rank(shm_dir, instance, std::move(extra)));
    counter(r, "victim_total", {}, 3);
    histogram(r, "victim_seconds", {});
    summary(r, "victim_wait_seconds", {});
    gauge(r, "victim_gauge", shm::GaugeMode::kAll, {}, 1);
    return r;
  };
  std::memcpy(RawSegment(identity_rank("badmodel", {}).path()).header().model_name, "\xFF\xFE", 2);
  std::memcpy(RawSegment(identity_rank("badengine", {}).path()).header().engine_type, "\xC3(", 2);
  RawSegment(identity_rank("extrale", {{"lx", "1"}}).path()).header().extra_labels[1] = 'e';
  good.push_back({"victim_total{engine=\"extrale\",le=\"1\"}", 3});
  good.push_back({"victim_wait_seconds_count{engine=\"extrale\",le=\"1\"}", 1});
  RawSegment(identity_rank("extraquantile", {{"quantilx", "1"}}).path()).header().extra_labels[7] = 'e';
  good.push_back({"victim_total{engine=\"extraquantile\",quantile=\"1\"}", 3});
  good.push_back({"victim_seconds_count{engine=\"extraquantile\",quantile=\"1\"}", 2});
  RawSegment(identity_rank("extrapid", {{"pix", "1"}}).path()).header().extra_labels[2] = 'd';
  good.push_back({"victim_total{engine=\"extrapid\",pid=\"1\"}", 3});
  RawSegment(identity_rank("extraname", {{"ab_c", "1"}}).path()).header().extra_labels[2] = '-';
  RawSegment(identity_rank("extradup", {{"model_namx", "1"}}).path()).header().extra_labels[9] = 'e';
  std::memcpy(RawSegment(identity_rank("extravalue", {{"zone", "ok"}}).path()).header().extra_labels + 5,
              "\xFF\xFE", 2);
  // An extra label that repeats an identity label replaces it (the daemon sets labels by name): exposable.
  good.push_back({"victim_total{engine=\"extradup\",model_name=\"1\"}", 3});
  const std::vector<std::string> all_dropped = {"badmodel", "badengine", "extraname", "extravalue"};

  DaemonUnderTest daemon(shm_dir.path(), kFast);
  PrometheusServer prometheus(prometheus_binary, daemon.port());
  INFO(prometheus.log());
  REQUIRE(prometheus.started());

  // Every good series stored, with its value, and the target up.
  std::vector<std::string> missing;
  const bool stored = wait_until(
      [&] {
        missing.clear();
        if (prometheus.value("up{job=\"rankstat\"}") != 1.0) missing.push_back("up == 1");
        for (const Expected& e : good) {
          const auto v = prometheus.value(e.selector);
          if (!v || *v != Approx(e.value)) missing.push_back(e.selector);
        }
        for (Reporter& r : healthy) r.heartbeat();
        return missing.empty();
      },
      60s);
  std::string not_stored;
  for (const std::string& m : missing) not_stored += m + "\n";
  INFO("not stored:\n" << not_stored);
  REQUIRE(stored);
  std::this_thread::sleep_for(1500ms);  // three more scrapes: still up, never down in between
  CHECK(prometheus.value("up{job=\"rankstat\"}") == 1.0);
  CHECK(prometheus.value("min_over_time(up{job=\"rankstat\"}[1h])") == 1.0);
  CHECK(prometheus.value("max_over_time(scrape_samples_post_metric_relabeling{job=\"rankstat\"}[1h])")
            .value_or(0) > 0);

  // Nothing of a bad series or a bad identity was stored.
  CHECK(prometheus.query("{__name__=~\"bad_.*\"}").empty());
  for (const std::string& instance : all_dropped) {
    INFO(instance);
    CHECK(prometheus.query("{engine=\"" + instance + "\",__name__=~\"victim.*\"}").empty());
  }
  CHECK(prometheus.query("victim_seconds_bucket{engine=\"extrale\"}").empty());
  CHECK(prometheus.query("victim_wait_seconds_count{engine=\"extraquantile\"}").empty());
  CHECK(prometheus.query("victim_gauge{engine=\"extrapid\"}").empty());

  // The exposition itself parses, and the daemon counted what it could not expose.
  auto metrics = daemon.get("/metrics");
  REQUIRE(metrics);
  REQUIRE(metrics->status == 200);
  TempDir scratch("rankstat-exposition");
  std::ofstream(scratch.path() + "/metrics.txt") << metrics->body;
  std::string promtool_output;
  const int promtool_status =
      run_command(promtool + " check metrics < " + scratch.path() + "/metrics.txt", &promtool_output);
  INFO(promtool_output);
  CHECK((promtool_status == 0 || promtool_status == 3));  // 3: lint findings only, the text parsed
  CHECK(value_of(metrics->body, "rankstat_scrape_unexposable_samples").value_or(0) > 0);
  CHECK(
      value_of(metrics->body, "rankstat_segments_rejected_total", {"reason=\"bad_identity\""}).value_or(-1) ==
      Approx(1));
  CHECK(metrics->body.find("\nline_total") == std::string::npos);
  CHECK_FALSE(contains_byte(metrics->body, 0xFF));
  CHECK(daemon.process().running());
  report_count("unexposable_series_declared", 13 + 8);
}

TEST_CASE(
    "header strings that are not UTF-8 give valid JSON with U+FFFD from the ranks API and rankstat --direct, "
    "and a 404 never echoes raw bytes") {
  TempDir shm_dir;
  Reporter good = open_rank(shm_dir, "fine");
  Reporter bad = open_rank(shm_dir, "mangled");
  {
    RawSegment raw(bad.path());
    // With their terminators: an invalid byte, a quote and a backslash; a lead byte without its
    // continuation and a control byte.
    std::memcpy(raw.header().model_name, "m\xFF\"\\x", 6);
    std::memcpy(raw.header().engine_type, "\xC3(\x01", 4);
  }
  DaemonUnderTest daemon(shm_dir.path(), kFast);

  boost::json::array ranks;
  REQUIRE(wait_until(
      [&] {
        auto r = daemon.get("/api/v1/ranks");
        if (!r || r->status != 200) return false;
        ranks = boost::json::parse(r->body).as_object().at("ranks").as_array();  // throws if not JSON
        return ranks.size() == 2;
      },
      10s));
  std::string mangled_id;
  for (const auto& rank : ranks) {
    const auto& o = rank.as_object();
    if (o.at("instance").as_string() == "mangled") {
      mangled_id = std::string(o.at("id").as_string());
      CHECK(o.at("model_name").as_string() == std::string("m") + kReplacement + "\"\\x");
      CHECK(o.at("engine_type").as_string() == std::string(kReplacement) + "(\x01");
    }
  }
  REQUIRE_FALSE(mangled_id.empty());
  auto detail = daemon.get("/api/v1/ranks/" + mangled_id);
  REQUIRE(detail);
  CHECK(detail->status == 200);
  const boost::json::object one = boost::json::parse(detail->body).as_object();
  CHECK(one.at("model_name").as_string() == std::string("m") + kReplacement + "\"\\x");
  CHECK_FALSE(contains_byte(detail->body, 0xFF));

  // An id with a quote, a backslash and bytes that are not UTF-8: a JSON 404 with the id escaped.
  auto missing = daemon.get("/api/v1/ranks/x\"y\\z\xFF\xC3");
  REQUIRE(missing);
  INFO(missing->body);
  CHECK(missing->status == 404);
  CHECK(missing->headers["content-type"].find("application/json") == 0);
  const boost::json::object answer = boost::json::parse(missing->body).as_object();
  CHECK(answer.at("id").as_string() == std::string("x\"y\\z") + kReplacement + kReplacement);
  CHECK_FALSE(contains_byte(missing->body, 0xFF));
  // Control bytes in the target never reach the handler: the HTTP parser refuses the request.
  auto control = daemon.get(
      "/api/v1/ranks/a\x01\x1b"
      "b");
  REQUIRE(control);
  CHECK(control->status == 400);
  CHECK_FALSE(contains_byte(control->body, 0x01));
  CHECK_FALSE(contains_byte(control->body, 0x1B));

  // The CLI reading the segments itself.
  std::string output;
  const int status = run_command(
      // In a subshell: run_command adds 2>&1, and warnings on stderr are not part of the JSON.
      "(" + binary_path("cli/rankstat") + " --direct --shm-dir=" + shm_dir.path() +
          " ranks --json 2>/dev/null)",
      &output);
  INFO(output);
  CHECK(status == 0);
  boost::system::error_code error;
  const boost::json::value doc = boost::json::parse(output, error);
  REQUIRE_FALSE(error);
  CHECK(output.find(std::string("m") + kReplacement) != std::string::npos);
  CHECK_FALSE(contains_byte(output, 0xFF));
}
