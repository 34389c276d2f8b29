// rankstatd entry point: parse flags, set up logging, run the daemon.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "config.hpp"
#include "daemon.hpp"
#include "rankstat/shmproto/segment.hpp"

namespace {

// The daemon holds about two descriptors per rank (the segment, a pidfd) plus one per HTTP connection,
// and needs one more for each /proc check: the default soft limit of 1024 is reached by a few hundred
// ranks or a handful of idle connections. Raise the soft limit to the hard one (the unit sets
// LimitNOFILE=65536). Running out is never a verdict on a rank (segment_registry.hpp), but ranks are
// served late while it lasts.
void raise_fd_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur >= limit.rlim_max) {
    spdlog::info("file descriptor limit {} (already the hard limit)", limit.rlim_cur);
    return;
  }
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    spdlog::info("raised the file descriptor limit from {} to the hard limit {}", before, limit.rlim_max);
  } else {
    spdlog::warn("cannot raise the file descriptor limit from {} to {}: {}", before, limit.rlim_max,
                 rankstat::shm::errno_text(errno));
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto parsed = rankstat::parse_config(argc, argv);
  if (!parsed.config) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("rankstatd"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(parsed.config->log_level));
  raise_fd_limit();
  try {
    rankstat::Daemon daemon(*parsed.config);
    return daemon.run();
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
}
