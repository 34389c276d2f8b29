// Clocks and process identity shared by writers and readers.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

namespace rankstat::shm {

inline std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC at timer-tick resolution (1-4 ms). Writers stamp records and heartbeats with it: it
// costs a few nanoseconds where the precise clock costs tens on a VM, and it is the same clock, only
// coarser, so readers compare it with monotonic_ns() directly. Ordering within a tick falls back to the
// documented tie-break (newer generation, then segment name).
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

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or nullopt if the process does
// not exist or is not visible (another pid namespace). A pid together with its start time names one
// process for the lifetime of the boot; a pid alone is reused.
inline std::optional<std::uint64_t> process_start_ticks(std::uint32_t pid, const char* proc_root = "/proc") {
  char path[96];
  std::snprintf(path, sizeof path, "%s/%u/stat", proc_root, pid);
  std::FILE* file = std::fopen(path, "re");
  if (file == nullptr) return std::nullopt;
  char buffer[1024];
  const std::size_t n = std::fread(buffer, 1, sizeof buffer - 1, file);
  std::fclose(file);
  buffer[n] = '\0';
  // comm (field 2) may contain spaces and parentheses: parse from the last ')'.
  const char* p = std::strrchr(buffer, ')');
  if (p == nullptr) return std::nullopt;
  ++p;
  // After ')' come fields 3, 4, ...; the start time is field 22, i.e. the 20th token.
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
    if (*p == '\0') return std::nullopt;
  }
  while (*p == ' ') ++p;
  char* end = nullptr;
  const unsigned long long ticks = std::strtoull(p, &end, 10);
  if (end == p) return std::nullopt;
  return ticks;
}

}  // namespace rankstat::shm
