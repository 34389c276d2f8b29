// rankstatd entry point: parse flags, set up logging, run the daemon.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "config.hpp"
#include "daemon.hpp"

int main(int argc, char** argv) {
  auto parsed = rankstat::parse_config(argc, argv);
  if (!parsed.config) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("rankstatd"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(parsed.config->log_level));
  try {
    rankstat::Daemon daemon(*parsed.config);
    return daemon.run();
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
}
