// Trust under attack (issue 12): a hard link counts once, a squatted name does not keep the engine from
// publishing (it publishes beside it) and is reported by the daemon, trust holds per instance, permissions
// are re-checked on every scan, the state file is written and read safely, `rankstat --direct` cannot be hung
// by a FIFO, and a second daemon on one directory is warned about. Attacks that need another local user run
// under setpriv as faults::kAttackerUid (root only; skipped with a WARN otherwise). Loopback, private
// directories, bounded waits.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "fault_support.hpp"
#include "rankstat/rankstat.h"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace rankstat::faults;
using namespace std::chrono_literals;

namespace {

// The instance id as a label, so each instance's events can be told apart.
const std::vector<std::string> kFast = {"--shm.scan-interval=100ms", "--liveness.interval=50ms",
                                        "--label.instance=instance_id"};

std::vector<std::string> fast(std::vector<std::string> more) {
  more.insert(more.begin(), kFast.begin(), kFast.end());
  return more;
}

std::string segment_path(const TempDir& shm, const std::string& instance, int dp) {
  return shm.path() + "/rankstat." + instance + ".scheduler.tp0-pp0-ep0-dp" + std::to_string(dp);
}

double events(const std::string& text, const std::string& instance) {
  double sum = 0;
  for (const Sample& s : samples_of(text, "sglang:test_events_total")) {
    if (s.labels.find("instance_id=\"" + instance + "\"") != std::string::npos) {
      sum += s.value;
    }
  }
  return sum;
}

double rejected(const std::string& text, const std::string& reason) {
  return value_of(text, "rankstat_segments_rejected_total", {"reason=\"" + reason + "\""}).value_or(-1);
}

}  // namespace

TEST_CASE("a hard link to a segment is refused and the rank counts once: appended N, exported N") {
  TempDir shm;
  WrappedDaemon daemon({}, shm.path(), fast({}));
  REQUIRE(daemon.started());
  FaultWriter writer(shm.path(),
                     {"--instance=ln", "--dp=0", "--mode=paced", "--pace-us=1000", "--seconds=1.5"});
  REQUIRE(writer.wait_ready());
  REQUIRE(::link(segment_path(shm, "ln", 0).c_str(), segment_path(shm, "ln", 9).c_str()) == 0);
  REQUIRE(writer.process().wait_for(20s) == 0);
  const double appended = static_cast<double>(writer.field("events").value_or(0));
  REQUIRE(appended > 0);
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = daemon.scrape();
        return rejected(text, "hard_link") == 1 && events(text, "ln") >= appended;
      },
      10s));
  CHECK(events(text, "ln") == Approx(appended));
  CHECK(count_lines(daemon.log(), "(hard_link)") == 1);  // logged once
}

TEST_CASE(
    "a squatted segment name does not keep the engine from publishing: it publishes beside it, says so, "
    "and the daemon serves it and counts the squatter's file once") {
  if (!can_switch_user()) {
    WARN("skipped: needs root and setpriv to act as another user");
    return;
  }
  TempDir shm;
  REQUIRE(::chmod(shm.path().c_str(), 01777) == 0);  // like /dev/shm
  const std::string squatted = segment_path(shm, "sq", 0);
  std::vector<std::string> touch = as_user(kAttackerUid);
  std::string command;
  for (const auto& a : touch) command += a + " ";
  REQUIRE(run_command(command + "sh -c 'umask 022; : > " + squatted + "'") == 0);
  struct stat st {};
  REQUIRE(::stat(squatted.c_str(), &st) == 0);
  REQUIRE(st.st_uid == kAttackerUid);
  WrappedDaemon daemon({}, shm.path(), fast({}));
  REQUIRE(daemon.started());
  FaultWriter engine(shm.path(),
                     {"--instance=sq", "--dp=0", "--mode=paced", "--pace-us=1000", "--seconds=1"});
  REQUIRE(engine.wait_ready());
  const std::string out = engine.output();
  INFO(out);
  // The note names the squatted file, its owner and the name used instead.
  CHECK(out.find("note: segment name " + squatted) != std::string::npos);
  CHECK(out.find("owned by uid " + std::to_string(kAttackerUid)) != std::string::npos);
  CHECK(out.find("published as " + squatted + "_2") != std::string::npos);
  // The squatter's file is untouched.
  struct stat after {};
  REQUIRE(::stat(squatted.c_str(), &after) == 0);
  CHECK(after.st_ino == st.st_ino);
  CHECK(after.st_uid == kAttackerUid);
  CHECK(after.st_size == 0);
  // The C ABI (what the Python package calls) opens too and gives the same note.
  ::setenv("RANKSTAT_SHM_DIR", shm.path().c_str(), 1);
  rankstat_identity identity;
  rankstat_identity_init(&identity);
  identity.instance = "sq";
  identity.dp_rank = 0;
  rankstat_reporter* reporter = nullptr;
  const int status = rankstat_open(&identity, nullptr, &reporter);
  ::unsetenv("RANKSTAT_SHM_DIR");
  REQUIRE(status == RANKSTAT_OK);
  const std::string note = rankstat_segment_note(reporter);
  CHECK(note.find(squatted) != std::string::npos);
  CHECK(note.find("owned by uid " + std::to_string(kAttackerUid)) != std::string::npos);
  CHECK(note.find("published as " + squatted + "_3") != std::string::npos);  // _2 is the engine's, alive
  rankstat_close(reporter);
  REQUIRE(engine.process().wait_for(20s) == 0);
  const double appended = static_cast<double>(engine.field("events").value_or(0));
  REQUIRE(appended > 0);
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = daemon.scrape();
        return rejected(text, "unexpected_owner") == 1 && events(text, "sq") >= appended;
      },
      10s));
  CHECK(events(text, "sq") == Approx(appended));
  CHECK(count_lines(daemon.log(), "rejected segment " + std::string("rankstat.sq.")) == 1);
}

TEST_CASE(
    "a segment of prod-b's user renamed onto a prod-a name is refused and prod-a's counter is not "
    "inflated") {
  if (!can_switch_user()) {
    WARN("skipped: needs root and setpriv to act as another user");
    return;
  }
  TempDir shm;
  REQUIRE(::chmod(shm.path().c_str(), 0777) == 0);  // a shared group-writable directory, no sticky bit
  // prod-a is root's; prod-b's user is trusted, but for prod-b only.
  WrappedDaemon daemon(
      {}, shm.path(),
      fast({"--shm.allowed-uids=" + std::to_string(kAttackerUid), "--shm.instance-owner=prod-a=0",
            "--shm.instance-owner=prod-b=" + std::to_string(kAttackerUid)}));
  REQUIRE(daemon.started());
  FaultWriter prod_a(shm.path(),
                     {"--instance=prod-a", "--dp=0", "--mode=paced", "--pace-us=2000", "--seconds=2"});
  FaultWriter prod_b(shm.path(),
                     {"--instance=prod-b", "--dp=0", "--mode=paced", "--pace-us=500", "--seconds=2"}, {},
                     as_user(kAttackerUid));
  // Also a segment prod-b's user publishes under prod-a's instance outright.
  FaultWriter forged(shm.path(),
                     {"--instance=prod-a", "--dp=5", "--mode=paced", "--pace-us=500", "--seconds=2"}, {},
                     as_user(kAttackerUid));
  REQUIRE(prod_a.wait_ready());
  REQUIRE(prod_b.wait_ready());
  REQUIRE(forged.wait_ready());
  REQUIRE(wait_until([&] { return events(daemon.scrape(), "prod-b") > 0; }, 10s));
  std::string mv;
  for (const auto& a : as_user(kAttackerUid)) mv += a + " ";
  REQUIRE(run_command(mv + "mv -f " + segment_path(shm, "prod-b", 0) + " " +
                      segment_path(shm, "prod-a", 0)) == 0);
  REQUIRE(prod_a.process().wait_for(20s) == 0);
  REQUIRE(prod_b.process().wait_for(20s) == 0);
  REQUIRE(forged.process().wait_for(20s) == 0);
  const double appended_a = static_cast<double>(prod_a.field("events").value_or(0));
  std::string text;
  wait_until(
      [&] {
        text = daemon.scrape();
        return events(text, "prod-a") >= appended_a && rejected(text, "unexpected_owner") >= 2;
      },
      10s);
  CHECK(events(text, "prod-a") == Approx(appended_a));  // neither prod-b's nor the forged rank's events
  CHECK(rejected(text, "unexpected_owner") == 2);
  CHECK(count_lines(daemon.log(), "--shm.instance-owner does not allow for instance prod-a") == 2);
}

TEST_CASE(
    "a segment made world-writable or given away after the daemon attached is dropped from the "
    "exposition, counted and logged once") {
  TempDir shm;
  WrappedDaemon daemon({}, shm.path(), fast({}));
  REQUIRE(daemon.started());
  FaultWriter open_to_all(shm.path(), {"--instance=perm", "--dp=0", "--seconds=30"});
  FaultWriter given_away(shm.path(), {"--instance=perm", "--dp=1", "--seconds=30"});
  REQUIRE(open_to_all.wait_ready());
  REQUIRE(given_away.wait_ready());
  REQUIRE(wait_until(
      [&] {
        const std::string text = daemon.scrape();
        return value_of(text, "rankstat_rank_up", {"dp0\""}) == 1.0 &&
               value_of(text, "rankstat_rank_up", {"dp1\""}) == 1.0;
      },
      10s));
  REQUIRE(::chmod(segment_path(shm, "perm", 0).c_str(), 0666) == 0);
  const bool root = ::geteuid() == 0;
  if (root) REQUIRE(::chown(segment_path(shm, "perm", 1).c_str(), kAttackerUid, static_cast<gid_t>(-1)) == 0);
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = daemon.scrape();
        return !value_of(text, "rankstat_rank_up", {"dp0\""}) &&
               (!root || !value_of(text, "rankstat_rank_up", {"dp1\""}));
      },
      10s));
  std::this_thread::sleep_for(500ms);  // several scans: still counted and logged once
  text = daemon.scrape();
  CHECK(rejected(text, "world_writable") == 1);
  CHECK(value_of(text, "sglang:test_events_total", {"dp_rank=\"0\""}) == std::nullopt);
  CHECK(count_lines(daemon.log(), "(world_writable)") == 1);
  if (root) {
    CHECK(rejected(text, "unexpected_owner") == 1);
    CHECK(value_of(text, "rankstat_segments_dropped_untrusted_total") == Approx(2));
  } else {
    WARN("not root: the change of owner is checked only as root");
  }
}

TEST_CASE(
    "the state file is never written through a planted symlink and a state dir writable by others "
    "is refused") {
  TempDir shm;
  TempDir state("rankstat-state");
  TempDir elsewhere("rankstat-precious");
  const std::string precious = elsewhere.path() + "/precious";
  { std::ofstream(precious) << "do not overwrite\n"; }
  REQUIRE(::symlink(precious.c_str(), (state.path() + "/retired-totals.json").c_str()) == 0);
  {
    WrappedDaemon daemon({}, shm.path(),
                         fast({"--state.dir=" + state.path(), "--liveness.dead-grace=200ms"}));
    REQUIRE(daemon.started());
    FaultWriter writer(shm.path(),
                       {"--instance=state", "--dp=0", "--mode=paced", "--pace-us=1000", "--seconds=0.5"});
    REQUIRE(writer.wait_ready());
    REQUIRE(writer.process().wait_for(20s) == 0);
    REQUIRE(wait_until(
        [&] {
          return value_of(daemon.scrape(), "rankstat_generation_events_total", {"event=\"retired\""}) == 1.0;
        },
        10s));
    CHECK(count_lines(daemon.log(), "a symlink is never followed") == 1);
  }
  CHECK(read_file(precious) == "do not overwrite\n");
  struct stat st {};
  REQUIRE(::lstat((state.path() + "/retired-totals.json").c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));  // the symlink itself was replaced by rename()
  for (const std::string& name : state.list()) CHECK(name.find(".tmp") == std::string::npos);

  REQUIRE(::chmod(state.path().c_str(), 0777) == 0);
  WrappedDaemon refused({}, shm.path(), {"--state.dir=" + state.path()}, 10s);
  CHECK_FALSE(refused.started());
  CHECK(refused.process().wait_for(10s) == 1);
  CHECK(refused.log().find("writable by group or others") != std::string::npos);
}

TEST_CASE("a forged state file with a newline in a family name injects nothing into /metrics") {
  TempDir shm;
  TempDir state("rankstat-state");
  {
    std::ofstream out(state.path() + "/retired-totals.json");
    out << R"({"version":1,"generations":[],"counters":[)"
        << R"({"family":"evil_total\nforged_metric 1e15\n# x","labels":[],"value":1,"help":""},)"
        << R"({"family":"forgednul\u0000_total","labels":[],"value":1,"help":""},)"
        << R"({"family":"sglang:good_total","labels":[["le","1"]],"value":2,"help":""},)"
        << R"({"family":"sglang:good_total","labels":[["model_name","m"]],"value":3,"help":""}],)"
        << R"("histograms":[{"family":"sglang:h","labels":[],"bounds":[1,0.5],"counts":[1,1,1],"sum":1}]})";
  }
  WrappedDaemon daemon({}, shm.path(), {"--state.dir=" + state.path()});
  REQUIRE(daemon.started());
  const std::string text = daemon.scrape();
  REQUIRE_FALSE(text.empty());
  // A newline is a name character now (any UTF-8 text is, as prometheus_client 0.22+ takes it): the
  // family is served under its escaped name, one line, and nothing it holds starts a line of its own.
  CHECK(text.find("\nforged_metric") == std::string::npos);
  CHECK(value_of(text, "evil_total_forged_metric_1e15___x") == Approx(1));
  CHECK(text.find("forgednul") == std::string::npos);  // a NUL is not: dropped
  CHECK(text.find("sglang:h") == std::string::npos);
  CHECK(value_of(text, "sglang:good_total", {"model_name=\"m\""}) == Approx(3));
  CHECK(value_of(text, "rankstat_state_entries_dropped_total") == Approx(3));
  CHECK(count_lines(daemon.log(), "dropped 3 invalid entries") == 1);
}

TEST_CASE("rankstat --direct is not hung by a FIFO swapped in for a segment and marks untrusted owners") {
  TempDir shm;
  FaultWriter writer(shm.path(), {"--instance=cli", "--dp=0", "--seconds=30"});
  REQUIRE(writer.wait_ready());
  const std::string fifo = segment_path(shm, "cli", 7);
  REQUIRE(::mkfifo(fifo.c_str(), 0666) == 0);
  std::string output;
  const auto started = std::chrono::steady_clock::now();
  const int status = run_command(
      "timeout 10 " + binary_path("cli/rankstat") + " --direct --shm-dir=" + shm.path() + " ranks 2>&1",
      &output);
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  CHECK(status == 0);
  CHECK(output.find("tp0-pp0-ep0-dp0") != std::string::npos);
  if (!can_switch_user()) {
    WARN("not root: the untrusted-owner mark is checked only as root");
    return;
  }
  REQUIRE(::unlink(fifo.c_str()) == 0);
  const std::string copy = segment_path(shm, "cli", 8);
  REQUIRE(run_command("cp " + segment_path(shm, "cli", 0) + " " + copy) == 0);
  REQUIRE(::chown(copy.c_str(), kAttackerUid, kAttackerUid) == 0);
  run_command(binary_path("cli/rankstat") + " --direct --shm-dir=" + shm.path() + " ranks 2>&1", &output);
  CHECK(output.find("untrusted") != std::string::npos);
  CHECK(output.find("uid " + std::to_string(kAttackerUid)) != std::string::npos);
  run_command(binary_path("cli/rankstat") + " --direct --shm-dir=" + shm.path() +
                  " --allowed-uids=" + std::to_string(kAttackerUid) + " ranks 2>&1",
              &output);
  CHECK(output.find("untrusted") == std::string::npos);
}

TEST_CASE("a second daemon on the same directory warns that another consumer drains it") {
  TempDir shm;
  FaultWriter writer(shm.path(),
                     {"--instance=two", "--dp=0", "--mode=paced", "--pace-us=2000", "--seconds=30"});
  REQUIRE(writer.wait_ready());
  WrappedDaemon first({}, shm.path(), fast({}));
  REQUIRE(first.started());
  REQUIRE(wait_until([&] { return events(first.scrape(), "two") > 0; }, 10s));
  WrappedDaemon second({}, shm.path(), fast({}));
  REQUIRE(second.started());
  CHECK(wait_until([&] { return count_lines(second.log(), "drained by another consumer") == 1; }, 5s));
}

TEST_CASE("an operator in a read-only group reads 0640 segments with --direct and cannot write them") {
  if (!can_switch_user()) {
    WARN("skipped: needs root and setpriv to act as another user");
    return;
  }
  constexpr unsigned kReadersGid = 23457;
  TempDir shm;
  REQUIRE(::chmod(shm.path().c_str(), 0755) == 0);
  FaultWriter writer(shm.path(), {"--instance=ro", "--dp=0", "--seconds=30", "--shm-mode=0640",
                                  "--shm-group=" + std::to_string(kReadersGid)});
  REQUIRE(writer.wait_ready());
  const std::string operator_prefix = "/usr/bin/setpriv --reuid=" + std::to_string(kAttackerUid) +
                                      " --regid=" + std::to_string(kReadersGid) + " --clear-groups ";
  std::string output;
  CHECK(run_command("timeout 10 " + operator_prefix + binary_path("cli/rankstat") +
                        " --direct --shm-dir=" + shm.path() + " ranks 2>&1",
                    &output) == 0);
  CHECK(output.find("tp0-pp0-ep0-dp0") != std::string::npos);
  CHECK(output.find("untrusted") == std::string::npos);  // root's segment
  std::string denied;
  CHECK(run_command(operator_prefix + "sh -c 'printf x >> " + segment_path(shm, "ro", 0) + "' 2>&1",
                    &denied) != 0);
  CHECK(denied.find("ermission denied") != std::string::npos);
}
