// A token bucket for log lines about hostile or broken input (rejected and quarantined segments).
//
// Each fault is already logged once per segment generation and reason; this bounds the total as well,
// so a local user creating thousands of bad files cannot flood the journal: at most `burst` lines,
// then one line per `refill_ns`, and the number of suppressed lines is counted and reported with the
// next line that is let through. Single-threaded (the daemon's io thread).
#pragma once

#include <cstdint>

namespace rankstat {

class LogLimiter {
 public:
  LogLimiter(std::uint32_t burst, std::uint64_t refill_ns)
      : burst_(burst), tokens_(burst), refill_ns_(refill_ns) {}

  // True if a line may be written now. When it returns true, suppressed_since_last() tells how many
  // lines were swallowed since the previous line that got through.
  bool allow(std::uint64_t now_ns) {
    if (last_refill_ns_ == 0) last_refill_ns_ = now_ns;
    if (now_ns > last_refill_ns_ && refill_ns_ != 0) {
      const std::uint64_t earned = (now_ns - last_refill_ns_) / refill_ns_;
      if (earned != 0) {
        tokens_ = tokens_ + earned >= burst_ ? burst_ : static_cast<std::uint32_t>(tokens_ + earned);
        last_refill_ns_ += earned * refill_ns_;
      }
    }
    if (tokens_ == 0) {
      ++pending_suppressed_;
      ++suppressed_total_;
      return false;
    }
    --tokens_;
    suppressed_since_last_ = pending_suppressed_;
    pending_suppressed_ = 0;
    return true;
  }

  std::uint64_t suppressed_since_last() const { return suppressed_since_last_; }
  std::uint64_t suppressed_total() const { return suppressed_total_; }

 private:
  std::uint32_t burst_;
  std::uint32_t tokens_;
  std::uint64_t refill_ns_;
  std::uint64_t last_refill_ns_ = 0;
  std::uint64_t pending_suppressed_ = 0;
  std::uint64_t suppressed_since_last_ = 0;
  std::uint64_t suppressed_total_ = 0;
};

}  // namespace rankstat
