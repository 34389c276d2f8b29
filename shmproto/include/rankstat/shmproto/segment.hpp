// Creating and closing segment files.
//
// Creation never exposes a half-built segment: the writer creates "<name>.tmp.<pid>.<nonce>" with
// O_EXCL, gives it its whole size (ftruncate) but reserves with posix_fallocate only the pages written
// from the start: the header, the ring and the first page or so of each cumulative region (a full tmpfs
// is an error now, not a SIGBUS later). The cumulative block's other pages are holes until a
// registration reserves them (CumulativeWriter, through CreateResult::space): a segment costs what its
// series use, and a registration the shm directory has no room for is refused, never a SIGBUS. It then
// fills the header, stores the magic last (release) and renames the file onto its final name. A rank
// that restarts under the same name therefore replaces the old generation atomically; a reader that
// still maps the old inode keeps reading it until it lets go.
//
// Publishing the built file under its name (never over a live writer's segment) is
// segment_publish.hpp's; who the segment belongs to is segment_identity.hpp's. This header includes
// them, and the cumulative block (cumulative.hpp), so a writer or reader of segments needs only it.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/error_text.hpp"
#include "rankstat/shmproto/file_handles.hpp"
#include "rankstat/shmproto/identity_labels.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "rankstat/shmproto/schema.hpp"
#include "rankstat/shmproto/segment_identity.hpp"
#include "rankstat/shmproto/segment_publish.hpp"

namespace rankstat::shm {

struct SegmentGeometry {
  std::uint64_t ring_bytes = std::uint64_t{512} * 1024;
  std::uint32_t max_record_bytes = kSchedulerRecordMaxBytes;
  std::uint32_t series_capacity = 512;
  std::uint32_t bounds_capacity = 4096;
  std::uint32_t values_capacity = 16384;
  std::uint32_t text_capacity = 0;  // bytes of label lists and help texts; 0: 192 per series

  CumulativeGeometry cumulative() const {
    return {series_capacity, bounds_capacity, values_capacity, text_capacity};
  }
  std::uint64_t ring_offset() const { return kHeaderBytes; }
  std::uint64_t cumulative_offset() const { return ring_offset() + ring_bytes; }
  std::uint64_t total_bytes() const { return cumulative_offset() + cumulative().total_bytes(); }
};

struct CreateOptions {
  std::string directory = "/dev/shm";
  std::uint32_t mode = 0660;  // the daemon writes `head`, so its group needs write access
  SegmentGeometry geometry;
  // Group to give the segment before it is published (fchown); -1 keeps the creator's group. Done
  // before the rename so a reader never sees the file with the wrong group.
  std::int64_t group = -1;
};

enum class CreateError : std::uint8_t {
  kNone = 0,
  kInvalidArgument,  // a name, label or geometry that the contract does not allow
  kNoSpace,          // the shm directory is full (ENOSPC from posix_fallocate)
  kPermission,       // EACCES / EPERM
  kIo,               // anything else; errno is in the message
};

struct CreateResult {
  CreateError error = CreateError::kNone;
  std::string message;
  std::string path;
  MappedFile file;
  // Set when the segment was published under another name than its identity's because that name was
  // held (by a live writer, or by a file of another user): one line saying which name, why, and the
  // name used instead. Empty otherwise.
  std::string note;
  // Which pages of the cumulative block are reserved; the CumulativeWriter takes it over (it shares
  // `file`'s descriptor, valid as long as `file` is).
  CumulativeSpace space;
};

inline bool copy_fixed_string(std::string_view text, char* out, std::size_t capacity) {
  if (text.size() >= capacity || text.find('\0') != std::string_view::npos) return false;
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return true;
}

inline CreateResult create_segment(const SegmentIdentity& identity, const CreateOptions& options) {
  CreateResult result;
  auto fail = [&result](CreateError error, std::string message) {
    result.error = error;
    result.message = std::move(message);
    return std::move(result);
  };
  const SegmentGeometry& g = options.geometry;
  const auto pid = static_cast<std::uint32_t>(getpid());
  const std::string rank_key = resolve_rank_key(identity, pid);
  if (!is_valid_name_component(identity.instance)) {
    return fail(CreateError::kInvalidArgument,
                "instance id must be 1-47 characters of [A-Za-z0-9_-]: '" + identity.instance + "'");
  }
  if (!is_valid_name_component(rank_key)) {
    return fail(CreateError::kInvalidArgument,
                "rank key must be 1-47 characters of [A-Za-z0-9_-]: '" + rank_key + "'");
  }
  if (identity.role == Role::kUnknown) return fail(CreateError::kInvalidArgument, "role must be set");
  if (auto problem = identity_label_problem(identity)) return fail(CreateError::kInvalidArgument, *problem);
  if (!is_power_of_two(g.ring_bytes) || g.ring_bytes < kMinRingBytes || g.ring_bytes > kMaxRingBytes ||
      g.max_record_bytes < sizeof(RecordHeader) || g.max_record_bytes > kMaxRecordBytes ||
      g.max_record_bytes > g.ring_bytes / 2) {
    return fail(CreateError::kInvalidArgument,
                "ring must be a power of two in [4 KiB, 1 GiB] holding at least two of the largest records");
  }
  if (g.series_capacity > kMaxSeriesCapacity || g.bounds_capacity > kMaxBoundsCapacity ||
      g.values_capacity > kMaxValuesCapacity || g.cumulative().text_bytes() > kMaxTextCapacity) {
    return fail(CreateError::kInvalidArgument,
                "cumulative block too large: at most 2^20 series, 2^24 bounds, 2^24 value words and 2^28 "
                "text bytes (asked " +
                    std::to_string(g.series_capacity) + " series, " + std::to_string(g.bounds_capacity) +
                    " bounds, " + std::to_string(g.values_capacity) + " value words, " +
                    std::to_string(g.cumulative().text_bytes()) + " text bytes)");
  }
  const std::string name = segment_name(identity.instance, identity.role, rank_key);
  const std::string path = options.directory + "/" + name;
  std::random_device entropy;
  const std::uint64_t generation = (std::uint64_t{entropy()} << 32) ^ entropy() ^ monotonic_ns();
  const std::string temporary = path + std::string(kTemporaryMarker) + std::to_string(pid) + "." +
                                std::to_string(generation & 0xffffffffu);

  const int fd = ::open(temporary.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, options.mode);
  if (fd < 0) {
    const int e = errno;
    return fail(e == EACCES || e == EPERM ? CreateError::kPermission : CreateError::kIo,
                "cannot create " + temporary + ": " + errno_text(e));
  }
  auto abandon = [&](CreateError error, std::string message) {
    ::close(fd);
    ::unlink(temporary.c_str());
    return fail(error, std::move(message));
  };
  if (options.group >= 0 && ::fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(options.group)) != 0) {
    const int e = errno;
    return abandon(e == EPERM ? CreateError::kPermission : CreateError::kIo,
                   "cannot give " + temporary + " group " + std::to_string(options.group) + ": " +
                       errno_text(e) + " (a process may only choose a group it is a member of)");
  }
  ::fchmod(fd, options.mode);  // the umask must not take away the daemon's group access
  const std::uint64_t total = g.total_bytes();
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int e = errno;
    return abandon(e == ENOSPC || e == EFBIG ? CreateError::kNoSpace : CreateError::kIo,
                   "cannot size " + temporary + " to " + std::to_string(total) + " bytes: " + errno_text(e));
  }
  const CumulativeGeometry cg = g.cumulative();
  CumulativeSpace space;
  space.fd = fd;
  space.block_offset = g.cumulative_offset();
  std::uint64_t reserved_bytes = g.cumulative_offset() + sizeof(CumulativeHeader);
  int reserve_error = 0;
  do {
    reserve_error = posix_fallocate(fd, 0, static_cast<off_t>(reserved_bytes));
  } while (reserve_error == EINTR);
  for (std::size_t area = 0; area < kCumulativeAreas && reserve_error == 0; ++area) {
    const auto which = static_cast<CumulativeArea>(area);
    const std::uint64_t first = grown_reservation(cg, which, 0, 0);
    reserve_error = reserve_cumulative_pages(space, cg, which, 0, first);
    space.reserved[area] = first;
    reserved_bytes += first;
  }
  if (reserve_error != 0) {
    return abandon(reserve_error == ENOSPC ? CreateError::kNoSpace : CreateError::kIo,
                   "cannot reserve " + std::to_string(reserved_bytes) + " bytes for " + path + ": " +
                       errno_text(reserve_error));
  }
  void* address = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED)
    return abandon(CreateError::kIo, "cannot map " + temporary + ": " + errno_text(errno));
  MappedFile file(fd, address, total);

  SegmentHeader& h = *file.header();
  h.layout_major = kLayoutMajor;
  h.layout_minor = kLayoutMinor;
  h.header_bytes = kHeaderBytes;
  h.layout_hash = kLayoutHash;
  h.segment_bytes = total;
  h.state = static_cast<std::uint32_t>(SegmentState::kReady);
  h.role = static_cast<std::uint32_t>(identity.role);
  h.pid = pid;
  h.flags = identity.flags;
  h.pid_start_ticks = process_start_ticks(pid).value_or(0);
  h.generation = generation;
  h.created_realtime_ns = realtime_ns();
  h.created_monotonic_ns = monotonic_ns();
  h.tp_rank = identity.tp_rank;
  h.pp_rank = identity.pp_rank;
  h.dp_rank = identity.dp_rank;
  h.moe_ep_rank = identity.moe_ep_rank;
  h.attn_tp_rank = identity.attn_tp_rank == kRankUnset ? identity.tp_rank : identity.attn_tp_rank;
  h.attn_dp_rank = identity.attn_dp_rank == kRankUnset ? identity.dp_rank : identity.attn_dp_rank;
  h.attn_cp_rank = identity.attn_cp_rank;
  h.tp_size = identity.tp_size;
  h.pp_size = identity.pp_size;
  h.dp_size = identity.dp_size;
  h.ring_offset = g.ring_offset();
  h.ring_bytes = g.ring_bytes;
  h.cumulative_offset = g.cumulative_offset();
  h.cumulative_bytes = g.cumulative().total_bytes();
  h.max_record_bytes = g.max_record_bytes;
  if (!copy_fixed_string(identity.instance, h.instance, sizeof h.instance) ||
      !copy_fixed_string(identity.model_name, h.model_name, sizeof h.model_name) ||
      !copy_fixed_string(identity.engine_type, h.engine_type, sizeof h.engine_type) ||
      !copy_fixed_string(rank_key, h.rank_key, sizeof h.rank_key) ||
      !encode_label_pairs(identity.extra_labels, h.extra_labels, sizeof h.extra_labels)) {
    file.reset();
    ::unlink(temporary.c_str());
    return fail(CreateError::kInvalidArgument,
                "model name, engine type or extra labels too long or malformed (model name < 128 bytes, "
                "engine type < 32, extra labels < 512 encoded, label names [a-zA-Z_][a-zA-Z0-9_]*)");
  }
  h.heartbeat_ns = h.created_monotonic_ns;
  auto* cumulative = reinterpret_cast<CumulativeHeader*>(file.bytes() + h.cumulative_offset);
  cumulative->series_capacity = g.series_capacity;
  cumulative->bounds_capacity = g.bounds_capacity;
  cumulative->values_capacity = g.values_capacity;
  cumulative->text_capacity = g.cumulative().text_bytes();

  shared(h.magic).store(kMagic, std::memory_order_release);
  // The rank's own name first; if a live writer or another user holds it, the next free alternative.
  // `temporary` is invisible to readers (they skip "*.tmp.*"), so its rank_key may still change.
  const std::string prefix = options.directory + "/";
  std::string first_holder;
  for (int index = 0; index < kNumberedNames + kRandomNames; ++index) {
    const std::string key = candidate_rank_key(rank_key, index, index < kNumberedNames ? 0u : entropy());
    if (index > 0) {
      shared(h.magic).store(0, std::memory_order_relaxed);
      std::memset(h.rank_key, 0, sizeof h.rank_key);
      copy_fixed_string(key, h.rank_key, sizeof h.rank_key);
      shared(h.magic).store(kMagic, std::memory_order_release);
    }
    const std::string candidate = prefix + segment_name(identity.instance, identity.role, key);
    PublishAttempt attempt = publish_under(temporary, file.fd(), candidate);
    if (attempt.outcome == PublishAttempt::Outcome::kTaken) {
      if (index == 0) first_holder = std::move(attempt.holder);
      continue;
    }
    if (attempt.outcome == PublishAttempt::Outcome::kFailed) {
      const int e = attempt.error;
      unlink_if_same_file(file.fd(), temporary);
      file.reset();
      return fail(e == EACCES || e == EPERM ? CreateError::kPermission : CreateError::kIo,
                  "cannot publish " + candidate + ": " + errno_text(e));
    }
    if (index > 0) {
      result.note = "segment name " + path + " is held by " + first_holder + "; published as " + candidate +
                    " instead (same labels; the daemon finds segments by listing the directory)";
    }
    result.path = candidate;
    result.file = std::move(file);
    result.space = space;
    return result;
  }
  unlink_if_same_file(file.fd(), temporary);
  file.reset();
  return fail(CreateError::kPermission,
              "cannot publish " + path + ": the name is held by " + first_holder + ", and " +
                  std::to_string(kNumberedNames + kRandomNames - 1) +
                  " alternative names are taken too; remove stale files or use another segment directory");
}

// Marks a segment closed (clean exit). The file stays so the daemon can fold in its final totals and
// retire it; with `unlink_name` the name is removed, but only if it still refers to this file (a
// replacement generation renamed onto the same name is left alone).
inline void close_segment(MappedFile& file, const std::string& path, bool unlink_name) {
  if (!file.valid()) return;
  SegmentHeader& h = *file.header();
  shared(h.heartbeat_ns).store(monotonic_ns(), std::memory_order_relaxed);
  shared(h.closed).store(1, std::memory_order_release);
  if (unlink_name) unlink_if_same_file(file.fd(), path);
  file.reset();
}

}  // namespace rankstat::shm
