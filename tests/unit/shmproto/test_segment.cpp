// Segment files: atomic creation, validation of everything a reader maps, safe unlinking, and process
// identity. All files live in a testkit::TempDir.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "rankstat/shmproto/segment.hpp"
#include "testkit.hpp"

namespace {

namespace shm = rankstat::shm;
using rankstat::testkit::TempDir;

shm::SegmentGeometry small_geometry() {
  shm::SegmentGeometry g;
  g.ring_bytes = 4096;
  g.series_capacity = 8;
  g.bounds_capacity = 64;
  g.values_capacity = 256;
  return g;
}

shm::CreateOptions options_in(const TempDir& dir) {
  shm::CreateOptions options;
  options.directory = dir.path();
  options.geometry = small_geometry();
  return options;
}

shm::SegmentIdentity test_identity() {
  shm::SegmentIdentity identity;
  identity.instance = "unit";
  identity.model_name = "llama-3-8b";
  identity.tp_rank = 1;
  identity.dp_rank = 2;
  identity.tp_size = 2;
  identity.dp_size = 4;
  identity.flags = shm::kFlagDpAttention;
  identity.extra_labels = {{"cluster", "a"}};
  return identity;
}

// Copies group A of a freshly created segment, the way open_segment does.
shm::SegmentHeader copy_header(const shm::MappedFile& file) {
  shm::SegmentHeader h{};
  std::memcpy(&h, file.header(), shm::kProducerGroupOffset);
  return h;
}

void write_at(const std::string& path, std::uint64_t offset, const void* bytes, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, bytes, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size));
  ::close(fd);
}

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<std::uint64_t>(st.st_size);
}

bool same_inode(const std::string& path, const struct stat& expected) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && st.st_ino == expected.st_ino && st.st_dev == expected.st_dev;
}

// A forked process that creates a segment and then holds it, alive and writing nothing, until it is
// killed or this object goes away (then it exits, or is killed, and is reaped either way).
class ForkedWriter {
 public:
  ForkedWriter(const shm::SegmentIdentity& identity, const shm::CreateOptions& options) {
    int ready[2];
    int hold[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(hold, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(hold[1]);
      const shm::CreateResult created = shm::create_segment(identity, options);
      const std::string reply = created.error == shm::CreateError::kNone ? created.path : "";
      if (::write(ready[1], reply.data(), reply.size()) < 0) ::_exit(1);
      ::close(ready[1]);
      char byte = 0;
      while (::read(hold[0], &byte, 1) != 0) {  // until the parent closes its end (or kills this one)
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(hold[0]);
    hold_ = hold[1];
    char buffer[512];
    for (;;) {
      pollfd p{ready[0], POLLIN, 0};
      if (::poll(&p, 1, 10'000) <= 0) break;
      const ssize_t n = ::read(ready[0], buffer, sizeof buffer);
      if (n <= 0) break;
      path_.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(ready[0]);
  }
  ~ForkedWriter() {
    if (hold_ >= 0) ::close(hold_);
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ForkedWriter(const ForkedWriter&) = delete;
  ForkedWriter& operator=(const ForkedWriter&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& path() const { return path_; }  // empty if its create failed
  // SIGKILL, leaving it a zombie until reap().
  void kill() { ::kill(pid_, SIGKILL); }
  void reap() {
    ::waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  bool reaped_ = false;
  std::string path_;
};

class UmaskGuard {
 public:
  explicit UmaskGuard(mode_t mask) : previous_(::umask(mask)) {}
  ~UmaskGuard() { ::umask(previous_); }
  UmaskGuard(const UmaskGuard&) = delete;
  UmaskGuard& operator=(const UmaskGuard&) = delete;

 private:
  mode_t previous_;
};

}  // namespace

TEST_CASE("create_segment publishes the segment under its final name and leaves no temporary behind",
          "[segment]") {
  TempDir dir;
  shm::CreateResult created;
  {
    UmaskGuard restrictive(077);
    created = shm::create_segment(test_identity(), options_in(dir));
  }
  INFO(created.message);
  REQUIRE(created.error == shm::CreateError::kNone);
  const std::string name = "rankstat.unit.scheduler.tp1-pp0-ep0-dp2";
  CHECK(created.path == dir.path() + "/" + name);
  CHECK(dir.list() == std::vector<std::string>{name});
  CHECK(file_size(created.path) == small_geometry().total_bytes());
  CHECK(created.file.size() == small_geometry().total_bytes());

  struct stat st {};
  REQUIRE(::stat(created.path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0660);  // the daemon's group can write `head` despite umask 077

  const shm::SegmentHeader& h = *created.file.header();
  CHECK(h.magic == shm::kMagic);
  CHECK(h.layout_major == shm::kLayoutMajor);
  CHECK(h.layout_hash == shm::kLayoutHash);
  CHECK(h.state == static_cast<std::uint32_t>(shm::SegmentState::kReady));
  CHECK(h.pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(h.pid_start_ticks == shm::process_start_ticks(static_cast<std::uint32_t>(::getpid())).value_or(0));
  CHECK(h.attn_tp_rank == 1);  // unset: same as tp_rank
  CHECK(h.attn_dp_rank == 2);  // unset: same as dp_rank
  CHECK(h.flags == shm::kFlagDpAttention);
  CHECK(h.closed == 0);

  const shm::OpenedSegment opened = shm::open_segment(created.path, true);
  INFO(opened.message);
  REQUIRE(opened.reason == shm::RejectReason::kNone);
  CHECK(std::string(opened.identity.model_name) == "llama-3-8b");
  CHECK(std::string(opened.identity.instance) == "unit");
  CHECK(std::string(opened.identity.rank_key) == "tp1-pp0-ep0-dp2");
  CHECK(std::string(opened.identity.engine_type) == "unified");
  CHECK(shm::decode_label_pairs(opened.identity.extra_labels, sizeof opened.identity.extra_labels) ==
        shm::LabelPairs{{"cluster", "a"}});
  CHECK(opened.cumulative_geometry.series_capacity == 8);
  CHECK(opened.cumulative_geometry.values_capacity == 256);
  CHECK(opened.identity.tail == 0);  // groups B and C are not copied
}

TEST_CASE("create_segment rejects bad identities and geometries without leaving files", "[segment]") {
  TempDir dir;
  shm::SegmentIdentity identity = test_identity();
  shm::CreateOptions options = options_in(dir);
  SECTION("an instance id with a dot") {
    identity.instance = "a.b";
  }
  SECTION("an empty instance id") {
    identity.instance = "";
  }
  SECTION("a rank key with a slash") {
    identity.rank_key = "x/y";
  }
  SECTION("an unknown role") {
    identity.role = shm::Role::kUnknown;
  }
  SECTION("a model name that does not fit") {
    identity.model_name = std::string(shm::kModelNameBytes, 'm');
  }
  SECTION("a malformed extra label") {
    identity.extra_labels = {{"bad-name", "v"}};
  }
  SECTION("a ring that is not a power of two") {
    options.geometry.ring_bytes = 5000;
  }
  SECTION("a ring below the minimum") {
    options.geometry.ring_bytes = 2048;
  }
  SECTION("a ring above the maximum") {
    options.geometry.ring_bytes = shm::kMaxRingBytes * 2;
  }
  SECTION("records larger than half the ring") {
    options.geometry.max_record_bytes = 2049;
  }
  SECTION("records smaller than their header") {
    options.geometry.max_record_bytes = 8;
  }
  const shm::CreateResult created = shm::create_segment(identity, options);
  CHECK(created.error == shm::CreateError::kInvalidArgument);
  CHECK_FALSE(created.message.empty());
  CHECK_FALSE(created.file.valid());
  CHECK(dir.list().empty());
}

TEST_CASE("create_segment in a missing directory reports an I/O error with the path", "[segment]") {
  TempDir dir;
  shm::CreateOptions options = options_in(dir);
  options.directory = dir.path() + "/missing";
  const shm::CreateResult created = shm::create_segment(test_identity(), options);
  CHECK(created.error == shm::CreateError::kIo);
  CHECK_THAT(created.message, Catch::Contains(options.directory));
}

TEST_CASE("validate_header rejects every inconsistency a reader could trip over", "[segment][validate]") {
  TempDir dir;
  const shm::CreateResult created = shm::create_segment(test_identity(), options_in(dir));
  REQUIRE(created.error == shm::CreateError::kNone);
  const std::uint64_t size = created.file.size();
  shm::SegmentHeader h = copy_header(created.file);
  std::string message;
  REQUIRE(shm::validate_header(h, size, message) == shm::RejectReason::kNone);
  CHECK(message.empty());

  SECTION("wrong magic") {
    h.magic = 0x4B4E4152ull;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadMagic);
  }
  SECTION("another layout major, with both versions named") {
    h.layout_major = shm::kLayoutMajor + 1;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kMajorMismatch);
    CHECK_THAT(message, Catch::Contains(std::to_string(shm::kLayoutMajor + 1) + ".0") &&
                            Catch::Contains(std::to_string(shm::kLayoutMajor) + ".0"));
  }
  SECTION("same minor but a different layout hash") {
    h.layout_hash ^= 1;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kLayoutMismatch);
    CHECK_THAT(message, Catch::Contains("layout hash"));
  }
  SECTION("a newer minor with its own hash is accepted") {
    h.layout_minor = shm::kLayoutMinor + 1;
    h.layout_hash ^= 0xFFFF;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kNone);
  }
  SECTION("segment_bytes disagreeing with the file size") {
    CHECK(shm::validate_header(h, size + 4096, message) == shm::RejectReason::kBadSize);
    h.segment_bytes = size - 4096;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadSize);
  }
  SECTION("a header_bytes other than one page") {
    h.header_bytes = 8192;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadSize);
  }
  SECTION("a ring extending past the end of the file") {
    h.ring_offset = size - 1024;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadGeometry);
  }
  SECTION("a ring offset beyond the file") {
    h.ring_offset = size + 4096;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadGeometry);
  }
  SECTION("a ring inside the header page") {
    h.ring_offset = 0;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadGeometry);
  }
  SECTION("a ring size that is not a power of two") {
    h.ring_bytes = 3 * 1024;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadGeometry);
  }
  SECTION("a ring overlapping the cumulative block") {
    h.cumulative_offset = h.ring_offset + 1024;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadGeometry);
  }
  SECTION("a cumulative block past the end of the file") {
    h.cumulative_bytes = size;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadGeometry);
  }
  SECTION("a max_record_bytes above the contract's maximum") {
    h.max_record_bytes = shm::kMaxRecordBytes + 1;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadGeometry);
  }
  SECTION("a model name without a terminating NUL") {
    std::memset(h.model_name, 'x', sizeof h.model_name);
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadIdentity);
  }
  SECTION("an unknown role") {
    h.role = 9;
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadIdentity);
  }
  SECTION("malformed extra labels") {
    std::memset(h.extra_labels, 'l', sizeof h.extra_labels);
    CHECK(shm::validate_header(h, size, message) == shm::RejectReason::kBadIdentity);
  }
  CHECK(shm::reject_reason_name(shm::validate_header(h, size, message)) != "unknown");
}

TEST_CASE("open_segment rejects damaged files and reports why", "[segment][validate]") {
  TempDir dir;
  const shm::CreateResult created = shm::create_segment(test_identity(), options_in(dir));
  REQUIRE(created.error == shm::CreateError::kNone);
  const std::string& path = created.path;

  SECTION("a file shorter than a header page is too small") {
    REQUIRE(::truncate(path.c_str(), 4095) == 0);
    const auto opened = shm::open_segment(path, false);
    CHECK(opened.reason == shm::RejectReason::kTooSmall);
    CHECK_FALSE(opened.file.valid());
  }
  SECTION("a file whose magic is still zero is not ready") {
    const std::uint64_t zero = 0;
    write_at(path, 0, &zero, sizeof zero);
    const auto opened = shm::open_segment(path, false);
    CHECK(opened.reason == shm::RejectReason::kNotReady);
    CHECK_FALSE(opened.file.valid());
  }
  SECTION("a wrong magic") {
    const std::uint64_t magic = 0x1122334455667788ull;
    write_at(path, 0, &magic, sizeof magic);
    CHECK(shm::open_segment(path, false).reason == shm::RejectReason::kBadMagic);
  }
  SECTION("a wrong layout major, named in the message with the path") {
    const std::uint16_t major = 7;
    write_at(path, offsetof(shm::SegmentHeader, layout_major), &major, sizeof major);
    const auto opened = shm::open_segment(path, false);
    CHECK(opened.reason == shm::RejectReason::kMajorMismatch);
    CHECK_THAT(opened.message, Catch::Contains(path) && Catch::Contains("7.0") &&
                                   Catch::Contains(std::to_string(shm::kLayoutMajor) + ".0"));
  }
  SECTION("a truncated file whose header claims more bytes") {
    REQUIRE(::truncate(path.c_str(), 8192) == 0);
    CHECK(shm::open_segment(path, false).reason == shm::RejectReason::kBadSize);
  }
  SECTION("cumulative capacities that exceed the block") {
    const std::uint32_t huge = 1u << 20;
    write_at(path,
             created.file.header()->cumulative_offset + offsetof(shm::CumulativeHeader, values_capacity),
             &huge, sizeof huge);
    CHECK(shm::open_segment(path, false).reason == shm::RejectReason::kBadGeometry);
  }
  SECTION("a missing file") {
    CHECK(shm::open_segment(path + "-gone", false).reason == shm::RejectReason::kOpenFailed);
  }
  SECTION("a directory") {
    CHECK(shm::open_segment(dir.path(), false).reason == shm::RejectReason::kOpenFailed);
  }
  SECTION("an observer maps read-only and still validates") {
    const auto opened = shm::open_segment(path, false);
    CHECK(opened.reason == shm::RejectReason::kNone);
  }
}

TEST_CASE("Re-creating a closed segment replaces it atomically while the old mapping stays readable",
          "[segment]") {
  TempDir dir;
  shm::CreateResult first = shm::create_segment(test_identity(), options_in(dir));
  REQUIRE(first.error == shm::CreateError::kNone);
  // The writer said goodbye (a Reporter that re-opens closes its segment first) but its mapping is kept.
  shm::shared(first.file.header()->closed).store(1, std::memory_order_release);
  shm::CreateResult second = shm::create_segment(test_identity(), options_in(dir));
  REQUIRE(second.error == shm::CreateError::kNone);
  CHECK(first.path == second.path);
  CHECK(second.note.empty());
  CHECK(dir.list().size() == 1);
  CHECK(first.file.header()->generation != second.file.header()->generation);
  CHECK(first.file.header()->magic == shm::kMagic);

  SECTION("closing the old generation with unlink leaves the new one in place") {
    shm::close_segment(first.file, first.path, true);
    CHECK_FALSE(first.file.valid());
    CHECK(dir.list().size() == 1);
    const auto opened = shm::open_segment(second.path, false);
    REQUIRE(opened.reason == shm::RejectReason::kNone);
    CHECK(opened.identity.generation == second.file.header()->generation);
  }
  SECTION("closing the current generation marks it closed and unlinks it") {
    const auto opened = shm::open_segment(second.path, true);
    REQUIRE(opened.reason == shm::RejectReason::kNone);
    shm::close_segment(second.file, second.path, true);
    CHECK(dir.list().empty());
    CHECK(shm::read_producer_state(*opened.file.header()).closed);
  }
}

TEST_CASE("unlink_if_same_file does not remove a replacement renamed onto the same name", "[segment]") {
  TempDir dir;
  const std::string path = dir.path() + "/segment";
  const std::string replacement = dir.path() + "/segment.tmp.1.2";
  std::ofstream(path) << "old";
  const int old_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(old_fd >= 0);
  std::ofstream(replacement) << "new";
  REQUIRE(::rename(replacement.c_str(), path.c_str()) == 0);

  CHECK_FALSE(shm::unlink_if_same_file(old_fd, path));
  CHECK(rankstat::testkit::read_file(path) == "new");

  const int new_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(new_fd >= 0);
  CHECK(shm::unlink_if_same_file(new_fd, path));
  CHECK(dir.list().empty());
  CHECK_FALSE(shm::unlink_if_same_file(new_fd, path));  // already gone
  ::close(old_fd);
  ::close(new_fd);
}

TEST_CASE(
    "A live writer's segment name is never taken: a second writer publishes beside it, and takes the name "
    "once the first is gone",
    "[segment]") {
  using rankstat::testkit::wait_until;
  TempDir dir;
  const shm::SegmentIdentity identity = test_identity();
  ForkedWriter first(identity, options_in(dir));
  const std::string name = dir.path() + "/rankstat.unit.scheduler.tp1-pp0-ep0-dp2";
  REQUIRE(first.path() == name);
  struct stat before {};
  REQUIRE(::lstat(name.c_str(), &before) == 0);
  const shm::OpenedSegment held = shm::open_segment(name, false);
  REQUIRE(held.reason == shm::RejectReason::kNone);
  REQUIRE(held.identity.pid == static_cast<std::uint32_t>(first.pid()));

  shm::CreateResult second = shm::create_segment(identity, options_in(dir));
  INFO(second.message);
  REQUIRE(second.error == shm::CreateError::kNone);
  CHECK(second.path == name + "_2");
  CHECK(std::string(second.file.header()->rank_key) == "tp1-pp0-ep0-dp2_2");
  CHECK_THAT(second.note,
             Catch::Contains(name + " is held by a live writer (pid " + std::to_string(first.pid()) + ")") &&
                 Catch::Contains("published as " + second.path));
  // The first writer's file is untouched: same inode, same generation, not closed.
  CHECK(same_inode(name, before));
  const shm::OpenedSegment still = shm::open_segment(name, false);
  REQUIRE(still.reason == shm::RejectReason::kNone);
  CHECK(still.identity.generation == held.identity.generation);
  CHECK_FALSE(shm::read_producer_state(*still.file.header()).closed);
  CHECK(dir.list() == std::vector<std::string>{"rankstat.unit.scheduler.tp1-pp0-ep0-dp2",
                                               "rankstat.unit.scheduler.tp1-pp0-ep0-dp2_2"});

  SECTION("once the first writer is killed (a zombie, not reaped yet) a new writer takes its name") {
    first.kill();
    REQUIRE(wait_until(
        [&] {
          return shm::probe_process_start(static_cast<std::uint32_t>(first.pid())).status ==
                 shm::ProcessStart::Status::kGone;
        },
        std::chrono::seconds(10)));
    const shm::CreateResult third = shm::create_segment(identity, options_in(dir));
    REQUIRE(third.error == shm::CreateError::kNone);
    CHECK(third.path == name);
    CHECK(third.note.empty());
    CHECK_FALSE(same_inode(name, before));
    CHECK(shm::open_segment(name, false).identity.generation == third.file.header()->generation);
    CHECK(dir.list().size() == 2);  // the dead generation is gone from the directory, the _2 one stays
    first.reap();
  }
  SECTION("a third writer while both are alive (the second is this very process) takes the next name") {
    struct stat mine {};
    REQUIRE(::lstat(second.path.c_str(), &mine) == 0);
    const shm::CreateResult third = shm::create_segment(identity, options_in(dir));
    REQUIRE(third.error == shm::CreateError::kNone);
    CHECK(third.path == name + "_3");
    CHECK(same_inode(second.path, mine));
    CHECK(shm::open_segment(second.path, false).identity.generation == second.file.header()->generation);
  }
}

TEST_CASE("A dead writer's segment that another writer is replacing right now is left to that writer",
          "[segment]") {
  TempDir dir;
  shm::CreateResult dead = shm::create_segment(test_identity(), options_in(dir));
  REQUIRE(dead.error == shm::CreateError::kNone);
  const std::uint32_t no_such_pid = 0x3FFFFFF0u;  // above any pid_max
  write_at(dead.path, offsetof(shm::SegmentHeader, pid), &no_such_pid, sizeof no_such_pid);
  dead.file.reset();
  const int locked = ::open(dead.path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(locked >= 0);
  REQUIRE(::flock(locked, LOCK_EX | LOCK_NB) == 0);  // what a replacing writer holds while it renames
  const shm::CreateResult beside = shm::create_segment(test_identity(), options_in(dir));
  REQUIRE(beside.error == shm::CreateError::kNone);
  CHECK(beside.path == dead.path + "_2");
  CHECK_THAT(beside.note, Catch::Contains("replacing right now"));
  ::close(locked);
  // Unlocked, the dead segment is replaceable again.
  const shm::CreateResult replacing = shm::create_segment(test_identity(), options_in(dir));
  REQUIRE(replacing.error == shm::CreateError::kNone);
  CHECK(replacing.path == dead.path);
  CHECK(replacing.note.empty());
}

TEST_CASE("A segment name held by something that is no segment is replaced only if it is this user's file",
          "[segment]") {
  TempDir dir;
  const std::string name = dir.path() + "/rankstat.unit.scheduler.tp1-pp0-ep0-dp2";
  SECTION("a directory keeps the name and the segment is published beside it") {
    REQUIRE(::mkdir(name.c_str(), 0700) == 0);
    const shm::CreateResult created = shm::create_segment(test_identity(), options_in(dir));
    REQUIRE(created.error == shm::CreateError::kNone);
    CHECK(created.path == name + "_2");
    CHECK_THAT(created.note, Catch::Contains("not a regular file"));
  }
  SECTION("a symlink keeps the name and is not followed") {
    const std::string target = dir.path() + "/target";
    std::ofstream(target) << "kept";
    REQUIRE(::symlink(target.c_str(), name.c_str()) == 0);
    const shm::CreateResult created = shm::create_segment(test_identity(), options_in(dir));
    REQUIRE(created.error == shm::CreateError::kNone);
    CHECK(created.path == name + "_2");
    CHECK(rankstat::testkit::read_file(target) == "kept");
  }
  SECTION("a file of this user without a segment's magic is replaced") {
    std::ofstream(name) << "not a segment";
    const shm::CreateResult created = shm::create_segment(test_identity(), options_in(dir));
    REQUIRE(created.error == shm::CreateError::kNone);
    CHECK(created.path == name);
    CHECK(created.note.empty());
    CHECK(file_size(name) == small_geometry().total_bytes());
  }
}

TEST_CASE("Alternative rank keys fit the header's rank_key field and never repeat the rank's own",
          "[segment]") {
  CHECK(shm::candidate_rank_key("tp0-pp0-ep0", 0, 0) == "tp0-pp0-ep0");
  CHECK(shm::candidate_rank_key("tp0-pp0-ep0", 1, 0) == "tp0-pp0-ep0_2");
  CHECK(shm::candidate_rank_key("tp0-pp0-ep0", shm::kNumberedNames - 1, 0) ==
        "tp0-pp0-ep0_" + std::to_string(shm::kNumberedNames));
  CHECK(shm::candidate_rank_key("tp0-pp0-ep0", shm::kNumberedNames, 0xdeadbeefu) == "tp0-pp0-ep0_rdeadbeef");
  const std::string longest(shm::kRankKeyBytes - 1, 'k');
  for (int index = 1; index < shm::kNumberedNames + shm::kRandomNames; ++index) {
    const std::string key = shm::candidate_rank_key(longest, index, 0x12345678u);
    CHECK(key.size() <= shm::kRankKeyBytes - 1);
    CHECK(key != longest);
    CHECK(shm::is_valid_name_component(key));
  }
}

TEST_CASE("process_start_ticks identifies a live process and nothing else", "[segment][process]") {
  const auto self = static_cast<std::uint32_t>(::getpid());
  const auto first = shm::process_start_ticks(self);
  REQUIRE(first.has_value());
  CHECK(*first > 0);
  CHECK(shm::process_start_ticks(self) == first);
  CHECK_FALSE(shm::process_start_ticks(0x7FFFFFF0u).has_value());

  SECTION("a command name with spaces and parentheses is skipped correctly") {
    TempDir root;
    REQUIRE(::mkdir((root.path() + "/4242").c_str(), 0755) == 0);
    std::ofstream(root.path() + "/4242/stat")
        << "4242 (we ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 "
           "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";
    CHECK(shm::process_start_ticks(4242, root.path().c_str()) == std::optional<std::uint64_t>(987654));
  }
  SECTION("a stat line cut short yields nothing") {
    TempDir root;
    REQUIRE(::mkdir((root.path() + "/7").c_str(), 0755) == 0);
    std::ofstream(root.path() + "/7/stat") << "7 (short) S 1 2 3\n";
    CHECK_FALSE(shm::process_start_ticks(7, root.path().c_str()).has_value());
  }
}

TEST_CASE("The monotonic clock never goes backwards and the wall clock is in this century",
          "[segment][process]") {
  const std::uint64_t a = shm::monotonic_ns();
  const std::uint64_t b = shm::monotonic_ns();
  CHECK(b >= a);
  CHECK(shm::realtime_ns() > 1'600'000'000ull * 1'000'000'000ull);
}
