#pragma once

// Thin wrappers over sd_notify(3) for Type=notify services: readiness, status line, reload/stop
// transitions and watchdog keep-alives. Every function is a no-op when $NOTIFY_SOCKET is unset
// (not started by systemd), and failures to notify are logged, never thrown: telling systemd
// about our state must not be able to take the daemon down.
// Thread-safety: safe from any thread (each call sends one independent datagram), but they read
// the environment, so do not call them concurrently with setenv()/unsetenv().

#include <chrono>
#include <optional>
#include <string_view>
#include <vector>

namespace rankstat::http {

// READY=1 plus STATUS=<status> (shown by `systemctl status`; line breaks become spaces) when status is
// not empty.
void notify_ready(std::string_view status);
void notify_stopping();
// RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload (systemd >= 253) requires; older
// managers ignore the extra field.
void notify_reloading();
void notify_watchdog();

// The period at which to call notify_watchdog(): half of WatchdogSec= so that one late kick does
// not trip the watchdog. nullopt when the watchdog is disabled or not meant for this process.
std::optional<std::chrono::microseconds> watchdog_interval();

// The listening TCP sockets systemd passed to this process (socket activation, sd_listen_fds(3)); the
// LISTEN_* variables are removed so that children do not inherit them. Throws std::runtime_error when
// there are none or one is not a listening TCP socket. Call once, at startup, before threads start.
std::vector<int> systemd_listen_fds();

}  // namespace rankstat::http
