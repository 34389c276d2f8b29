// Real processes end to end: writer ranks -> shared-memory rings -> rankstatd -> HTTP scrapes.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "http/gzip.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<ChildProcess> start_writer(const TempDir& shm, const std::vector<std::string>& args,
                                           const std::string& out_path) {
  std::vector<std::string> argv = {binary_path("tests/integration/rankstat_test_writer")};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<ChildProcess>(
      argv, std::map<std::string, std::string>{{"RANKSTAT_SHM_DIR", shm.path()}}, out_path);
}

std::string scrape(DaemonUnderTest& daemon) {
  auto r = daemon.get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

// promtool lints SGLang's own naming (colons in names, "_ms" units); anything else is a real finding.
void require_promtool_clean(const std::string& exposition, const TempDir& dir) {
  const std::string path = dir.path() + "/exposition.prom";
  std::ofstream(path) << exposition;
  std::string output;
  const int rc = run_command("promtool check metrics < " + path, &output);
  INFO("promtool output:\n" << output);
  REQUIRE((rc == 0 || rc == 3));
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const bool sglang_naming =
        line.rfind("sglang:", 0) == 0 && (line.find("should not contain ':'") != std::string::npos ||
                                          line.find("abbreviated units") != std::string::npos);
    INFO("finding: " << line);
    CHECK(sglang_naming);
  }
}

}  // namespace

TEST_CASE("writer ranks feed the daemon and each rank gets its own series with SGLang's names and labels") {
  TempDir shm;
  TempDir scratch("rankstat-test-out");
  std::vector<std::unique_ptr<ChildProcess>> writers;
  // Two ranks start before the daemon, two after: both kinds must be picked up.
  for (int rank = 0; rank < 2; ++rank) {
    writers.push_back(
        start_writer(shm,
                     {"--tp=0", "--dp=" + std::to_string(rank), "--running=" + std::to_string(10 + rank),
                      "--queue=" + std::to_string(rank), "--events=" + std::to_string(5 * (rank + 1))},
                     scratch.path() + "/w" + std::to_string(rank) + ".out"));
  }
  REQUIRE(wait_until([&] { return shm.list().size() == 2; }, 10s));
  DaemonUnderTest daemon(shm.path());
  for (int rank = 2; rank < 4; ++rank) {
    writers.push_back(
        start_writer(shm,
                     {"--tp=0", "--dp=" + std::to_string(rank), "--running=" + std::to_string(10 + rank),
                      "--queue=" + std::to_string(rank), "--events=" + std::to_string(5 * (rank + 1))},
                     "/dev/null"));
  }
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        return samples_of(text, "sglang:num_running_reqs").size() == 4;
      },
      10s));
  for (int rank = 0; rank < 4; ++rank) {
    const std::string dp = "dp_rank=\"" + std::to_string(rank) + "\"";
    CHECK(value_of(text, "sglang:num_running_reqs", {dp}) == Approx(10 + rank));
    CHECK(value_of(text, "sglang:num_queue_reqs", {dp}) == Approx(rank));
    CHECK(value_of(text, "sglang:token_usage", {dp}) == Approx(0.25));
  }
  const auto samples = samples_of(text, "sglang:num_running_reqs");
  for (const auto& s : samples) {
    INFO(s.labels);
    CHECK(s.labels.find("model_name=\"test-model\"") != std::string::npos);
    CHECK(s.labels.find("engine_type=\"unified\"") != std::string::npos);
    CHECK(s.labels.find("tp_rank=\"0\"") != std::string::npos);
    CHECK(s.labels.find("pp_rank=\"0\"") != std::string::npos);
    CHECK(s.labels.find("moe_ep_rank=\"0\"") != std::string::npos);
  }
  // Counters and histograms are summed per label set; each writer's series differ only by dp_rank.
  double events = 0;
  for (const auto& s : samples_of(text, "sglang:test_events_total")) events += s.value;
  CHECK(events == Approx(5 + 10 + 15 + 20));
  CHECK(value_of(text, "sglang:test_latency_seconds_count", {"dp_rank=\"3\""}) == Approx(20));
  CHECK(value_of(text, "sglang:test_latency_seconds_bucket", {"dp_rank=\"3\"", "le=\"1.0\""}) == Approx(15));
  CHECK(value_of(text, "rankstat_segments", {"state=\"LIVE\""}) == Approx(4));
  require_promtool_clean(text, scratch);
  for (auto& w : writers) w->signal(SIGTERM);
  for (auto& w : writers) CHECK(w->wait_for(10s) == 0);
  CHECK(daemon.stop() == 0);
}

TEST_CASE(
    "metrics are served at the telemetry path with the 0.0.4 content type, gzip when asked, no redirect") {
  TempDir shm;
  auto writer = start_writer(shm, {"--running=3"}, "/dev/null");
  DaemonUnderTest daemon(shm.path());
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:num_running_reqs").has_value(); }, 10s));
  auto plain = daemon.get("/metrics");
  REQUIRE(plain);
  CHECK(plain->status == 200);
  CHECK(plain->headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(plain->headers.count("content-encoding") == 0);
  // The body depends on Accept (the name escaping scheme) as well as Accept-Encoding: a cache keys on both.
  CHECK(plain->headers["vary"] == "Accept, Accept-Encoding");
  auto zipped = daemon.get("/metrics", {{"Accept-Encoding", "gzip"}});
  REQUIRE(zipped);
  CHECK(zipped->status == 200);
  CHECK(zipped->headers["content-encoding"] == "gzip");
  CHECK(zipped->headers["vary"] == "Accept, Accept-Encoding");
  const std::string inflated = rankstat::http::gzip_decompress(zipped->body);
  CHECK(value_of(inflated, "sglang:num_running_reqs") == Approx(3));
  auto refused = daemon.get("/metrics", {{"Accept-Encoding", "gzip;q=0, identity"}});
  REQUIRE(refused);
  CHECK(refused->headers.count("content-encoding") == 0);
  auto with_query = daemon.get("/metrics?x=1");
  REQUIRE(with_query);
  CHECK(with_query->status == 200);
  auto health = daemon.get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  auto ready = daemon.get("/readyz");
  REQUIRE(ready);
  CHECK(ready->status == 200);
  auto landing = daemon.get("/");
  REQUIRE(landing);
  CHECK(landing->status == 200);
  CHECK(landing->body.find("href=\"/metrics\"") != std::string::npos);
  auto missing = daemon.get("/nope");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  auto ranks = daemon.get("/api/v1/ranks");
  REQUIRE(ranks);
  CHECK(ranks->status == 200);
  CHECK(ranks->headers["content-type"] == "application/json");
  CHECK(ranks->body.find("\"state\":\"LIVE\"") != std::string::npos);
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
}

TEST_CASE("killing the daemon never disturbs a writer and counters never go backwards after its restart") {
  TempDir shm;
  TempDir scratch("rankstat-test-out");
  const std::string out = scratch.path() + "/flood.out";
  auto writer = start_writer(shm, {"--running=7", "--flood-seconds=4", "--hold-seconds=30"}, out);
  double last_events = 0;
  for (int round = 0; round < 3; ++round) {
    DaemonUnderTest daemon(shm.path());
    double events = 0;
    REQUIRE(wait_until(
        [&] {
          const auto v = value_of(scrape(daemon), "sglang:test_events_total");
          events = v.value_or(0);
          return v.has_value() && events > 0;
        },
        10s));
    CHECK(events >= last_events);
    last_events = events;
    daemon.process().signal(SIGKILL);
    REQUIRE(daemon.process().wait_for(5s).has_value());
    CHECK(writer->running());
  }
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
  const std::string summary = read_file(out);
  INFO(summary);
  CHECK(summary.find("appends=") != std::string::npos);
}

TEST_CASE("a segment with another layout major is rejected, logged with both versions, and counted") {
  TempDir shm;
  WriterProcess writer(shm.path(), {"--tp=0", "--running=1"});
  REQUIRE(writer.wait_ready());  // published: renamed from its temporary name, magic written
  REQUIRE(shm.list().size() == 1);
  // Forge a second segment from a copy of the real one with the major bumped.
  const std::string source = shm.path() + "/" + shm.list().front();
  const std::string forged = shm.path() + "/rankstat.forged.scheduler.tp9-pp0-ep0";
  REQUIRE(run_command("cp " + source + " " + forged) == 0);
  {
    const int fd = ::open(forged.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    const std::uint16_t major = rankstat::shm::kLayoutMajor + 1;
    REQUIRE(::pwrite(fd, &major, sizeof major, 8) == sizeof major);
    ::close(fd);
  }
  DaemonUnderTest daemon(shm.path());
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        return value_of(text, "sglang:num_running_reqs").has_value();
      },
      10s));
  CHECK(value_of(text, "rankstat_segments_rejected_total", {"reason=\"major_mismatch\""}) == Approx(1));
  CHECK(samples_of(text, "sglang:num_running_reqs").size() == 1);
  const std::string log = daemon.log();
  INFO(log);
  // The refusal names both versions: the segment's and the reader's.
  CHECK(log.find("segment layout " + std::to_string(rankstat::shm::kLayoutMajor + 1) + ".0 (layout hash") !=
        std::string::npos);
  CHECK(log.find("incompatible with this reader's " + std::to_string(rankstat::shm::kLayoutMajor) + ".0") !=
        std::string::npos);
  CHECK(writer.stop() == 0);
}

TEST_CASE("the example engine's exposition is accepted by promtool") {
  TempDir shm;
  TempDir scratch("rankstat-test-out");
  ChildProcess engine({binary_path("deploy/rankstat-example-engine"), "--shm-dir=" + shm.path(), "--dp=3",
                       "--step-seconds=0.005", "--arrival-rate=200"},
                      {}, "/dev/null");
  DaemonUnderTest daemon(shm.path());
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        return samples_of(text, "sglang:gen_throughput").size() == 3 &&
               samples_of(text, "sglang:cache_hit_rate").size() == 3;
      },
      20s));
  CHECK(samples_of(text, "sglang:num_running_reqs").size() >= 3);  // plus per-priority series
  CHECK(!samples_of(text, "sglang:queue_time_seconds_bucket").empty());
  CHECK(!samples_of(text, "sglang:realtime_tokens_total").empty());
  require_promtool_clean(text, scratch);
  engine.signal(SIGTERM);
  CHECK(engine.wait_for(10s) == 0);
  CHECK(daemon.stop() == 0);
}

TEST_CASE("a writer filling its ring in 50 ms loses no record: drains are paced by how fast rings fill") {
  // The test writer's ring is 64 KiB; 2 snapshots per ms of 640 bytes fill it in about 50 ms.
  const std::vector<std::string> fast_writer = {"--reports-per-ms=2", "--report-seconds=2",
                                                "--hold-seconds=60"};
  SECTION("with the default pacing nothing is dropped, and an idle daemon slows down to its slowest pace") {
    TempDir shm;
    DaemonUnderTest daemon(shm.path());
    auto interval = [&] { return value_of(scrape(daemon), "rankstat_poll_interval_seconds").value_or(-1); };
    REQUIRE(wait_until([&] { return interval() == Approx(0.1); }, 10s));
    WriterProcess writer(shm.path(), fast_writer);
    REQUIRE(writer.wait_ready());
    std::this_thread::sleep_for(1s);
    const double busy_interval = interval();
    INFO("interval while the writer reports: " << busy_interval << " s");
    // Faster than idle; how much faster follows the fill rate the writer reaches, which a loaded machine
    // lowers (0.045 s seen there against 0.02 s on a quiet one). No drop, below, is the promise.
    CHECK(busy_interval < 0.1);
    // Once the writer only heartbeats, nothing fills and the pacer backs off to --shm.poll-interval-max.
    CHECK(wait_until([&] { return interval() == Approx(0.1); }, 10s));
    REQUIRE(writer.stop() == 0);
    INFO(writer.output());
    CHECK(writer.printed("appends").value_or(0) >= 1000);
    CHECK(writer.printed("dropped") == 0u);
  }
  SECTION("the same writer does drop against a fixed 100 ms poll (what the pacing prevents)") {
    TempDir shm;
    DaemonUnderTest daemon(shm.path(), {"--shm.poll-interval=100ms"});
    WriterProcess writer(shm.path(), fast_writer);
    REQUIRE(writer.wait_ready());
    std::this_thread::sleep_for(2500ms);
    REQUIRE(writer.stop() == 0);
    INFO(writer.output());
    CHECK(writer.printed("dropped").value_or(0) > 0);
  }
}

TEST_CASE("every rankstat_* family the daemon serves is documented in the operations guide") {
  TempDir shm;
  auto writer = start_writer(shm, {"--running=1"}, "/dev/null");
  DaemonUnderTest daemon(shm.path());
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "rankstat_rank_up").has_value(); }, 10s));
  const std::string text = scrape(daemon);
  const std::string guide = read_file(source_path("docs/operations.md"));
  std::istringstream lines(text);
  std::string line;
  int families = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE rankstat_", 0) != 0) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    ++families;
    INFO("family " << name);
    CHECK(guide.find("| `" + name + "` |") != std::string::npos);
  }
  CHECK(families >= 20);
  writer->signal(SIGTERM);
  CHECK(writer->wait_for(10s) == 0);
}

TEST_CASE("one request with ?details=1 returns every rank's detail document, as asking for each rank does") {
  TempDir shm;
  std::vector<std::unique_ptr<ChildProcess>> writers;
  for (int rank = 0; rank < 3; ++rank) {
    writers.push_back(start_writer(
        shm, {"--dp=" + std::to_string(rank), "--running=" + std::to_string(20 + rank), "--events=3"},
        "/dev/null"));
  }
  DaemonUnderTest daemon(shm.path());
  auto get_json = [&](const std::string& target) {
    auto r = daemon.get(target);
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return boost::json::parse(r->body).as_object();
  };
  REQUIRE(wait_until([&] { return get_json("/api/v1/ranks")["ranks"].as_array().size() == 3; }, 10s));
  const boost::json::object summaries = get_json("/api/v1/ranks");
  CHECK(summaries.if_contains("details") == nullptr);
  CHECK(summaries.at("ranks").as_array()[0].as_object().if_contains("scheduler") == nullptr);
  const boost::json::object bulk = get_json("/api/v1/ranks?details=1");
  CHECK(bulk.at("details") == true);
  const auto& ranks = bulk.at("ranks").as_array();
  REQUIRE(ranks.size() == 3);
  for (const auto& entry : ranks) {
    const auto& detail = entry.as_object();
    const std::string id(detail.at("id").as_string());
    INFO("rank " << id);
    const boost::json::object single = get_json("/api/v1/ranks/" + id);
    // Everything but the ages, which move between the two requests.
    for (const auto& [key, value] : single) {
      if (key == "heartbeat_age_seconds" || key == "records_per_second") continue;
      INFO("field " << key);
      if (key == "scheduler") {
        CHECK(detail.at("scheduler").as_object().at("fields") == value.as_object().at("fields"));
      } else {
        CHECK(detail.at(key) == value);
      }
    }
    CHECK(detail.size() == single.size());
  }
  for (auto& w : writers) w->signal(SIGTERM);
  for (auto& w : writers) CHECK(w->wait_for(10s) == 0);
}
