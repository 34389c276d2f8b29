// Publishing a built segment under its name: who holds a name and whether a new segment may take it
// (judge_name_holder), the rename that never overwrites a holder it did not judge, and the alternative
// names tried when the rank's own is held.
//
// Only a segment whose writer is gone is ever replaced. The rename never overwrites (RENAME_NOREPLACE);
// a name already held is judged (judge_name_holder): a regular file of this user whose writer exited,
// died or closed it is replaced, anything else (a live writer, a writer that cannot be checked, another
// user's file) keeps its name and the new segment is published beside it as "<rank key>_2", "_3", ...
// (CreateResult::note says so). Readers find segments by listing the directory, so the name need not
// be the one the identity suggests; the header's rank_key is always the name's last component.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "rankstat/shmproto/error_text.hpp"
#include "rankstat/shmproto/file_handles.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/process.hpp"

namespace rankstat::shm {

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

}  // namespace rankstat::shm
