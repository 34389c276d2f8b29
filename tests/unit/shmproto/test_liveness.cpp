// The one liveness rule rankstatd and rankstat --direct share (shmproto/liveness.hpp).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "rankstat/shmproto/liveness.hpp"

namespace shm = rankstat::shm;

namespace {

constexpr std::uint64_t kSecond = 1'000'000'000ull;
constexpr std::uint64_t kStallAfter = 30 * kSecond;
constexpr std::uint64_t kNow = 1000 * kSecond;

shm::SegmentHeader writer(std::uint64_t start_ticks = 4242) {
  shm::SegmentHeader h{};
  h.pid = 1234;
  h.pid_start_ticks = start_ticks;
  return h;
}

// A writer that steps on a clock (it has reported scheduler snapshots), its last sign of life `age_ns` ago.
shm::ProducerState heartbeat_age(std::uint64_t age_ns, bool closed = false) {
  shm::ProducerState p;
  p.heartbeat_ns = kNow - age_ns;
  p.closed = closed;
  p.reports_steps = true;
  return p;
}

// A writer that has only sent metric updates (an engine's own collectors on the metric classes).
shm::ProducerState events_only(std::uint64_t age_ns) {
  shm::ProducerState p = heartbeat_age(age_ns);
  p.reports_steps = false;
  return p;
}

shm::ProcessStart probe(shm::ProcessStart::Status status, std::uint64_t ticks = 0) {
  shm::ProcessStart out;
  out.status = status;
  out.ticks = ticks;
  return out;
}

shm::RankState judge(const shm::SegmentHeader& h, const shm::ProducerState& p,
                     std::optional<shm::ProcessStart> pr,
                     std::optional<shm::RankState> previous = std::nullopt) {
  return shm::judge_liveness(h, p, pr, previous, kNow, kStallAfter);
}

using Status = shm::ProcessStart::Status;
using shm::RankState;

}  // namespace

TEST_CASE("a writer whose process is there and heartbeating is LIVE, and STALLED once its heartbeat is old") {
  CHECK(judge(writer(), heartbeat_age(kSecond), probe(Status::kFound, 4242)) == RankState::kLive);
  CHECK(judge(writer(), heartbeat_age(31 * kSecond), probe(Status::kFound, 4242)) == RankState::kStalled);
  CHECK(judge(writer(), heartbeat_age(kSecond), std::nullopt) == RankState::kLive);  // a verified pidfd
}

TEST_CASE("a writer whose process is gone, or whose pid names another process, is DEAD for good") {
  CHECK(judge(writer(), heartbeat_age(0), probe(Status::kGone)) == RankState::kDead);
  CHECK(judge(writer(), heartbeat_age(0), probe(Status::kFound, 9999)) == RankState::kDead);
  CHECK(judge(writer(), heartbeat_age(0), probe(Status::kFound, 4242), RankState::kDead) == RankState::kDead);
}

TEST_CASE("a clean exit is CLOSED whatever the process check says, and stays CLOSED") {
  CHECK(judge(writer(), heartbeat_age(0, true), probe(Status::kGone)) == RankState::kClosed);
  CHECK(judge(writer(), heartbeat_age(0, true), std::nullopt) == RankState::kClosed);
  CHECK(judge(writer(), heartbeat_age(0), probe(Status::kFound, 4242), RankState::kClosed) ==
        RankState::kClosed);
}

TEST_CASE("a process check that could not be made never makes a rank DEAD") {
  // The previous verdict stands...
  CHECK(judge(writer(), heartbeat_age(0), probe(Status::kUnknown), RankState::kLive) == RankState::kLive);
  CHECK(judge(writer(), heartbeat_age(0), probe(Status::kUnknown), RankState::kStalled) ==
        RankState::kStalled);
  // ...and at first sight (rankstat --direct) the heartbeat decides.
  CHECK(judge(writer(), heartbeat_age(kSecond), probe(Status::kUnknown)) == RankState::kLive);
  CHECK(judge(writer(), heartbeat_age(60 * kSecond), probe(Status::kUnknown)) == RankState::kStalled);
}

TEST_CASE("a writer that could not read its own start time is judged by its pid alone") {
  CHECK(judge(writer(0), heartbeat_age(0), probe(Status::kFound, 777)) == RankState::kLive);
  CHECK(judge(writer(0), heartbeat_age(0), probe(Status::kGone)) == RankState::kDead);
}

TEST_CASE("state names are the ones the API and the CLI show") {
  CHECK(shm::rank_state_name(RankState::kLive) == "LIVE");
  CHECK(shm::rank_state_name(RankState::kStalled) == "STALLED");
  CHECK(shm::rank_state_name(RankState::kDead) == "DEAD");
  CHECK(shm::rank_state_name(RankState::kClosed) == "CLOSED");
  CHECK(shm::is_live(RankState::kStalled));
  CHECK_FALSE(shm::is_live(RankState::kDead));
  CHECK(shm::is_final(RankState::kClosed));
  CHECK_FALSE(shm::is_final(RankState::kStalled));
}

TEST_CASE("a writer that reports on events only is LIVE however long it is idle, and DEAD once gone") {
  CHECK(judge(writer(), events_only(3600 * kSecond), probe(Status::kFound, 4242)) == RankState::kLive);
  CHECK(judge(writer(), events_only(3600 * kSecond), std::nullopt) == RankState::kLive);
  CHECK(judge(writer(), events_only(0), probe(Status::kGone)) == RankState::kDead);
  CHECK(judge(writer(), events_only(0), probe(Status::kFound, 9999)) == RankState::kDead);
}

TEST_CASE("a process that has exited but is not reaped yet is gone, not alive") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  // Until the parent reaps it, the child is a zombie whose /proc entry, start time included, stays.
  shm::ProcessStart seen;
  for (int i = 0; i < 500; ++i) {
    seen = shm::probe_process_start(static_cast<std::uint32_t>(child));
    if (seen.status == Status::kGone) break;
    usleep(2000);
  }
  CHECK(seen.status == Status::kGone);
  CHECK(access(("/proc/" + std::to_string(child) + "/stat").c_str(), F_OK) == 0);  // not reaped yet
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(shm::probe_process_start(static_cast<std::uint32_t>(child)).status == Status::kGone);
  CHECK(shm::probe_process_start(static_cast<std::uint32_t>(getpid())).status == Status::kFound);
}
