#include "service_control.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <utility>

#include "http/systemd_notify.hpp"

namespace rankstat {

ServiceControl::ServiceControl(boost::asio::io_context& io, Handlers handlers)
    : handlers_(std::move(handlers)),
      stop_signals_(io, SIGTERM, SIGINT),
      reload_signals_(io, SIGHUP),
      watchdog_timer_(io) {}

void ServiceControl::start(std::string_view ready_status) {
  wait_stop();
  wait_reload();
  watchdog_period_ = http::watchdog_interval();
  if (watchdog_period_) kick_watchdog();
  http::notify_ready(ready_status);
}

void ServiceControl::stop() {
  if (stopped_) return;
  stopped_ = true;
  http::notify_stopping();
  watchdog_timer_.cancel();
  reload_signals_.cancel();
  stop_signals_.cancel();
}

void ServiceControl::wait_stop() {
  stop_signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("received signal {}, shutting down", signo);
    handlers_.stop();
  });
}

void ServiceControl::wait_reload() {
  reload_signals_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec || stopped_) return;
    http::notify_reloading();
    handlers_.reload();
    http::notify_ready("serving");
    wait_reload();
  });
}

void ServiceControl::kick_watchdog() {
  // Fed from the io thread: a wedged loop stops the kicks and systemd restarts the daemon.
  http::notify_watchdog();
  watchdog_timer_.expires_after(*watchdog_period_);
  watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) kick_watchdog();
  });
}

}  // namespace rankstat
