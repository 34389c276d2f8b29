// Scenario matrix for rank lifecycle and aggregation (docs/semantics.md). Every scenario drives real
// writer processes through the C++ Reporter and asserts what a scrape of a real rankstatd shows.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "rankstat/shmproto/layout.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace std::chrono_literals;

namespace {

// Fast liveness so each scenario takes well under a second per step.
const std::vector<std::string> kFastFlags = {"--shm.scan-interval=100ms", "--liveness.interval=50ms"};

std::vector<std::string> flags(std::vector<std::string> extra) {
  std::vector<std::string> all = kFastFlags;
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

std::string scrape(DaemonUnderTest& daemon) {
  auto r = daemon.get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

double total(const std::string& text, const std::string& family) {
  double sum = 0;
  for (const auto& s : samples_of(text, family)) sum += s.value;
  return sum;
}

std::string rank_state(DaemonUnderTest& daemon, const std::string& dp) {
  const std::string text = scrape(daemon);
  for (const char* state : {"LIVE", "STALLED", "DEAD", "CLOSED"}) {
    if (value_of(text, "rankstat_rank_state", {"dp" + dp + "\"", std::string("state=\"") + state + "\""}) ==
        1.0) {
      return state;
    }
  }
  return "ABSENT";
}

bool eventually(const std::function<bool()>& condition) {
  return wait_until(condition, 10s);
}

}  // namespace

TEST_CASE("a killed rank is detected as DEAD within a second and its counters stay in the totals") {
  TempDir shm;
  WriterProcess writer(shm.path(), {"--dp=0", "--events=7", "--gauge=sglang:test_live:livesum:3"});
  REQUIRE(writer.wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({}));
  REQUIRE(eventually([&] { return rank_state(daemon, "0") == "LIVE"; }));
  REQUIRE(value_of(scrape(daemon), "sglang:test_live") == Approx(3));
  const auto killed_at = std::chrono::steady_clock::now();
  writer.kill();
  REQUIRE(wait_until([&] { return rank_state(daemon, "0") == "DEAD"; }, 1s));
  CHECK(std::chrono::steady_clock::now() - killed_at < 1s);
  const std::string text = scrape(daemon);
  CHECK(value_of(text, "sglang:test_events_total") == Approx(7));
  CHECK_FALSE(value_of(text, "sglang:test_live").has_value());   // livesum: gone with the process
  CHECK(value_of(text, "sglang:num_running_reqs").has_value());  // mostrecent: the last value stays
}

TEST_CASE("a rank that exits cleanly is CLOSED and drops out of live gauges at once") {
  TempDir shm;
  WriterProcess a(shm.path(), {"--dp=0", "--events=2", "--gauge=sglang:test_live:livesum:3"});
  WriterProcess b(shm.path(), {"--dp=1", "--events=3", "--gauge=sglang:test_live:livesum:4"});
  REQUIRE(a.wait_ready());
  REQUIRE(b.wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({}));
  REQUIRE(eventually([&] { return total(scrape(daemon), "sglang:test_live") == Approx(7); }));
  REQUIRE(a.stop() == 0);
  REQUIRE(eventually([&] { return rank_state(daemon, "0") == "CLOSED"; }));
  const std::string text = scrape(daemon);
  CHECK(samples_of(text, "sglang:test_live").size() == 1);
  CHECK(value_of(text, "sglang:test_live", {"dp_rank=\"1\""}) == Approx(4));
  CHECK(total(text, "sglang:test_events_total") == Approx(5));
  CHECK(b.stop() == 0);
}

TEST_CASE("a restarted rank's counters continue from its predecessor's totals and never go backwards") {
  TempDir shm;
  DaemonUnderTest daemon(shm.path(), flags({}));
  double last = 0;
  std::uint64_t expected = 0;
  for (int incarnation = 0; incarnation < 3; ++incarnation) {
    WriterProcess writer(shm.path(), {"--dp=0", "--events=10", "--counter-every-ms=2",
                                      "--gauge=sglang:test_mr:mostrecent:" + std::to_string(incarnation)});
    REQUIRE(writer.wait_ready());
    REQUIRE(eventually([&] {
      const std::string text = scrape(daemon);
      const double now = value_of(text, "sglang:test_events_total").value_or(-1);
      CHECK(now >= last);
      last = std::max(last, now);
      return value_of(text, "sglang:test_mr") == Approx(incarnation) && now > static_cast<double>(expected);
    }));
    if (incarnation % 2 == 0) {
      REQUIRE(writer.stop() == 0);
      expected += writer.events().value_or(0);
    } else {
      writer.kill();  // its last increments are in its cumulative block; only the printed total is lost
    }
  }
  const std::string text = scrape(daemon);
  CHECK(value_of(text, "sglang:test_events_total").value_or(0) >= static_cast<double>(expected));
  CHECK(value_of(text, "sglang:test_events_total").value_or(0) >= last);
  CHECK(value_of(text, "rankstat_generation_events_total", {"event=\"replaced\""}) == Approx(2));
}

TEST_CASE("a stalled rank keeps its values, exports its heartbeat age and is never reclaimed") {
  TempDir shm;
  WriterProcess writer(shm.path(), {"--dp=0", "--running=5", "--stall", "--hold-seconds=30"});
  REQUIRE(writer.wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({"--liveness.stall-after=300ms", "--liveness.dead-grace=100ms"}));
  REQUIRE(eventually([&] { return rank_state(daemon, "0") == "STALLED"; }));
  std::this_thread::sleep_for(500ms);  // longer than the dead grace: a stalled rank must not be retired
  const std::string text = scrape(daemon);
  CHECK(rank_state(daemon, "0") == "STALLED");
  CHECK(value_of(text, "sglang:num_running_reqs") == Approx(5));
  CHECK(value_of(text, "rankstat_rank_heartbeat_age_seconds").value_or(0) >= 0.3);
  CHECK(value_of(text, "rankstat_generation_events_total", {"event=\"retired\""}) == Approx(0));
  CHECK(writer.stop() == 0);
}

TEST_CASE("a segment whose pid now belongs to another process is DEAD (pid reuse)") {
  TempDir shm;
  WriterProcess writer(shm.path(), {"--dp=0", "--running=1", "--events=4"});
  REQUIRE(writer.wait_ready());
  // The same bytes under another rank's name, claiming the pid of this test process but with a start
  // time that does not match it: exactly what a dead writer's segment looks like after pid reuse.
  const std::string source = shm.path() + "/" + shm.list().front();
  const std::string forged = shm.path() + "/rankstat.test.scheduler.tp0-pp0-ep0-dp7";
  REQUIRE(run_command("cp " + source + " " + forged) == 0);
  {
    const int fd = ::open(forged.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    const auto pid = static_cast<std::uint32_t>(getpid());
    const std::uint64_t wrong_ticks = 1;
    const std::int32_t dp = 7;
    const char rank_key[32] = "tp0-pp0-ep0-dp7";
    REQUIRE(::pwrite(fd, &pid, sizeof pid, 40) == sizeof pid);
    REQUIRE(::pwrite(fd, &wrong_ticks, sizeof wrong_ticks, 48) == sizeof wrong_ticks);
    REQUIRE(::pwrite(fd, &dp, sizeof dp, 88) == sizeof dp);
    REQUIRE(::pwrite(fd, rank_key, sizeof rank_key, 416) == sizeof rank_key);
    ::close(fd);
  }
  DaemonUnderTest daemon(shm.path(), flags({}));
  REQUIRE(eventually([&] { return rank_state(daemon, "7") == "DEAD" && rank_state(daemon, "0") == "LIVE"; }));
  CHECK(writer.stop() == 0);
}

TEST_CASE("every gauge mode aggregates live, dead and restarted ranks like prometheus_client") {
  TempDir shm;
  const std::vector<std::string> modes = {"all",     "liveall", "sum",     "livesum",    "min",
                                          "livemin", "max",     "livemax", "mostrecent", "livemostrecent"};
  auto gauge_args = [&](int dp, double value) {
    std::vector<std::string> args = {"--dp=" + std::to_string(dp), "--hold-seconds=30"};
    for (const auto& m : modes)
      args.push_back("--gauge=sglang:test_" + m + ":" + m + ":" + std::to_string(value));
    return args;
  };
  // Two processes of one engine that share a label set (same ranks), each with its own segment, as
  // prometheus_client's tests use two pids for one series.
  auto with_key = [&](std::vector<std::string> args, const std::string& key) {
    args.push_back("--rank-key=" + key);
    return args;
  };
  auto a = std::make_unique<WriterProcess>(shm.path(), with_key(gauge_args(0, 1), "proc-a"));
  REQUIRE(a->wait_ready());
  std::this_thread::sleep_for(20ms);  // B's values are strictly newer
  auto b = std::make_unique<WriterProcess>(shm.path(), with_key(gauge_args(0, 2), "proc-b"));
  REQUIRE(b->wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({"--liveness.dead-grace=1h"}));
  std::string text;
  REQUIRE(eventually([&] {
    text = scrape(daemon);
    return samples_of(text, "sglang:test_all").size() == 2;
  }));
  auto v = [&](const std::string& mode) { return value_of(text, "sglang:test_" + mode); };
  CHECK(samples_of(text, "sglang:test_liveall").size() == 2);
  CHECK(v("sum") == Approx(3));
  CHECK(v("livesum") == Approx(3));
  CHECK(v("min") == Approx(1));
  CHECK(v("livemin") == Approx(1));
  CHECK(v("max") == Approx(2));
  CHECK(v("livemax") == Approx(2));
  CHECK(v("mostrecent") == Approx(2));
  CHECK(v("livemostrecent") == Approx(2));

  b->kill();  // the newer, larger one dies
  REQUIRE(eventually([&] {
    text = scrape(daemon);
    return samples_of(text, "sglang:test_liveall").size() == 1;
  }));
  CHECK(samples_of(text, "sglang:test_all").size() == 2);  // kept for the grace period
  CHECK(v("sum") == Approx(3));                            // a dead process stays in sum
  CHECK(v("livesum") == Approx(1));
  CHECK(v("max") == Approx(2));
  CHECK(v("livemax") == Approx(1));
  CHECK(v("mostrecent") == Approx(2));  // the newest value wins, even from a dead process
  CHECK(v("livemostrecent") == Approx(1));

  // B restarts under the same name with a new value: the new generation replaces the dead one.
  b = std::make_unique<WriterProcess>(shm.path(), with_key(gauge_args(0, 5), "proc-b"));
  REQUIRE(b->wait_ready());
  REQUIRE(eventually([&] {
    text = scrape(daemon);
    return v("livesum") == Approx(6);
  }));
  CHECK(v("sum") == Approx(8));  // A 1 + dead B 2 + new B 5
  CHECK(v("livemax") == Approx(5));
  CHECK(v("mostrecent") == Approx(5));
  CHECK(samples_of(text, "sglang:test_liveall").size() == 2);
  CHECK(a->stop() == 0);
  CHECK(b->stop() == 0);
}

TEST_CASE("a mostrecent gauge that was never set is absent, not 0") {
  TempDir shm;
  WriterProcess writer(shm.path(), {"--dp=0", "--gauge=sglang:test_unset:mostrecent:unset",
                                    "--gauge=sglang:test_zero:mostrecent:0"});
  REQUIRE(writer.wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({}));
  std::string text;
  REQUIRE(eventually([&] {
    text = scrape(daemon);
    return value_of(text, "sglang:test_zero").has_value();
  }));
  CHECK(value_of(text, "sglang:test_zero") == Approx(0));
  CHECK(samples_of(text, "sglang:test_unset").empty());
  CHECK(writer.stop() == 0);
}

TEST_CASE(
    "a dead rank's per-process series leave after the grace period and its counters are retired intact") {
  TempDir shm;
  TempDir state("rankstat-state");
  WriterProcess writer(shm.path(), {"--dp=0", "--events=9", "--gauge=sglang:test_pp:all:4"});
  REQUIRE(writer.wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({"--liveness.dead-grace=300ms", "--state.dir=" + state.path()}));
  REQUIRE(eventually([&] { return value_of(scrape(daemon), "sglang:test_pp").has_value(); }));
  writer.kill();
  REQUIRE(eventually([&] {
    return value_of(scrape(daemon), "rankstat_generation_events_total", {"event=\"retired\""}) == Approx(1);
  }));
  const std::string text = scrape(daemon);
  CHECK(samples_of(text, "sglang:test_pp").empty());
  CHECK(value_of(text, "sglang:test_events_total") == Approx(9));
  CHECK(value_of(text, "sglang:test_latency_seconds_count") == Approx(9));
  CHECK(value_of(text, "rankstat_generation_events_total", {"event=\"unlinked\""}) == Approx(1));
  CHECK(shm.list().empty());  // the segment file is gone: no pile-up
}

TEST_CASE("a daemon restart in the middle of traffic loses no counter value and double counts nothing") {
  TempDir shm;
  TempDir state("rankstat-state");
  const std::vector<std::string> daemon_flags =
      flags({"--liveness.dead-grace=200ms", "--state.dir=" + state.path()});
  std::uint64_t finished_events = 0;
  double last_seen = 0;
  auto check_monotonic = [&](DaemonUnderTest& d) {
    const double now = value_of(scrape(d), "sglang:test_events_total").value_or(0);
    CHECK(now >= last_seen);
    last_seen = std::max(last_seen, now);
  };
  {
    auto daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
    for (int round = 0; round < 4; ++round) {
      WriterProcess writer(shm.path(), {"--dp=0", "--counter-every-ms=1", "--hold-seconds=30"});
      REQUIRE(writer.wait_ready());
      std::this_thread::sleep_for(150ms);
      check_monotonic(*daemon);
      if (round == 1 || round == 2) {
        daemon->process().signal(SIGKILL);  // the daemon dies mid-traffic ...
        REQUIRE(daemon->process().wait_for(5s).has_value());
        daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);  // ... and comes back
        REQUIRE(
            eventually([&] { return value_of(scrape(*daemon), "sglang:test_events_total").has_value(); }));
        check_monotonic(*daemon);
      }
      REQUIRE(writer.stop() == 0);
      finished_events += writer.events().value_or(0);
      // Let the closed generation be retired (folded, persisted, unlinked) before the next round.
      REQUIRE(eventually([&] { return shm.list().empty(); }));
      check_monotonic(*daemon);
    }
    REQUIRE(eventually(
        [&] { return value_of(scrape(*daemon), "sglang:test_events_total") == Approx(finished_events); }));
    daemon->process().signal(SIGKILL);
    daemon->process().wait_for(5s);
  }
  DaemonUnderTest restarted(shm.path(), daemon_flags);
  CHECK(value_of(scrape(restarted), "sglang:test_events_total") ==
        Approx(static_cast<double>(finished_events)));
}

TEST_CASE("two engine instances with the same rank numbers never mix") {
  TempDir shm;
  WriterProcess a(shm.path(), {"--instance=engine-a", "--dp=0", "--running=3", "--events=2"});
  WriterProcess b(shm.path(), {"--instance=engine-b", "--dp=0", "--running=8", "--events=5"});
  REQUIRE(a.wait_ready());
  REQUIRE(b.wait_ready());
  {
    DaemonUnderTest daemon(shm.path(), flags({"--label.instance=engine_instance"}));
    std::string text;
    REQUIRE(eventually([&] {
      text = scrape(daemon);
      return samples_of(text, "sglang:num_running_reqs").size() == 2;
    }));
    CHECK(value_of(text, "sglang:num_running_reqs", {"engine_instance=\"engine-a\""}) == Approx(3));
    CHECK(value_of(text, "sglang:num_running_reqs", {"engine_instance=\"engine-b\""}) == Approx(8));
    CHECK(value_of(text, "sglang:test_events_total", {"engine_instance=\"engine-a\""}) == Approx(2));
    CHECK(value_of(text, "sglang:test_events_total", {"engine_instance=\"engine-b\""}) == Approx(5));
  }
  {
    // Without an instance label the label sets collide: one instance keeps the series (never a sum or
    // a mix of both), and the collision is counted so the operator can add a label.
    DaemonUnderTest daemon(shm.path(), flags({}));
    std::string text;
    REQUIRE(eventually([&] {
      text = scrape(daemon);
      return value_of(text, "rankstat_scrape_instance_collisions").value_or(0) > 0;
    }));
    const auto running = value_of(text, "sglang:num_running_reqs");
    const auto events = value_of(text, "sglang:test_events_total");
    INFO(text);
    REQUIRE(running);
    REQUIRE(events);
    CHECK(((*running == 3 && *events == 2) || (*running == 8 && *events == 5)));
  }
  CHECK(a.stop() == 0);
  CHECK(b.stop() == 0);
}

TEST_CASE("a family declared with another mode by a second rank rejects that rank's segment") {
  TempDir shm;
  WriterProcess a(shm.path(), {"--dp=0", "--gauge=sglang:test_conflict:livesum:1"});
  REQUIRE(a.wait_ready());
  WriterProcess b(shm.path(), {"--dp=1", "--gauge=sglang:test_conflict:max:9"});
  REQUIRE(b.wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({}));
  std::string text;
  REQUIRE(eventually([&] {
    text = scrape(daemon);
    return value_of(text, "rankstat_segments_rejected_total", {"reason=\"schema_conflict\""}) == Approx(1);
  }));
  CHECK(value_of(text, "sglang:test_conflict") == Approx(1));
  CHECK(samples_of(text, "sglang:num_running_reqs").size() == 1);
  CHECK(daemon.log().find("sglang:test_conflict") != std::string::npos);
  CHECK(a.stop() == 0);
  CHECK(b.stop() == 0);
}

TEST_CASE("temporaries left by writers that died while creating a segment are swept") {
  TempDir shm;
  // A pid that cannot exist (above the kernel's pid_max limit) and an mtime well in the past.
  const std::string leftover = shm.path() + "/rankstat.test.scheduler.tp0-pp0-ep0.tmp.999999999.77";
  std::ofstream(leftover) << "half-built";
  REQUIRE(run_command("touch -d '10 minutes ago' " + leftover) == 0);
  const std::string young = shm.path() + "/rankstat.test.scheduler.tp1-pp0-ep0.tmp.999999998.78";
  std::ofstream(young) << "being built";
  DaemonUnderTest daemon(shm.path(), flags({}));
  REQUIRE(eventually([&] {
    return value_of(scrape(daemon), "rankstat_generation_events_total", {"event=\"temporary_swept\""}) ==
           Approx(1);
  }));
  CHECK(access(leftover.c_str(), F_OK) != 0);
  CHECK(access(young.c_str(), F_OK) == 0);  // may still be in creation: too young to judge
}
