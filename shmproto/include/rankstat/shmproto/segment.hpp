// Creating, opening and validating segment files.
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
// Only a segment whose writer is gone is ever replaced. The rename never overwrites (RENAME_NOREPLACE);
// a name already held is judged (judge_name_holder): a regular file of this user whose writer exited,
// died or closed it is replaced, anything else (a live writer, a writer that cannot be checked, another
// user's file) keeps its name and the new segment is published beside it as "<rank key>_2", "_3", ...
// (CreateResult::note says so). Readers find segments by listing the directory, so the name need not
// be the one the identity suggests; the header's rank_key is always the name's last component.
#pragma once

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/identity_labels.hpp"
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
  // Set when the segment was published under another name than its identity's because that name was
  // held (by a live writer, or by a file of another user): one line saying which name, why, and the
  // name used instead. Empty otherwise.
  std::string note;
  // Which pages of the cumulative block are reserved; the CumulativeWriter takes it over (it shares
  // `file`'s descriptor, valid as long as `file` is).
  CumulativeSpace space;
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
    // Classic names only, like the daemon's constant labels: an operator's setting on every series.
    if (!is_extra_label_name(name)) {
      return label + " is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, no \"__\" prefix)";
    }
    if (name == "le" || name == "quantile" || name == "pid") {
      return label + " is reserved (le: histogram buckets, quantile: summaries, pid: per-process gauges)";
    }
    // The labels every identity-labelled series gets from the segment header (identity_labels.hpp).
    if (is_identity_label_name(name)) return label + " repeats an identity label the segment header sets";
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

// Who holds a segment name, and whether a new segment may take the name from it.
struct NameHolder {
  bool replaceable = false;
  std::string description;  // e.g. "a live writer (pid 1234)", for the note or the error message
};

// Judges the file holding a segment name: `st` from lstat (or fstat of `fd`), `fd` open on the same file
// or -1 when it could not be opened. Only a regular file of this user may be replaced, and only when no
// writer can still be using it: it is no segment (its magic is missing), its writer closed it, or the
// writer's process is gone (exited, a zombie, or its pid now names a process with another start time).
// A live writer keeps its name, this very process included (another Reporter of the same identity is
// alive: replacing it would lose its later writes; a Reporter that re-opens closes its segment first).
// A writer that cannot be checked (no /proc access, out of descriptors) counts as alive: unknown is not
// dead. A segment of another layout major is not judged (its pid fields may mean something else).
inline NameHolder judge_name_holder(const struct stat& st, int fd) {
  if (!S_ISREG(st.st_mode))
    return {false, "something not a regular file, owned by " + describe_user(st.st_uid)};
  if (st.st_uid != geteuid()) {
    return {false, "a file owned by " + describe_user(st.st_uid) + ", not by this process's user " +
                       describe_user(geteuid())};
  }
  if (fd < 0) return {false, "a file of this user that cannot be opened"};
  SegmentHeader h{};
  ssize_t n = -1;
  do {
    n = ::pread(fd, &h, sizeof h, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return {false, "a file of this user that cannot be read (" + errno_text(errno) + ")"};
  constexpr auto kNeeded = static_cast<ssize_t>(offsetof(SegmentHeader, closed) + sizeof h.closed);
  // Writers publish only after the magic and the whole size are in place: without them no writer uses it.
  if (n < kNeeded || h.magic != kMagic) return {true, "a file of this user that is not a segment"};
  const std::string writer = "pid " + std::to_string(h.pid);
  if (h.layout_major != kLayoutMajor) {
    return {false, "a segment of layout " + layout_version_text(h) + " (" + writer +
                       "), whose writer this version cannot judge"};
  }
  if (h.closed != 0) return {true, "the closed segment of " + writer};
  const ProcessStart probe = probe_process_start(h.pid);
  switch (probe.status) {
    case ProcessStart::Status::kGone:
      return {true, "the segment of " + writer + ", which has exited"};
    case ProcessStart::Status::kFound:
      // A writer that could not read its own start time (0) is judged by the pid alone.
      if (h.pid_start_ticks != 0 && probe.ticks != h.pid_start_ticks)
        return {true, "the segment of " + writer + ", which has exited (the pid is reused)"};
      return {false, "a live writer (" + writer + ")"};
    case ProcessStart::Status::kUnknown:
      break;
  }
  return {false, "a writer that cannot be checked (" + writer + ": " +
                     (probe.error != 0 ? errno_text(probe.error) : std::string("unreadable /proc entry")) +
                     "; counted as alive)"};
}

// renameat2(2) flags, the kernel's values (glibc names them only from 2.28, with _GNU_SOURCE).
inline constexpr unsigned kRenameNoReplace = 1u << 0;
inline constexpr unsigned kRenameExchange = 1u << 1;

inline int rename_with_flags(const std::string& from, const std::string& to, unsigned flags) {
#ifdef SYS_renameat2
  return static_cast<int>(::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags));
#else
  errno = ENOSYS;
  return -1;
#endif
}

struct PublishAttempt {
  enum class Outcome : std::uint8_t { kPublished, kTaken, kFailed };
  Outcome outcome = Outcome::kFailed;
  std::string holder;  // kTaken: who holds the name
  int error = 0;       // kFailed: errno
};

// A descriptor closed on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { reset(-1); }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

inline bool same_inode(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

// Opens the file at `path` (never following a symlink) and judges it; `listed` is its lstat. A file
// that changed between the two is reported through `changed` (the caller looks again).
inline NameHolder open_and_judge(const std::string& path, const struct stat& listed, ScopedFd& holder,
                                 bool& changed) {
  changed = false;
  if (!S_ISREG(listed.st_mode) || listed.st_uid != geteuid()) return judge_name_holder(listed, -1);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    changed = errno == ENOENT;
    return judge_name_holder(listed, -1);
  }
  holder.reset(fd);
  struct stat held {};
  if (::fstat(fd, &held) != 0 || !same_inode(held, listed)) {
    changed = true;
    return {};
  }
  return judge_name_holder(held, fd);
}

// Where renameat2 is not supported (ENOSYS, or EINVAL from a file system without RENAME_NOREPLACE):
// judge the holder, then rename. A writer publishing in between is overwritten; nothing better exists
// there.
inline PublishAttempt publish_by_check_then_rename(const std::string& temporary, const std::string& path) {
  using Outcome = PublishAttempt::Outcome;
  struct stat listed {};
  if (::lstat(path.c_str(), &listed) == 0) {
    ScopedFd holder(-1);
    bool changed = false;
    NameHolder verdict = open_and_judge(path, listed, holder, changed);
    if (!changed && !verdict.replaceable) return {Outcome::kTaken, std::move(verdict.description), 0};
  } else if (errno != ENOENT) {
    return {Outcome::kFailed, {}, errno};
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) return {Outcome::kFailed, {}, errno};
  return {Outcome::kPublished, {}, 0};
}

// Puts the fully built temporary (open as `fd`) under `path`, unless the name is held by a file that
// judge_name_holder says must stay. Never overwrites a file it did not judge replaceable:
//  * a free name is taken with RENAME_NOREPLACE, so a writer publishing at the same moment is never
//    overwritten;
//  * a replaceable holder is replaced while this process holds an flock on it (a second writer judging
//    the same dead holder cannot take it too: its flock fails, or the name no longer points to that
//    holder when it looks again), by RENAME_EXCHANGE, so that what left the name can be checked: the
//    judged holder is unlinked (as rename would have); anything else (the holder was unlinked and a
//    new segment published between the look and the exchange) is exchanged back at once.
inline PublishAttempt publish_under(const std::string& temporary, int fd, const std::string& path) {
  using Outcome = PublishAttempt::Outcome;
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (rename_with_flags(temporary, path, kRenameNoReplace) == 0) return {Outcome::kPublished, {}, 0};
    const int e = errno;
    if (e == ENOSYS || e == EINVAL) return publish_by_check_then_rename(temporary, path);
    if (e != EEXIST) return {Outcome::kFailed, {}, e};
    struct stat listed {};
    if (::lstat(path.c_str(), &listed) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile: try the free name again
      return {Outcome::kFailed, {}, errno};
    }
    ScopedFd holder(-1);
    bool changed = false;
    NameHolder verdict = open_and_judge(path, listed, holder, changed);
    if (changed) continue;
    if (!verdict.replaceable) return {Outcome::kTaken, std::move(verdict.description), 0};
    if (::flock(holder.get(), LOCK_EX | LOCK_NB) != 0) {
      return {Outcome::kTaken, verdict.description + ", which another writer is replacing right now", 0};
    }
    struct stat now {};
    if (::lstat(path.c_str(), &now) != 0 || !same_inode(now, listed)) continue;  // replaced meanwhile
    if (rename_with_flags(temporary, path, kRenameExchange) != 0) {
      const int x = errno;
      if (x == ENOENT) continue;
      if (x != ENOSYS && x != EINVAL) return {Outcome::kFailed, {}, x};
      // No exchange on this file system: the flock still keeps other writers of this version off.
      if (::rename(temporary.c_str(), path.c_str()) != 0) return {Outcome::kFailed, {}, errno};
      return {Outcome::kPublished, {}, 0};
    }
    // `temporary` now names what held `path`.
    if (unlink_if_same_file(holder.get(), temporary)) return {Outcome::kPublished, {}, 0};
    struct stat ours {};
    struct stat at_temporary {};
    if (::fstat(fd, &ours) == 0 && ::lstat(temporary.c_str(), &at_temporary) == 0 &&
        same_inode(ours, at_temporary)) {
      continue;  // nothing was exchanged after all (cannot happen on Linux); look again
    }
    // Another writer's segment: give its name back.
    if (rename_with_flags(temporary, path, kRenameExchange) != 0) return {Outcome::kFailed, {}, errno};
  }
  return {Outcome::kTaken, "files that kept changing while this writer looked at them", 0};
}

// The rank key of the `index`-th name a segment tries: its own (0), then "<key>_2" .. "<key>_16", then
// "<key>_r<8 hex digits>" from `random` (a name no one can squat in advance). The key part is shortened
// so that the whole fits the header's rank_key field.
inline constexpr int kNumberedNames = 16;
inline constexpr int kRandomNames = 8;
inline std::string candidate_rank_key(const std::string& key, int index, std::uint32_t random) {
  if (index == 0) return key;
  std::string suffix = "_";
  if (index < kNumberedNames) {
    suffix += std::to_string(index + 1);
  } else {
    static constexpr char kHex[] = "0123456789abcdef";
    suffix += 'r';
    for (int shift = 28; shift >= 0; shift -= 4) suffix += kHex[(random >> shift) & 15u];
  }
  const std::size_t room = kRankKeyBytes - 1 - suffix.size();
  return key.substr(0, std::min(key.size(), room)) + suffix;
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
