// The process_* families every Prometheus exporter serves (client_golang's process collector): CPU time,
// memory, descriptors and start time of this process, read from /proc/self at each scrape. Dashboards
// and alerts written for any exporter (restarts, leaks, descriptor exhaustion) then work on rankstatd.
#pragma once

#include <prometheus/metric_family.h>

#include <optional>
#include <string>
#include <vector>

namespace rankstat {

struct ProcessStats {
  double cpu_seconds = 0;     // user + system
  double resident_bytes = 0;  // RSS
  double virtual_bytes = 0;   // VSZ
  double open_fds = 0;
  double max_fds = 0;             // soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
};

// Parses /proc/<pid>/stat text (`stat`) with the boot time from /proc/stat (`btime` seconds since the
// epoch), the clock tick rate and page size: the fields that come from /proc/self/stat. nullopt if the
// text does not parse.
std::optional<ProcessStats> parse_proc_stat(const std::string& stat, double boot_time_seconds,
                                            double ticks_per_second, double page_bytes);

// This process's stats now; nullopt if /proc is unreadable (the families are then left out).
std::optional<ProcessStats> read_process_stats();

// The six process_* families for `stats` (no labels, as every exporter serves them).
std::vector<prometheus::MetricFamily> process_families(const ProcessStats& stats);

}  // namespace rankstat
