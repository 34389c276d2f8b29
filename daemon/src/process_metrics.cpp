#include "process_metrics.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

namespace rankstat {

std::optional<ProcessStats> parse_proc_stat(const std::string& stat, double boot_time_seconds,
                                            double ticks_per_second, double page_bytes) {
  // The command name (field 2) is in parentheses and may itself hold spaces and ')': the fields
  // that follow start after the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos || ticks_per_second <= 0) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::vector<std::string> after_name;  // field 3 (state) onwards
  std::string field;
  while (fields >> field) after_name.push_back(field);
  // proc(5): utime 14, stime 15, starttime 22, vsize 23, rss 24 (1-based, so index - 3 here).
  if (after_name.size() < 22) return std::nullopt;
  try {
    ProcessStats s;
    s.cpu_seconds = (std::stod(after_name[11]) + std::stod(after_name[12])) / ticks_per_second;
    s.start_time_seconds = boot_time_seconds + std::stod(after_name[19]) / ticks_per_second;
    s.virtual_bytes = std::stod(after_name[20]);
    s.resident_bytes = std::stod(after_name[21]) * page_bytes;
    return s;
  } catch (...) {
    return std::nullopt;
  }
}

namespace {

double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      double value = 0;
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

// Entries of /proc/self/fd, not counting the descriptor that lists them.
std::optional<double> open_descriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double count = 0;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): readdir is thread-safe on a stream no other thread uses
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;
}

prometheus::MetricFamily one_value(const char* name, const char* help, prometheus::MetricType type,
                                   double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

}  // namespace

std::optional<ProcessStats> read_process_stats() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  auto stats = parse_proc_stat(stat, boot_time_seconds(), static_cast<double>(::sysconf(_SC_CLK_TCK)),
                               static_cast<double>(::sysconf(_SC_PAGESIZE)));
  if (!stats) return std::nullopt;
  const auto fds = open_descriptors();
  if (!fds) return std::nullopt;  // descriptors exhausted: left out rather than served wrong
  stats->open_fds = *fds;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) stats->max_fds = static_cast<double>(limit.rlim_cur);
  return stats;
}

std::vector<prometheus::MetricFamily> process_families(const ProcessStats& s) {
  using prometheus::MetricType;
  return {
      one_value("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                MetricType::Counter, s.cpu_seconds),
      one_value("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, s.open_fds),
      one_value("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge, s.max_fds),
      one_value("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
                s.virtual_bytes),
      one_value("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
                s.resident_bytes),
      one_value("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                MetricType::Gauge, s.start_time_seconds),
  };
}

}  // namespace rankstat
