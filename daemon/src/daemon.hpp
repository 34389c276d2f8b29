// rankstatd: one io thread runs everything — ring drains on a short timer, liveness checks, directory
// scans (inotify makes them come sooner), the HTTP listener and signal handling — so the segment state
// needs no locks. A scrape is built on that thread from the state as of that moment. The jobs are one
// component each (segment_watch, scrape_cache, routes, service_control); Daemon wires them together.
#pragma once

#include <memory>
#include <string>

#include "config.hpp"

namespace rankstat {

class Daemon {
 public:
  explicit Daemon(Config config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds the listener (throws std::runtime_error with a clear message if it cannot), then serves
  // until SIGTERM or SIGINT. Returns the process exit code.
  int run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace rankstat
