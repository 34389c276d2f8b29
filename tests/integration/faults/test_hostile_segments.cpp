// Hostile and broken segments next to a healthy rank, with the real rankstatd: every bad file is
// refused or quarantined, counted once by reason, logged once, and the healthy rank is served all along.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "fault_support.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/schema.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace rankstat::faults;
using namespace std::chrono_literals;
namespace shm = rankstat::shm;

namespace {

// The engine instance becomes a label, so ranks of different instances never collide.
const std::string kInstanceLabel = "--label.instance=engine";
const std::vector<std::string> kFastFlags = {"--shm.scan-interval=100ms", "--liveness.interval=50ms",
                                             kInstanceLabel};

std::string scrape(DaemonUnderTest& daemon) {
  auto r = daemon.get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

double rejected(const std::string& text, const std::string& reason) {
  return value_of(text, "rankstat_segments_rejected_total", {"reason=\"" + reason + "\""}).value_or(-1);
}
double quarantined(const std::string& text, const std::string& reason) {
  return value_of(text, "rankstat_segments_quarantined_total", {"reason=\"" + reason + "\""}).value_or(-1);
}

std::string only_segment(const TempDir& dir, const std::string& instance) {
  for (const std::string& name : dir.list()) {
    if (name.rfind("rankstat." + instance + ".", 0) == 0 && name.find(".tmp.") == std::string::npos) {
      return dir.path() + "/" + name;
    }
  }
  return {};
}

// Written under another name and renamed into place, so the daemon never sees it half-written (a file
// that changes is looked at again, and counted again if its reason changed).
void write_file(const std::string& path, const std::string& bytes, mode_t mode = 0640) {
  const std::string temporary = path + ".part";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  REQUIRE(::fchmod(fd, mode) == 0);
  ::close(fd);
  REQUIRE(::rename(temporary.c_str(), path.c_str()) == 0);
}

template <typename T>
void patch(std::string& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

// A copy of a real segment with one thing wrong, and the reason the daemon must give.
struct Forgery {
  std::string name;
  std::string reason;
  std::string bytes;
  mode_t mode = 0640;
};

std::vector<Forgery> forgeries(const std::string& real) {
  std::vector<Forgery> out;
  auto add = [&](const std::string& what, const std::string& reason, std::string bytes, mode_t mode = 0640) {
    out.push_back({"rankstat.hostile-" + what + ".scheduler.dp0", reason, std::move(bytes), mode});
  };
  add("half", "bad_size", real.substr(0, real.size() / 2));
  add("tiny", "too_small", real.substr(0, 100));
  add("empty", "too_small", "");
  std::string b = real;
  b[0] = 'X';
  add("magic", "bad_magic", b);
  b = real;
  patch<std::uint16_t>(b, offsetof(shm::SegmentHeader, layout_major), shm::kLayoutMajor + 1);
  add("major", "major_mismatch", b);
  b = real;
  patch<std::uint64_t>(b, offsetof(shm::SegmentHeader, layout_hash), shm::kLayoutHash ^ 1);
  add("hash", "layout_mismatch", b);
  b = real;
  patch<std::uint64_t>(b, offsetof(shm::SegmentHeader, segment_bytes), real.size() * 2);
  add("size", "bad_size", b);
  b = real;
  patch<std::uint64_t>(b, offsetof(shm::SegmentHeader, ring_bytes), 1ull << 40);
  add("hugering", "bad_geometry", b);
  b = real;
  patch<std::uint64_t>(b, offsetof(shm::SegmentHeader, ring_offset), ~std::uint64_t{0} - 4095);  // "-4096"
  add("negoffset", "bad_geometry", b);
  b = real;
  patch<std::uint64_t>(b, offsetof(shm::SegmentHeader, cumulative_bytes), ~std::uint64_t{0});
  add("negcumulative", "bad_geometry", b);
  b = real;
  patch<std::uint64_t>(b, offsetof(shm::SegmentHeader, ring_bytes), 4097);  // not a power of two
  add("oddring", "bad_geometry", b);
  b = real;
  patch<std::uint32_t>(b, offsetof(shm::SegmentHeader, max_record_bytes), 0xFFFFFFFFu);
  add("maxrecord", "bad_geometry", b);
  b = real;
  {
    // Cumulative block capacities far beyond its bytes.
    std::uint64_t cumulative_offset = 0;
    std::memcpy(&cumulative_offset, real.data() + offsetof(shm::SegmentHeader, cumulative_offset), 8);
    patch<std::uint32_t>(b, cumulative_offset, 0xFFFFFFFFu);
  }
  add("capacities", "bad_geometry", b);
  b = real;
  patch<std::uint32_t>(b, offsetof(shm::SegmentHeader, role), 99);
  add("role", "bad_identity", b);
  b = real;
  std::memset(b.data() + offsetof(shm::SegmentHeader, instance), 'A', shm::kInstanceBytes);  // no NUL
  add("unterminated", "bad_identity", b);
  b = real;
  std::memset(b.data() + offsetof(shm::SegmentHeader, extra_labels), 'z', shm::kExtraLabelsBytes);
  add("labels", "bad_identity", b);
  std::mt19937_64 random(6);
  b.assign(real.size(), '\0');
  for (char& c : b) c = static_cast<char>(random());
  add("noise", "bad_magic", b);
  add("worldwritable", "world_writable", real, 0666);
  return out;
}

}  // namespace

TEST_CASE(
    "every kind of broken or hostile segment file is refused once by reason while a healthy rank is served") {
  TempDir shm_dir;
  FaultWriter healthy(shm_dir.path(),
                      {"--instance=healthy", "--mode=paced", "--pace-us=2000", "--seconds=60"});
  REQUIRE(healthy.wait_ready());
  const std::string real = read_file(only_segment(shm_dir, "healthy"));
  REQUIRE(real.size() > shm::kHeaderBytes);
  DaemonUnderTest daemon(shm_dir.path(), kFastFlags);
  REQUIRE(wait_until([&] { return value_of(scrape(daemon), "sglang:test_events_total").has_value(); }, 10s));

  const std::vector<Forgery> bad = forgeries(real);
  std::map<std::string, int> expected;
  for (const Forgery& f : bad) {
    write_file(shm_dir.path() + "/" + f.name, f.bytes, f.mode);
    ++expected[f.reason];
  }
  // Not regular files: a symlink to the healthy segment and a directory, both under segment names.
  REQUIRE(::symlink(only_segment(shm_dir, "healthy").c_str(),
                    (shm_dir.path() + "/rankstat.hostile-symlink.scheduler.dp0").c_str()) == 0);
  REQUIRE(::mkdir((shm_dir.path() + "/rankstat.hostile-dir.scheduler.dp0").c_str(), 0700) == 0);
  expected["not_regular_file"] += 2;

  std::string text;
  double events_before = value_of(scrape(daemon), "sglang:test_events_total").value_or(0);
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        for (const auto& [reason, count] : expected) {
          if (rejected(text, reason) < count) return false;
        }
        return true;
      },
      10s));
  std::this_thread::sleep_for(600ms);  // several more scans: nothing may be counted or logged twice
  text = scrape(daemon);
  for (const auto& [reason, count] : expected) {
    INFO(reason);
    CHECK(rejected(text, reason) == Approx(count));
  }
  const std::string log = daemon.log();
  for (const Forgery& f : bad) {
    INFO(f.name);
    CHECK(count_lines(log, "rejected segment " + f.name + " (" + f.reason + ")") == 1);
  }
  CHECK(count_lines(log, "rejected segment rankstat.hostile-symlink.scheduler.dp0 (not_regular_file)") == 1);
  // The healthy rank was served throughout, and only it.
  CHECK(samples_of(text, "sglang:test_events_total").size() == 1);
  CHECK(value_of(text, "sglang:test_events_total").value_or(0) > events_before);
  CHECK(value_of(text, "rankstat_log_messages_suppressed_total") == Approx(0));
  CHECK(daemon.process().running());
  report_count("hostile_segment_files", bad.size() + 2);
}

TEST_CASE(
    "rings with garbage head or tail or record lengths are quarantined and the daemon serves the rest") {
  TempDir shm_dir;
  FaultWriter healthy(shm_dir.path(),
                      {"--instance=healthy", "--mode=paced", "--pace-us=2000", "--seconds=60"});
  // Four ranks whose rings someone scribbles on; they only heartbeat, so their rings keep the garbage.
  FaultWriter head(shm_dir.path(), {"--instance=ring", "--dp=1", "--seconds=60"});
  FaultWriter length(shm_dir.path(), {"--instance=ring", "--dp=2", "--seconds=60"});
  FaultWriter padding(shm_dir.path(), {"--instance=ring", "--dp=3", "--seconds=60"});
  FaultWriter tail(shm_dir.path(), {"--instance=ring", "--dp=4", "--seconds=60"});
  for (FaultWriter* w : {&healthy, &head, &length, &padding, &tail}) REQUIRE(w->wait_ready());
  auto path_of = [&](int dp) {
    for (const std::string& name : shm_dir.list()) {
      if (name.rfind("rankstat.ring.", 0) == 0 && name.size() > 4 &&
          name.substr(name.size() - 4) == "-dp" + std::to_string(dp)) {
        return shm_dir.path() + "/" + name;
      }
    }
    return std::string();
  };
  const std::uint64_t ring_offset = shm::kHeaderBytes;
  // Before the daemon attaches: a head far beyond the tail, a first record longer than the ring, and a
  // padding record that does not reach the end of the ring.
  REQUIRE(poke_value<std::uint64_t>(path_of(1), offsetof(shm::SegmentHeader, head), 1ull << 60));
  REQUIRE(poke_value<std::uint32_t>(path_of(2), ring_offset, 0xFFFFFFF0u));
  REQUIRE(poke_value<std::uint16_t>(path_of(3), ring_offset + 4, 0xFFFF));
  DaemonUnderTest daemon(shm_dir.path(), kFastFlags);
  REQUIRE(wait_until(
      [&] {
        return value_of(scrape(daemon), "sglang:test_events_total", {"engine=\"healthy\""}).has_value();
      },
      10s));
  // While attached: a tail many rings ahead of the head.
  REQUIRE(poke_value<std::uint64_t>(path_of(4), offsetof(shm::SegmentHeader, tail), 1ull << 40));
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        return quarantined(text, "ring_index") == 2 && quarantined(text, "ring_record") == 2;
      },
      10s));
  std::this_thread::sleep_for(300ms);
  text = scrape(daemon);
  CHECK(quarantined(text, "ring_index") == Approx(2));
  CHECK(quarantined(text, "ring_record") == Approx(2));
  CHECK(value_of(text, "rankstat_generation_events_total", {"event=\"ring_quarantined\""}) == Approx(4));
  CHECK(count_lines(daemon.log(), "quarantined (ring_") == 4);
  // Quarantined ranks stay up with their totals (the cumulative block is still read); the healthy one
  // keeps moving.
  CHECK(samples_of(text, "rankstat_rank_up").size() == 5);
  CHECK(samples_of(text, "sglang:test_events_total").size() == 5);
  const double before = value_of(text, "sglang:test_events_total", {"engine=\"healthy\""}).value_or(0);
  REQUIRE(wait_until(
      [&] {
        return value_of(scrape(daemon), "sglang:test_events_total", {"engine=\"healthy\""}).value_or(0) >
               before;
      },
      5s));
  CHECK(daemon.process().running());
  report_count("hostile_ring_pokes", 4);
}

TEST_CASE(
    "a live rank's segment shrunk under the daemon's mapping raises SIGBUS in the daemon which quarantines "
    "it") {
  TempDir shm_dir;
  FaultWriter healthy(shm_dir.path(),
                      {"--instance=healthy", "--mode=paced", "--pace-us=2000", "--seconds=60"});
  // Appends for a second, then only heartbeats (header page): it survives the shrink below.
  FaultWriter victim(shm_dir.path(), {"--instance=victim", "--mode=paced", "--pace-us=2000", "--seconds=1",
                                      "--hold-seconds=60"});
  REQUIRE(healthy.wait_ready());
  REQUIRE(victim.wait_ready());
  // A slow liveness pass, so the size check does not see the shrink first: the next scrape reads the
  // vanished cumulative block and faults.
  DaemonUnderTest daemon(shm_dir.path(),
                         {"--shm.scan-interval=100ms", "--liveness.interval=10s", kInstanceLabel});
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        return value_of(text, "sglang:test_events_total", {"engine=\"victim\""}).value_or(0) > 10;
      },
      10s));
  const std::string path = only_segment(shm_dir, "victim");
  const double last_seen = *value_of(scrape(daemon), "sglang:test_events_total", {"engine=\"victim\""});
  // The header page stays. (A writer still appending would now die of SIGBUS itself: whoever may
  // truncate a segment can kill its engine, which is why segments are 0660 or 0640, never 0666.)
  std::this_thread::sleep_for(1500ms);  // the victim is holding now
  REQUIRE(::truncate(path.c_str(), shm::kHeaderBytes) == 0);
  for (int i = 0; i < 20; ++i) text = scrape(daemon);
  CHECK(quarantined(text, "bus_error") == Approx(1));
  CHECK(quarantined(text, "truncated") == Approx(0));
  CHECK(value_of(text, "sglang:test_events_total", {"engine=\"victim\""}).value_or(0) >= last_seen);
  CHECK(count_lines(daemon.log(), "quarantined (bus_error)") == 1);
  const double before = value_of(text, "sglang:test_events_total", {"engine=\"healthy\""}).value_or(0);
  REQUIRE(wait_until(
      [&] {
        return value_of(scrape(daemon), "sglang:test_events_total", {"engine=\"healthy\""}).value_or(0) >
               before;
      },
      5s));
  CHECK(daemon.process().running());
  CHECK(victim.process().running());
  report_count("segments_truncated_under_mapping", 1);
}

TEST_CASE(
    "a closed rank's segment truncated to nothing is quarantined by the size check and keeps its totals") {
  TempDir shm_dir;
  FaultWriter healthy(shm_dir.path(),
                      {"--instance=healthy", "--mode=paced", "--pace-us=2000", "--seconds=60"});
  FaultWriter victim(shm_dir.path(), {"--instance=victim", "--mode=paced", "--pace-us=2000", "--seconds=1"});
  REQUIRE(healthy.wait_ready());
  REQUIRE(victim.wait_ready());
  DaemonUnderTest daemon(shm_dir.path(), kFastFlags);
  REQUIRE(victim.process().wait_for(10s) == 0);  // closed cleanly; the file stays for the daemon
  const double victim_events = static_cast<double>(victim.field("events").value_or(0));
  REQUIRE(victim_events > 0);
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = scrape(daemon);
        return value_of(text, "sglang:test_events_total", {"engine=\"victim\""}) == Approx(victim_events);
      },
      10s));
  REQUIRE(::truncate(only_segment(shm_dir, "victim").c_str(), 0) == 0);
  // No scrape until several liveness passes went by: their size check finds the shrink before any read.
  std::this_thread::sleep_for(400ms);
  REQUIRE(wait_until([&] { return quarantined(scrape(daemon), "truncated") == 1; }, 5s));
  for (int i = 0; i < 10; ++i) text = scrape(daemon);
  CHECK(quarantined(text, "truncated") == Approx(1));
  CHECK(quarantined(text, "bus_error") == Approx(0));
  CHECK(value_of(text, "sglang:test_events_total", {"engine=\"victim\""}) == Approx(victim_events));
  CHECK(count_lines(daemon.log(), "quarantined (truncated)") == 1);
  CHECK(daemon.process().running());
  report_count("segments_truncated_under_mapping", 1);
}
