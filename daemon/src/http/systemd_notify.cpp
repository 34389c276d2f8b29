#include "http/systemd_notify.hpp"

#include <systemd/sd-daemon.h>

#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <cstdint>
#include <ctime>
#include <stdexcept>
#include <string>
#include <system_error>

namespace rankstat::http {
namespace {

// A status containing '\n' would otherwise inject extra KEY=VALUE assignments into the datagram.
std::string single_line(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

void send_notification(const std::string& state) {
  const int rc = sd_notify(0, state.c_str());
  if (rc < 0) {
    spdlog::warn("sd_notify(\"{}\") failed: {}", single_line(state), std::generic_category().message(-rc));
  }
}

std::uint64_t monotonic_now_usec() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000U +
         static_cast<std::uint64_t>(now.tv_nsec) / 1'000U;
}

}  // namespace

void notify_ready(std::string_view status) {
  std::string state = "READY=1";
  if (!status.empty()) state += "\nSTATUS=" + single_line(status);
  send_notification(state);
}

void notify_stopping() {
  send_notification("STOPPING=1");
}

void notify_reloading() {
  send_notification("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(monotonic_now_usec()));
}

void notify_watchdog() {
  send_notification("WATCHDOG=1");
}

std::optional<std::chrono::microseconds> watchdog_interval() {
  std::uint64_t watchdog_usec = 0;
  const int rc = sd_watchdog_enabled(0, &watchdog_usec);
  if (rc < 0) {
    spdlog::warn("sd_watchdog_enabled failed: {}", std::generic_category().message(-rc));
    return std::nullopt;
  }
  if (rc == 0 || watchdog_usec == 0) return std::nullopt;
  return std::chrono::microseconds(static_cast<std::chrono::microseconds::rep>(watchdog_usec / 2));
}

std::vector<int> systemd_listen_fds() {
  const int count = sd_listen_fds(1);
  if (count < 0) {
    throw std::runtime_error("--web.systemd-socket: cannot read the sockets systemd passed: " +
                             std::generic_category().message(-count));
  }
  if (count == 0) {
    throw std::runtime_error(
        "--web.systemd-socket: systemd passed no socket (start rankstatd through rankstatd.socket)");
  }
  std::vector<int> fds;
  for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + count; ++fd) {
    if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
      throw std::runtime_error("--web.systemd-socket: passed descriptor " + std::to_string(fd) +
                               " is not a listening stream socket");
    }
    fds.push_back(fd);
  }
  return fds;
}

}  // namespace rankstat::http
