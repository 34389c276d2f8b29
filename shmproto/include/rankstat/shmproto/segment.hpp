// Creating, opening and validating segment files.
//
// Creation never exposes a half-built segment: the writer creates "<name>.tmp.<pid>.<nonce>" with
// O_EXCL, reserves every page with posix_fallocate (a full tmpfs is an error now, not a SIGBUS later),
// fills the header, stores the magic last (release) and renames the file onto its final name. A rank
// that restarts under the same name therefore replaces the old generation atomically; a reader that
// still maps the old inode keeps reading it until it lets go.
#pragma once

#include <fcntl.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "rankstat/shmproto/schema.hpp"

namespace rankstat::shm {

// Owns one mapping of a segment file and its descriptor. Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(int fd, void* address, std::uint64_t bytes) : fd_(fd), address_(address), bytes_(bytes) {}
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }
  MappedFile& operator=(MappedFile&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
      address_ = std::exchange(other.address_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~MappedFile() { reset(); }

  void reset() {
    if (address_ != nullptr) munmap(address_, bytes_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    address_ = nullptr;
    bytes_ = 0;
  }

  bool valid() const { return address_ != nullptr; }
  int fd() const { return fd_; }
  std::uint8_t* bytes() const { return static_cast<std::uint8_t*>(address_); }
  std::uint64_t size() const { return bytes_; }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(address_); }

 private:
  int fd_ = -1;
  void* address_ = nullptr;
  std::uint64_t bytes_ = 0;
};

// Who a segment belongs to; becomes the exported labels.
struct SegmentIdentity {
  Role role = Role::kScheduler;
  std::string instance = "default";
  std::string rank_key;  // empty: derived from the ranks (schedulers) or the pid (others)
  std::string model_name;
  std::string engine_type = "unified";
  std::int32_t tp_rank = 0;
  std::int32_t pp_rank = 0;
  std::int32_t dp_rank = kRankUnset;
  std::int32_t moe_ep_rank = 0;
  std::int32_t attn_tp_rank = kRankUnset;  // kRankUnset: same as tp_rank
  std::int32_t attn_dp_rank = kRankUnset;
  std::int32_t attn_cp_rank = 0;
  std::int32_t tp_size = 1;
  std::int32_t pp_size = 1;
  std::int32_t dp_size = 1;
  std::uint32_t flags = 0;
  LabelPairs extra_labels;
};

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
};

inline std::string resolve_rank_key(const SegmentIdentity& identity, std::uint32_t pid) {
  if (!identity.rank_key.empty()) return identity.rank_key;
  if (identity.role == Role::kScheduler) {
    return scheduler_rank_key(identity.tp_rank, identity.pp_rank, identity.moe_ep_rank, identity.dp_rank);
  }
  return "pid" + std::to_string(pid);
}

inline bool copy_fixed_string(std::string_view text, char* out, std::size_t capacity) {
  if (text.size() >= capacity || text.find('\0') != std::string_view::npos) return false;
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return true;
}

// `text` in single quotes for an error message, bytes outside printable ASCII as \xNN.
inline std::string quoted_for_message(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : text.substr(0, 80)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out += c;
    } else {
      out.append("\\x").append(1, kHex[byte >> 4]).append(1, kHex[byte & 15]);
    }
  }
  if (text.size() > 80) out += "...";
  return out + "'";
}

// Labels every identity-labelled series gets from the segment header (daemon/src/aggregation.cpp
// identity_labels): an extra label may not repeat one.
inline constexpr std::string_view kIdentityLabelNames[] = {"model_name",  "engine_type", "tp_rank", "pp_rank",
                                                           "moe_ep_rank", "dp_rank",     "priority"};

// Why the identity strings and extra labels cannot all become Prometheus labels, naming the culprit;
// nullopt when they can. An extra label may not be reserved: `le` (histogram buckets, SGLang's
// routing-key gauges), `quantile` (summaries), `pid` (per-process gauges) or a "__" prefix.
inline std::optional<std::string> identity_label_problem(const SegmentIdentity& identity) {
  const std::pair<std::string_view, const std::string*> strings[] = {{"model name", &identity.model_name},
                                                                     {"engine type", &identity.engine_type}};
  for (const auto& [what, text] : strings) {
    if (!is_valid_utf8(*text))
      return std::string(what) + " " + quoted_for_message(*text) + " is not valid UTF-8";
  }
  for (std::size_t i = 0; i < identity.extra_labels.size(); ++i) {
    const auto& [name, value] = identity.extra_labels[i];
    const std::string label = "extra label " + quoted_for_message(name);
    if (!is_valid_label_name(name)) {
      return label + " is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, at most 64, no \"__\" prefix)";
    }
    if (name == "le" || name == "quantile" || name == "pid") {
      return label + " is reserved (le: histogram buckets, quantile: summaries, pid: per-process gauges)";
    }
    for (const std::string_view identity_name : kIdentityLabelNames) {
      if (name == identity_name) return label + " repeats an identity label the segment header sets";
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (identity.extra_labels[j].first == name) return label + " is given twice";
    }
    if (!is_valid_utf8(value) || value.find('\0') != std::string::npos) {
      return label + " has a value that is not valid UTF-8 text: " + quoted_for_message(value);
    }
  }
  return std::nullopt;
}

// The two strerror_r flavours: GNU returns the text (maybe not in the buffer), XSI fills the buffer.
inline std::string strerror_r_text(const char* gnu_text, const char* /*buffer*/, int /*error*/) {
  return gnu_text;
}
inline std::string strerror_r_text(int xsi_result, const char* buffer, int error) {
  return xsi_result == 0 ? std::string(buffer) : "errno " + std::to_string(error);
}

// strerror's text without its shared buffer: strerror is not thread-safe, and engines and the daemon
// run threads.
inline std::string errno_text(int error) {
  std::array<char, 256> buffer{};
  return strerror_r_text(::strerror_r(error, buffer.data(), buffer.size()), buffer.data(), error);
}

// "uid N (name)", or "uid N" when the user has no passwd entry.
inline std::string describe_user(std::uint32_t uid) {
  std::string out = "uid " + std::to_string(uid);
  passwd entry{};
  passwd* found = nullptr;
  char buffer[4096];
  if (getpwuid_r(static_cast<uid_t>(uid), &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr)
    out += std::string(" (") + found->pw_name + ")";
  return out;
}

// Removes `path` only if it names the same inode as the open `fd`, so a newer generation renamed onto
// the name in the meantime survives. Returns true if it unlinked.
inline bool unlink_if_same_file(int fd, const std::string& path) {
  struct stat by_fd {};
  struct stat by_name {};
  if (fstat(fd, &by_fd) != 0 || lstat(path.c_str(), &by_name) != 0) return false;
  if (by_fd.st_ino != by_name.st_ino || by_fd.st_dev != by_name.st_dev) return false;
  return ::unlink(path.c_str()) == 0;
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
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(total)); e != 0) {
    return abandon(e == ENOSPC ? CreateError::kNoSpace : CreateError::kIo,
                   "cannot reserve " + std::to_string(total) + " bytes for " + path + ": " + errno_text(e));
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
  // Name squatting: another user may have created a file under this rank's name first. In a sticky
  // directory (/dev/shm) the rename below would fail with a bare EPERM; elsewhere it would silently
  // replace a file we do not own. Either way say who holds the name. (The check races with a squatter
  // creating the file right now; the rename's own error still stops that case.)
  if (struct stat target{};
      ::lstat(path.c_str(), &target) == 0 && (!S_ISREG(target.st_mode) || target.st_uid != geteuid())) {
    file.reset();
    ::unlink(temporary.c_str());
    return fail(CreateError::kPermission,
                "cannot publish " + path + ": the name is taken by " +
                    (S_ISREG(target.st_mode) ? "a file" : "something not a regular file") + " owned by " +
                    describe_user(target.st_uid) + ", not by this process's user " +
                    describe_user(geteuid()) +
                    " (another user created it first?); remove it or use another "
                    "segment directory");
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int e = errno;
    file.reset();
    ::unlink(temporary.c_str());
    return fail(e == EACCES || e == EPERM ? CreateError::kPermission : CreateError::kIo,
                "cannot publish " + path + ": " + errno_text(e));
  }
  result.path = path;
  result.file = std::move(file);
  return result;
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
