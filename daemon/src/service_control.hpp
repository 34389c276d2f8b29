// The daemon's side of the service manager: SIGTERM/SIGINT (stop) and SIGHUP (reload) as they arrive, and
// what systemd is told (READY, RELOADING, STOPPING, watchdog keep-alives; no-ops outside systemd).
//
// Threading contract: touched on the io thread only; the handlers are called there.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

namespace rankstat {

class ServiceControl {
 public:
  struct Handlers {
    std::function<void()> stop;    // SIGTERM or SIGINT, once
    std::function<void()> reload;  // SIGHUP, between RELOADING and READY
  };

  ServiceControl(boost::asio::io_context& io, Handlers handlers);

  // Waits for the signals, starts the watchdog kicks when systemd asks for them, then reports READY.
  void start(std::string_view ready_status);
  // Reports STOPPING and stops waiting for signals and kicking the watchdog.
  void stop();

 private:
  void wait_stop();
  void wait_reload();
  void kick_watchdog();

  Handlers handlers_;
  boost::asio::signal_set stop_signals_;
  boost::asio::signal_set reload_signals_;
  boost::asio::steady_timer watchdog_timer_;
  std::optional<std::chrono::microseconds> watchdog_period_;
  bool stopped_ = false;
};

}  // namespace rankstat
