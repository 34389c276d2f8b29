#include "segment_watch.hpp"

#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "rankstat/shmproto/process.hpp"

namespace rankstat {

namespace asio = boost::asio;

namespace {

// A pidfd for `pid` that is known to refer to the process that started at `start_ticks`, or -1.
int open_verified_pidfd(std::uint32_t pid, std::uint64_t start_ticks) {
#ifdef SYS_pidfd_open
  const auto fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (fd < 0) return -1;
  // The pid may have been reused between the segment's creation and now: only a pidfd opened while
  // the start time still matches watches the right process.
  if (shm::process_start_ticks(pid) != start_ticks) {
    ::close(fd);
    return -1;
  }
  return fd;
#else
  (void)pid;
  (void)start_ticks;
  return -1;
#endif
}

}  // namespace

SegmentWatch::SegmentWatch(asio::io_context& io, const Config& config, SegmentRegistry& registry,
                           SelfMetrics& self)
    : io_(io),
      config_(config),
      registry_(registry),
      self_(self),
      pacer_(config.poll_interval, config.poll_interval_max) {}

void SegmentWatch::start() {
  start_poll();
  repeat(liveness_timer_, config_.liveness_interval, &SegmentWatch::check_liveness_now);
  repeat(scan_timer_, config_.scan_interval, &SegmentWatch::scan_now);
  start_inotify();
}

void SegmentWatch::stop() {
  stopped_ = true;
  poll_timer_.cancel();
  liveness_timer_.cancel();
  scan_timer_.cancel();
  if (inotify_) inotify_->close();
  exit_watches_.clear();
}

void SegmentWatch::set_poll_bounds(std::chrono::microseconds fastest, std::chrono::microseconds slowest) {
  pacer_.set_bounds(fastest, slowest);
}

void SegmentWatch::watch_exits() {
  for (const RankSegment* s : registry_.pid_watchable()) {
    auto key = std::make_pair(s->name(), s->identity().generation);
    if (exit_watches_.count(key) != 0) continue;
    const int fd = open_verified_pidfd(s->identity().pid, s->identity().pid_start_ticks);
    if (fd < 0) {
      check_liveness_now();
      continue;
    }
    auto watch = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
    watch->async_wait(asio::posix::stream_descriptor::wait_read,
                      [this, key](const boost::system::error_code&) {
                        if (stopped_) return;
                        // On an error too: without the watch, the /proc check takes over.
                        registry_.set_exit_watched(key.first, key.second, false);
                        exit_watches_.erase(key);
                        check_liveness_now();
                      });
    registry_.set_exit_watched(key.first, key.second, true);
    exit_watches_.emplace(std::move(key), std::move(watch));
  }
}

void SegmentWatch::check_liveness_now() {
  const std::uint64_t now = shm::monotonic_ns();
  registry_.check_liveness(now, config_.stall_after);
  registry_.retire_expired(now);
}

void SegmentWatch::scan_now() {
  if (registry_.scan(shm::monotonic_ns()) > 0 && !stopped_) {
    pacer_.hurry();
    start_poll();  // replaces the pending, possibly slow, wait
  }
  watch_exits();
}

void SegmentWatch::drain_rings(std::uint64_t now_ns, bool from_timer) {
  // rankstat_records_drained_total is the registry's count, which includes the last drain of a
  // generation that died or closed.
  const DrainPass pass = registry_.drain_all(now_ns);
  pacer_.observe(now_ns, pass.fullest_fill, pass.drops, from_timer);
}

void SegmentWatch::start_poll() {
  const auto interval = pacer_.interval();
  self_.set_poll_interval(std::chrono::duration<double>(interval).count());
  poll_timer_.expires_after(interval);
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    drain_rings(shm::monotonic_ns(), true);
    start_poll();
  });
}

void SegmentWatch::repeat(asio::steady_timer& timer, const std::chrono::milliseconds& period,
                          void (SegmentWatch::*tick)()) {
  timer.expires_after(period);
  timer.async_wait([this, &timer, &period, tick](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    (this->*tick)();
    repeat(timer, period, tick);
  });
}

void SegmentWatch::start_inotify() {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    spdlog::warn("inotify unavailable ({}); relying on the {} ms rescan", shm::errno_text(errno),
                 config_.scan_interval.count());
    return;
  }
  if (inotify_add_watch(fd, config_.shm_dir.c_str(), IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_CLOSE_WRITE) <
      0) {
    spdlog::warn("cannot watch {} ({}); relying on the periodic rescan", config_.shm_dir,
                 shm::errno_text(errno));
    ::close(fd);
    return;
  }
  inotify_.emplace(io_, fd);
  wait_inotify();
}

void SegmentWatch::wait_inotify() {
  inotify_->async_read_some(asio::buffer(inotify_buffer_),
                            [this](const boost::system::error_code& ec, std::size_t) {
                              if (ec || stopped_) return;
                              // The events are only a hint that the directory changed: coalesce a burst into
                              // one scan.
                              if (!rescan_pending_) {
                                rescan_pending_ = true;
                                asio::post(io_, [this] {
                                  rescan_pending_ = false;
                                  if (!stopped_) scan_now();
                                });
                              }
                              wait_inotify();
                            });
}

}  // namespace rankstat
