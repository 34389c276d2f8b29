// Clocks and process identity shared by writers and readers.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

namespace rankstat::shm {

// CLOCK_MONOTONIC in nanoseconds: one clock for every process of a boot, immune to wall-clock steps.
// Gauge sets are stamped with it: a set that another process's set happened before (a pipe, a lock, a
// message: microseconds at least) gets the larger stamp, so mostrecent serves the later of the two.
// Read through the vDSO without a system call when the clocksource supports it (tsc, kvm-clock with a
// stable TSC, hyperv_clocksource_tsc_page): 25-35 ns on our VMs; on hpet or acpi_pm it is a system call.
inline std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC at timer-tick resolution (1-4 ms), never ahead of monotonic_ns(). Writers stamp
// scheduler-snapshot records and heartbeat() with it: it costs a few nanoseconds where the precise
// clock costs tens on a VM, and what reads those stamps (liveness, integrals, a rank's restart) needs no
// finer order. Never for a gauge set: two processes' sets within one tick would tie, and mostrecent
// would serve whichever the tie-break names, often the earlier.
inline std::uint64_t coarse_monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

inline std::uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// What a look at /proc/<pid>/stat found. A check that fails for any reason other than "no such
// process" (EMFILE/ENFILE when the caller is out of descriptors, EACCES under hidepid, a read error) is
// kUnknown, never kGone: unknown is not dead, and a reader must keep its previous verdict.
struct ProcessStart {
  enum class Status : std::uint8_t { kFound, kGone, kUnknown };
  Status status = Status::kUnknown;  // kGone too for a zombie: exited, not yet reaped
  std::uint64_t ticks = 0;           // field 22 (start time in clock ticks since boot) when kFound
  int error = 0;                     // errno of the failed check when kUnknown (0 for a parse failure)
};

// Field 22 of /proc/<pid>/stat, with a verdict on why it could not be read. Async-signal-unsafe but
// allocation-free; safe from any thread (no shared state).
inline ProcessStart probe_process_start(std::uint32_t pid, const char* proc_root = "/proc") {
  ProcessStart out;
  char path[96];
  std::snprintf(path, sizeof path, "%s/%u/stat", proc_root, pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    out.error = errno;
    out.status = out.error == ENOENT || out.error == ESRCH ? ProcessStart::Status::kGone
                                                           : ProcessStart::Status::kUnknown;
    return out;
  }
  char buffer[1024];
  ssize_t n = -1;
  do {
    n = ::read(fd, buffer, sizeof buffer - 1);
  } while (n < 0 && errno == EINTR);
  const int read_error = errno;
  ::close(fd);
  if (n < 0) {
    // A process that exits between open and read answers ESRCH.
    out.error = read_error;
    out.status = read_error == ESRCH ? ProcessStart::Status::kGone : ProcessStart::Status::kUnknown;
    return out;
  }
  buffer[n] = '\0';
  // comm (field 2) may contain spaces and parentheses: parse from the last ')'.
  const char* p = std::strrchr(buffer, ')');
  if (p == nullptr) return out;
  ++p;
  // After ')' come fields 3, 4, ...; field 3 is the state, the start time is field 22 (the 20th token).
  // A zombie (Z) or a dead task (X) has exited: it only waits for its parent to reap it, and its /proc
  // entry, start time included, stays until then. It writes nothing more: gone, not alive.
  while (*p == ' ') ++p;
  if (*p == 'Z' || *p == 'X') {
    out.status = ProcessStart::Status::kGone;
    return out;
  }
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
    if (*p == '\0') return out;
  }
  while (*p == ' ') ++p;
  char* end = nullptr;
  const unsigned long long ticks = std::strtoull(p, &end, 10);
  if (end == p) return out;
  out.status = ProcessStart::Status::kFound;
  out.ticks = ticks;
  return out;
}

// Field 22 of /proc/<pid>/stat, or nullopt if the process does not exist, is not visible (another pid
// namespace) or could not be checked. A pid together with its start time names one process for the
// lifetime of the boot; a pid alone is reused. Liveness verdicts use probe_process_start, which tells
// "gone" from "could not check".
inline std::optional<std::uint64_t> process_start_ticks(std::uint32_t pid, const char* proc_root = "/proc") {
  const ProcessStart probe = probe_process_start(pid, proc_root);
  if (probe.status != ProcessStart::Status::kFound) return std::nullopt;
  return probe.ticks;
}

}  // namespace rankstat::shm
