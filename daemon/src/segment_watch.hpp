// What keeps the registry current between scrapes: the ring drains on the paced poll timer, the periodic
// liveness check and directory scan, inotify on the segment directory (a hint that makes scans come
// sooner) and a pidfd per live writer (a crash is noticed at once, not at the next liveness pass).
//
// Threading contract: touched on the io thread only; its handlers run there too.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "config.hpp"
#include "poll_pacer.hpp"
#include "segment_registry.hpp"
#include "self_metrics.hpp"

namespace rankstat {

class SegmentWatch {
 public:
  // `config` is read at each timer start, so a reloaded config applies from the next wait on.
  SegmentWatch(boost::asio::io_context& io, const Config& config, SegmentRegistry& registry,
               SelfMetrics& self);

  void start();
  // Cancels every timer and watch; no handler touches the registry afterwards.
  void stop();

  void scan_now();
  // Every drain of all rings (timer, scrape, API) goes through here, so the pacer sees each fill.
  void drain_rings(std::uint64_t now_ns, bool from_timer);
  void set_poll_bounds(std::chrono::microseconds fastest, std::chrono::microseconds slowest);

 private:
  void watch_exits();
  void check_liveness_now();
  void start_poll();
  // Calls `tick` every `period` until stop(); `period` is read at each wait, so a reload applies.
  void repeat(boost::asio::steady_timer& timer, const std::chrono::milliseconds& period,
              void (SegmentWatch::*tick)());
  void start_inotify();
  void wait_inotify();

  boost::asio::io_context& io_;
  const Config& config_;
  SegmentRegistry& registry_;
  SelfMetrics& self_;
  PollPacer pacer_;
  boost::asio::steady_timer poll_timer_{io_};
  boost::asio::steady_timer liveness_timer_{io_};
  boost::asio::steady_timer scan_timer_{io_};
  std::optional<boost::asio::posix::stream_descriptor> inotify_;
  std::array<char, 4096> inotify_buffer_{};
  bool rescan_pending_ = false;
  bool stopped_ = false;
  // Exit notification per live writer process, keyed by (segment name, generation).
  std::map<std::pair<std::string, std::uint64_t>, std::unique_ptr<boost::asio::posix::stream_descriptor>>
      exit_watches_;
};

}  // namespace rankstat
