// Scenario matrix for rank lifecycle and aggregation (docs/semantics.md). Every scenario drives real
// writer processes through the C++ Reporter and asserts what a scrape of a real rankstatd shows.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
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

TEST_CASE(
    "two engines on one host with the same instance and rank numbers both publish, are summed, survive a "
    "daemon restart, and a restarted one takes its own name back") {
  TempDir shm;
  // Default engine settings: same instance ("test") and ranks, so the same segment name.
  WriterProcess a(shm.path(), {"--dp=0", "--events=5", "--gauge=sglang:test_live:livesum:3"});
  REQUIRE(a.wait_ready());
  auto b = std::make_unique<WriterProcess>(
      shm.path(), std::vector<std::string>{"--dp=0", "--events=7", "--gauge=sglang:test_live:livesum:4"});
  REQUIRE(b->wait_ready());
  const std::string name = "rankstat.test.scheduler.tp0-pp0-ep0-dp0";
  CHECK(shm.list() == std::vector<std::string>{name, name + "_2"});
  CHECK(a.output().find("note:") == std::string::npos);
  CHECK(b->output().find("note: segment name " + shm.path() + "/" + name + " is held by a live writer (pid " +
                         std::to_string(a.pid()) + ")") != std::string::npos);
  struct stat first {};
  struct stat second {};
  REQUIRE(::stat((shm.path() + "/" + name).c_str(), &first) == 0);
  REQUIRE(::stat((shm.path() + "/" + name + "_2").c_str(), &second) == 0);

  auto both_served = [&](DaemonUnderTest& daemon) {
    std::string text;
    const bool served = eventually([&] {
      text = scrape(daemon);
      return value_of(text, "sglang:test_events_total") == Approx(12) &&
             value_of(text, "sglang:test_live") == Approx(7);
    });
    INFO(text);
    CHECK(served);
    // Each engine is its own rank to the daemon: two LIVE ranks, told apart by their rank keys.
    CHECK(value_of(text, "rankstat_rank_state", {"rank=\"tp0-pp0-ep0-dp0\"", "state=\"LIVE\""}) == 1.0);
    CHECK(value_of(text, "rankstat_rank_state", {"rank=\"tp0-pp0-ep0-dp0_2\"", "state=\"LIVE\""}) == 1.0);
  };
  {
    DaemonUnderTest daemon(shm.path(), flags({}));
    both_served(daemon);
    daemon.process().signal(SIGKILL);
    REQUIRE(daemon.process().wait_for(5s).has_value());
  }
  DaemonUnderTest restarted(shm.path(), flags({}));
  both_served(restarted);
  struct stat now {};
  REQUIRE(::stat((shm.path() + "/" + name).c_str(), &now) == 0);
  CHECK(now.st_ino == first.st_ino);
  REQUIRE(::stat((shm.path() + "/" + name + "_2").c_str(), &now) == 0);
  CHECK(now.st_ino == second.st_ino);

  // B crashes and restarts while A is alive: its dead segment's name is free for it again.
  b->kill();
  b = std::make_unique<WriterProcess>(
      shm.path(), std::vector<std::string>{"--dp=0", "--events=2", "--gauge=sglang:test_live:livesum:6"});
  REQUIRE(b->wait_ready());
  CHECK(shm.list() == std::vector<std::string>{name, name + "_2"});
  std::string text;
  REQUIRE(eventually([&] {
    text = scrape(restarted);
    return value_of(text, "sglang:test_live") == Approx(9);
  }));
  CHECK(value_of(text, "sglang:test_events_total") == Approx(14));  // the dead generation's 7 stay in
  CHECK(a.stop() == 0);
  CHECK(b->stop() == 0);
}

TEST_CASE("a family declared with another mode by a second rank costs only that family's older series") {
  TempDir shm;
  WriterProcess a(shm.path(), {"--dp=0", "--gauge=sglang:test_conflict:livesum:1"});
  REQUIRE(a.wait_ready());
  WriterProcess b(shm.path(), {"--dp=1", "--gauge=sglang:test_conflict:max:9"});
  REQUIRE(b.wait_ready());
  DaemonUnderTest daemon(shm.path(), flags({}));
  std::string text;
  REQUIRE(eventually([&] {
    text = scrape(daemon);
    return value_of(text, "rankstat_family_conflicts_total") == Approx(1);
  }));
  // The newest live declaration (b's) wins; every other family of both ranks is served.
  CHECK(value_of(text, "sglang:test_conflict") == Approx(9));
  CHECK(samples_of(text, "sglang:test_conflict").size() == 1);
  CHECK(samples_of(text, "sglang:num_running_reqs").size() == 2);
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

namespace {

// Every sample of the engine's counter, histogram and summary families (sglang:*) that a scrape shows,
// across all scrapes of all daemons of a scenario: none may ever go below a value seen before, as
// Prometheus would read that as a counter reset. A fractional total can differ by an ulp or two when the
// same generations are summed in another order (docs/reliability.md); such a step is counted apart and
// anything larger is a decrease.
class NeverBackwards {
 public:
  void observe(const std::string& text) {
    std::istringstream lines(text);
    std::string line;
    std::vector<std::string> families;
    while (std::getline(lines, line)) {
      if (line.rfind("# TYPE sglang:", 0) == 0) {
        std::istringstream words(line.substr(7));
        std::string name;
        std::string type;
        words >> name >> type;
        if (type == "counter" || type == "histogram" || type == "summary") families.push_back(name);
        continue;
      }
      if (line.empty() || line[0] == '#') continue;
      const auto space = line.rfind(' ');
      const std::string key = line.substr(0, space);
      const std::string name = key.substr(0, key.find('{'));
      const bool cumulative = std::any_of(families.begin(), families.end(), [&](const std::string& f) {
        return name == f || name == f + "_total" || name == f + "_bucket" || name == f + "_count" ||
               name == f + "_sum";
      });
      if (!cumulative) continue;
      const double value = std::strtod(line.c_str() + space + 1, nullptr);
      ++samples_;
      auto [it, inserted] = highest_.try_emplace(key, value);
      if (value >= it->second) {
        it->second = value;
        continue;
      }
      const double ulp = std::nextafter(it->second, HUGE_VAL) - it->second;
      if (it->second - value <= 4 * ulp) {
        ++rounding_;
      } else {
        decreases_.push_back(key + ": " + std::to_string(it->second) + " -> " + std::to_string(value));
      }
    }
  }
  // Checks what was observed; call at the end of a scenario.
  void verify() const {
    for (const std::string& d : decreases_) UNSCOPED_INFO("went backwards: " << d);
    CHECK(decreases_.empty());
    CHECK(samples_ > 0);
    if (rounding_ != 0) WARN(rounding_ << " fractional totals differed by an ulp (reordered sums)");
  }

 private:
  std::map<std::string, double> highest_;
  std::vector<std::string> decreases_;
  std::uint64_t samples_ = 0;
  std::uint64_t rounding_ = 0;
};

// What rankstat_test_writer --events=N adds: N to the counter, and N observations of 0.5 * (i % 4).
struct Lives {
  std::uint64_t events = 0;
  double latency_sum = 0;
  void add(int n) {
    events += static_cast<std::uint64_t>(n);
    for (int i = 0; i < n; ++i) latency_sum += 0.5 * (i % 4);
  }
};

// One rank's life: a writer under the same segment name as every other life of the scenario.
std::unique_ptr<WriterProcess> start_life(const TempDir& shm, int events, int running) {
  auto writer = std::make_unique<WriterProcess>(
      shm.path(), std::vector<std::string>{"--dp=0", "--events=" + std::to_string(events),
                                           "--running=" + std::to_string(running), "--hold-seconds=60"});
  REQUIRE(writer->wait_ready());
  return writer;
}

// Scrapes (every scrape checked by `watch`) until the totals are exactly those of `lives`.
bool shows_exactly(DaemonUnderTest& daemon, const Lives& lives, NeverBackwards& watch) {
  std::string text;
  const bool reached = eventually([&] {
    text = scrape(daemon);
    watch.observe(text);
    return value_of(text, "sglang:test_events_total") == Approx(static_cast<double>(lives.events)) &&
           value_of(text, "sglang:test_latency_seconds_count") == Approx(static_cast<double>(lives.events)) &&
           value_of(text, "sglang:test_latency_seconds_sum") == Approx(lives.latency_sum);
  });
  if (!reached) UNSCOPED_INFO("expected " << lives.events << " events; last scrape:\n" << text);
  return reached;
}

// Stops the daemon with `signo` (SIGTERM: a clean stop, SIGKILL: a crash) and forgets it.
void bring_down(std::unique_ptr<DaemonUnderTest>& daemon, int signo) {
  daemon->process().signal(signo);
  REQUIRE(daemon->process().wait_for(10s).has_value());
  daemon.reset();
}

const char* signal_name(int signo) {
  return signo == SIGKILL ? "SIGKILL" : "SIGTERM";
}

}  // namespace

TEST_CASE("a rank restarted just before the daemon restarts keeps its first life's counts") {
  for (const int signo : {SIGTERM, SIGKILL}) {
    DYNAMIC_SECTION("daemon stopped with " << signal_name(signo)) {
      TempDir shm;
      TempDir state("rankstat-state");
      // A grace period far longer than the test: the first life must not wait for it to be kept.
      const auto daemon_flags = flags({"--state.dir=" + state.path(), "--liveness.dead-grace=1h"});
      NeverBackwards watch;
      Lives lives;
      auto daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
      auto first = start_life(shm, 7, 2);
      lives.add(7);
      REQUIRE(shows_exactly(*daemon, lives, watch));
      first->kill();
      // The rank restarts: its new generation is renamed over the first one's file.
      auto second = start_life(shm, 5, 3);
      lives.add(5);
      REQUIRE(shows_exactly(*daemon, lives, watch));
      CHECK(shm.list().size() == 1);
      // The dead first life joined the retired totals when it died, not after the grace period.
      REQUIRE(eventually([&] {
        return value_of(scrape(*daemon), "rankstat_generation_events_total", {"event=\"folded\""}) ==
               Approx(1);
      }));
      bring_down(daemon, signo);
      daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
      REQUIRE(shows_exactly(*daemon, lives, watch));
      // From the persisted retired totals, not from a checkpoint.
      CHECK(value_of(scrape(*daemon), "rankstat_generation_events_total", {"event=\"recovered\""}) ==
            Approx(0));
      watch.verify();
      CHECK(second->stop() == 0);
    }
  }
}

TEST_CASE("a rank killed and restarted while the daemon is down keeps its first life's counts") {
  for (const int signo : {SIGTERM, SIGKILL}) {
    DYNAMIC_SECTION("daemon stopped with " << signal_name(signo)) {
      TempDir shm;
      TempDir state("rankstat-state");
      const auto daemon_flags = flags({"--state.dir=" + state.path()});
      NeverBackwards watch;
      Lives lives;
      auto daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
      auto first = start_life(shm, 7, 2);
      lives.add(7);
      REQUIRE(shows_exactly(*daemon, lives, watch));
      bring_down(daemon, signo);
      // No daemon runs: the first life dies and the second one's file replaces its file.
      first->kill();
      auto second = start_life(shm, 5, 3);
      lives.add(5);
      daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
      REQUIRE(shows_exactly(*daemon, lives, watch));
      const std::string text = scrape(*daemon);
      CHECK(value_of(text, "rankstat_generation_events_total", {"event=\"recovered\""}) == Approx(1));
      watch.verify();
      CHECK(second->stop() == 0);
    }
  }
}

TEST_CASE("a crash-looping rank keeps every life's counts while the daemon restarts in between") {
  TempDir shm;
  TempDir state("rankstat-state");
  const auto daemon_flags = flags({"--state.dir=" + state.path(), "--liveness.dead-grace=1h"});
  NeverBackwards watch;
  Lives lives;
  auto daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
  for (int life = 0; life < 8; ++life) {
    INFO("life " << life);
    auto writer = start_life(shm, 3 + life, 1 + life % 3);
    lives.add(3 + life);
    // A life that ended while no daemon ran: the daemon comes back while its successor runs.
    if (!daemon) daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
    REQUIRE(shows_exactly(*daemon, lives, watch));
    switch (life % 4) {
      case 0:  // crash; the next life starts while the daemon watches
        writer->kill();
        break;
      case 1:  // crash; the daemon crashes too once it saw the death, and finds the dead file again
        writer->kill();
        REQUIRE(eventually([&] { return rank_state(*daemon, "0") == "DEAD"; }));
        bring_down(daemon, SIGKILL);
        daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
        REQUIRE(shows_exactly(*daemon, lives, watch));
        break;
      case 2:  // the daemon crashes first; the rank crashes and restarts while none runs
        bring_down(daemon, SIGKILL);
        writer->kill();
        break;
      case 3:  // a clean exit, then a clean daemon stop; the next life starts while none runs
        REQUIRE(writer->stop() == 0);
        bring_down(daemon, SIGTERM);
        break;
    }
  }
  if (!daemon) daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
  REQUIRE(shows_exactly(*daemon, lives, watch));
  bring_down(daemon, SIGKILL);
  daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
  REQUIRE(shows_exactly(*daemon, lives, watch));
  watch.verify();
}

TEST_CASE("a segment that closed before the daemon started is drained like any other") {
  TempDir shm;
  WriterProcess writer(shm.path(), {"--dp=0", "--running=6", "--events=4"});
  REQUIRE(writer.wait_ready());
  REQUIRE(writer.stop() == 0);  // closed: its last report is still in its ring, never drained
  DaemonUnderTest daemon(shm.path(), flags({}));
  REQUIRE(eventually([&] { return rank_state(daemon, "0") == "CLOSED"; }));
  const std::string text = scrape(daemon);
  INFO(text);
  CHECK(value_of(text, "sglang:num_running_reqs") == Approx(6));  // its last report
  CHECK(value_of(text, "sglang:test_events_total") == Approx(4));
  CHECK(value_of(text, "rankstat_records_drained_total").value_or(0) >= 1);
}

TEST_CASE(
    "without a state dir a dead rank's file is kept until its totals are retired, then unlinked, and a "
    "daemon "
    "restarted before that counts it again") {
  TempDir shm;
  NeverBackwards watch;
  Lives lives;
  const auto daemon_flags = flags({"--liveness.dead-grace=1500ms"});
  auto daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
  auto writer = start_life(shm, 9, 2);
  lives.add(9);
  REQUIRE(shows_exactly(*daemon, lives, watch));
  writer->kill();
  // Within the grace the file stays: a daemon restarted now finds it DEAD and counts it again.
  bring_down(daemon, SIGKILL);
  CHECK(shm.list().size() == 1);
  daemon = std::make_unique<DaemonUnderTest>(shm.path(), daemon_flags);
  REQUIRE(shows_exactly(*daemon, lives, watch));
  // Retired after the grace: its totals are in the retired totals, and the file goes without a state dir
  // too (20 short-lived workers no longer leave 20 files in /dev/shm).
  REQUIRE(eventually([&] {
    return value_of(scrape(*daemon), "rankstat_generation_events_total", {"event=\"retired\""}) == Approx(1);
  }));
  REQUIRE(eventually([&] { return shm.list().empty(); }));
  CHECK(value_of(scrape(*daemon), "rankstat_generation_events_total", {"event=\"unlinked\""}) == Approx(1));
  REQUIRE(shows_exactly(*daemon, lives, watch));
  watch.verify();
}
