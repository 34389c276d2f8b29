// Permissions: segments are created 0660 (or 0640) with a chosen group, never world-writable; rankstatd
// runs without root, refuses segments it should not trust, and reads the ones of its group.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "fault_support.hpp"
#include "rankstat/rankstat.h"
#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "small_segment.hpp"
#include "testkit.hpp"

using namespace rankstat::testkit;
using namespace rankstat::faults;
using namespace std::chrono_literals;

namespace {

constexpr gid_t kSharedGid = 23456;  // the group shared by engine and daemon in these tests
constexpr uid_t kUnprivilegedUid = 65534;
constexpr uid_t kStrangerUid = 4242;

rankstat::ReporterOptions options_in(const TempDir& dir, int dp) {
  return rankstat::testkit::small_segment_options(dir, "perm", dp);
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st;
}

std::string scrape_port(int port) {
  auto r = http_get("127.0.0.1", port, "/metrics");
  return r && r->status == 200 ? r->body : std::string();
}

}  // namespace

TEST_CASE("segments are created 0660 by default and 0640 or with a chosen group on request") {
  TempDir dir;
  rankstat::Reporter by_default;
  REQUIRE(by_default.open(options_in(dir, 0)) == rankstat::Status::kOk);
  CHECK((stat_of(by_default.path()).st_mode & 07777) == 0660);
  CHECK(stat_of(by_default.path()).st_gid == getegid());

  auto o = options_in(dir, 1);
  o.mode = 0640;
  o.group = std::to_string(kSharedGid);
  rankstat::Reporter chosen;
  if (geteuid() != 0) {
    CHECK(chosen.open(o) == rankstat::Status::kPermission);  // not a member of that group
    WARN("not root: the group change itself is checked only as root");
    return;
  }
  REQUIRE(chosen.open(o) == rankstat::Status::kOk);
  CHECK((stat_of(chosen.path()).st_mode & 07777) == 0640);
  CHECK(stat_of(chosen.path()).st_gid == kSharedGid);

  if (const group* g = getgrnam("nogroup"); g != nullptr) {
    auto by_name = options_in(dir, 2);
    by_name.group = "nogroup";
    rankstat::Reporter named;
    REQUIRE(named.open(by_name) == rankstat::Status::kOk);
    CHECK(stat_of(named.path()).st_gid == g->gr_gid);
  }
  ::setenv("RANKSTAT_SHM_GROUP", "24680", 1);
  rankstat::Reporter from_environment;
  const auto status = from_environment.open(options_in(dir, 3));
  ::unsetenv("RANKSTAT_SHM_GROUP");
  REQUIRE(status == rankstat::Status::kOk);
  CHECK(stat_of(from_environment.path()).st_gid == 24680u);
}

TEST_CASE("the client refuses world-writable or executable modes and unknown groups with a clear error") {
  TempDir dir;
  for (std::uint32_t mode : {0666u, 0662u, 0770u, 0755u, 04660u, 0460u}) {
    auto o = options_in(dir, 0);
    o.mode = mode;
    rankstat::Reporter r;
    INFO("mode " << std::oct << mode);
    CHECK(r.open(o) == rankstat::Status::kInvalidArgument);
    CHECK(r.error_message().find("segment mode") != std::string::npos);
  }
  auto o = options_in(dir, 0);
  o.group = "no-such-group-rankstat";
  rankstat::Reporter r;
  CHECK(r.open(o) == rankstat::Status::kInvalidArgument);
  CHECK(r.error_message().find("no-such-group-rankstat") != std::string::npos);
  CHECK(dir.list().empty());  // nothing was created
}

TEST_CASE("the C ABI takes the segment mode and group in rankstat_open_ex") {
  TempDir dir;
  ::setenv("RANKSTAT_SHM_DIR", dir.path().c_str(), 1);
  rankstat_identity identity;
  rankstat_identity_init(&identity);
  identity.instance = "cabi";
  rankstat_permissions permissions{};
  permissions.struct_size = sizeof permissions;
  permissions.mode = 0640;
  rankstat_reporter* reporter = nullptr;
  const int opened = rankstat_open_ex(&identity, nullptr, &permissions, &reporter);
  permissions.mode = 0666;
  identity.rank_key = "other";
  rankstat_reporter* refused = nullptr;
  const int open_to_all = rankstat_open_ex(&identity, nullptr, &permissions, &refused);
  const std::string message = rankstat_last_error();
  permissions.struct_size = 4;
  const int too_small = rankstat_open_ex(&identity, nullptr, &permissions, &refused);
  ::unsetenv("RANKSTAT_SHM_DIR");
  REQUIRE(opened == RANKSTAT_OK);
  CHECK(dir.list().size() == 1);
  CHECK((stat_of(dir.path() + "/" + dir.list().front()).st_mode & 07777) == 0640);
  CHECK(open_to_all == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(message.find("segment mode") != std::string::npos);
  CHECK(too_small == RANKSTAT_ERR_INVALID_ARGUMENT);
  CHECK(refused == nullptr);
  rankstat_close(reporter);
}

TEST_CASE("rankstatd runs as an unprivileged user and reads the 0660 segments of its group but no others") {
  if (geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    WARN("skipped: needs root and setpriv to start the daemon as another user");
    return;
  }
  TempDir shm;
  REQUIRE(::chown(shm.path().c_str(), 0, kSharedGid) == 0);
  REQUIRE(::chmod(shm.path().c_str(), 0750) == 0);
  FaultWriter shared(shm.path(),
                     {"--instance=perm", "--dp=0", "--mode=paced", "--pace-us=2000", "--seconds=60",
                      "--shm-mode=0660", "--shm-group=" + std::to_string(kSharedGid)});
  // Readable by the group but not writable: a daemon of another user cannot take the consumer's role.
  FaultWriter read_only(shm.path(), {"--instance=perm", "--dp=1", "--seconds=60", "--shm-mode=0640",
                                     "--shm-group=" + std::to_string(kSharedGid)});
  REQUIRE(shared.wait_ready());
  REQUIRE(read_only.wait_ready());
  // A segment of the right group and mode, but owned by a user nobody vouched for.
  std::string stranger;
  for (const std::string& name : shm.list()) {
    if (name.size() > 4 && name.substr(name.size() - 4) == "-dp0") {
      stranger = shm.path() + "/rankstat.stranger.scheduler.dp0";
      REQUIRE(run_command("cp " + shm.path() + "/" + name + " " + stranger + ".part") == 0);
    }
  }
  REQUIRE(!stranger.empty());
  // Its own identity, so that once accepted it is a rank of its own.
  REQUIRE(poke_value<std::int32_t>(stranger + ".part", offsetof(rankstat::shm::SegmentHeader, dp_rank), 7));
  const char rank_key[32] = "stranger";
  REQUIRE(
      poke(stranger + ".part", offsetof(rankstat::shm::SegmentHeader, rank_key), rank_key, sizeof rank_key));
  // The instance its name says (a header naming another instance is refused as instance_mismatch).
  const char instance[16] = "stranger";
  REQUIRE(
      poke(stranger + ".part", offsetof(rankstat::shm::SegmentHeader, instance), instance, sizeof instance));
  REQUIRE(::chown((stranger + ".part").c_str(), kStrangerUid, kSharedGid) == 0);
  REQUIRE(::chmod((stranger + ".part").c_str(), 0660) == 0);
  REQUIRE(::rename((stranger + ".part").c_str(), stranger.c_str()) == 0);

  for (const bool vouch : {false, true}) {
    TempDir files("rankstatd-unprivileged");
    REQUIRE(::chmod(files.path().c_str(), 0777) == 0);
    const std::string address_file = files.path() + "/address";
    std::vector<std::string> argv = {"/usr/bin/setpriv",
                                     "--reuid=" + std::to_string(kUnprivilegedUid),
                                     "--regid=" + std::to_string(kSharedGid),
                                     "--clear-groups",
                                     binary_path("daemon/rankstatd"),
                                     "--web.listen-address=127.0.0.1:0",
                                     "--web.address-file=" + address_file,
                                     "--shm.dir=" + shm.path(),
                                     "--shm.scan-interval=100ms",
                                     "--liveness.interval=50ms"};
    if (vouch) argv.push_back("--shm.allowed-uids=" + std::to_string(kStrangerUid));
    ChildProcess daemon(argv, {}, files.path() + "/rankstatd.log");
    int port = 0;
    REQUIRE(wait_until(
        [&] {
          const std::string address = read_file(address_file);
          const auto colon = address.rfind(':');
          port = colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
          return port > 0;
        },
        20s));
    std::string text;
    REQUIRE(wait_until(
        [&] {
          text = scrape_port(port);
          return value_of(text, "sglang:test_events_total", {"dp_rank=\"0\""}).value_or(0) > 0 &&
                 value_of(text, "rankstat_segments_rejected_total", {"reason=\"open_failed\""}) == 1.0;
        },
        10s));
    INFO(read_file(files.path() + "/rankstatd.log"));
    CHECK(value_of(text, "rankstat_segments_rejected_total", {"reason=\"unexpected_owner\""}) ==
          (vouch ? 0.0 : 1.0));
    CHECK(samples_of(text, "rankstat_rank_up").size() == (vouch ? 2u : 1u));
    const std::string status = read_file("/proc/" + std::to_string(daemon.pid()) + "/status");
    CHECK(status.find("Uid:\t" + std::to_string(kUnprivilegedUid)) != std::string::npos);
    CHECK(status.find("CapEff:\t0000000000000000") != std::string::npos);
    daemon.signal(SIGTERM);
    CHECK(daemon.wait_for(10s) == 0);
  }
  report_count("permission_refusals", 3);
}
