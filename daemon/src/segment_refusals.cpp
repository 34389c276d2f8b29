// Segment refusals: the trust verdict on a segment file (shmproto's rule, trust.hpp), and what the
// registry does with a file or generation it will not read: a refused file is remembered until it changes
// (or the trust settings do), a quarantined generation keeps its last good values; each refusal and fault
// is counted by reason (rankstat_segments_rejected_total and the quarantine counters) and logged through one
// rate limiter, as are resource errors (out of descriptors) that say nothing about the rank.
// Thread contract: the daemon's io thread only (set_trust included: applied between polls).
#include "segment_registry.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include "rankstat/shmproto/process.hpp"

namespace rankstat {

namespace {

std::int64_t ctime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
}

// Whether a line about a bad segment may be logged now (after saying how many were suppressed since the
// last one); if not, the line is counted in `suppressed_lines` instead. Refusals and quarantines share one
// limiter, so a directory full of bad files cannot flood the log.
bool may_log(LogLimiter& limiter, std::uint64_t& suppressed_lines, std::uint64_t now_ns) {
  if (!limiter.allow(now_ns)) {
    ++suppressed_lines;
    return false;
  }
  const std::uint64_t suppressed = limiter.suppressed_since_last();
  if (suppressed != 0) spdlog::warn("{} similar messages about bad segments were suppressed", suppressed);
  return true;
}

}  // namespace

void SegmentRegistry::set_trust(std::vector<std::uint32_t> allowed_uids, bool any_owner,
                                bool allow_world_writable,
                                std::map<std::string, std::vector<std::uint32_t>> instance_owners) {
  options_.trust.allowed_uids = std::move(allowed_uids);
  options_.trust.any_owner = any_owner;
  options_.trust.allow_world_writable = allow_world_writable;
  options_.trust.instance_owners = std::move(instance_owners);
  for (auto& [name, r] : rejected_) r.recheck = true;
}

bool SegmentRegistry::Rejected::same_file(const struct stat& st) const {
  return inode == st.st_ino && device == st.st_dev && mode == st.st_mode && uid == st.st_uid &&
         gid == st.st_gid && size == st.st_size && ctime_ns == rankstat::ctime_ns(st);
}

namespace {

// As logged; spelt as the reason label of rankstat_segments_rejected_total.
std::string_view rejection_name(Rejection rejection) {
  switch (rejection.kind) {
    case Rejection::Kind::kUntrusted:
      return shm::trust_refusal_name(rejection.untrusted);
    case Rejection::Kind::kHardLink:
      return "hard_link";
    case Rejection::Kind::kBusError:
      return "bus_error";
    case Rejection::Kind::kInvalid:
      break;
  }
  return shm::reject_reason_name(rejection.invalid);
}

}  // namespace

std::optional<shm::TrustRefusal> SegmentRegistry::distrust(const struct stat& st, const std::string& instance,
                                                           std::string& message) const {
  // The rule is shmproto's (trust.hpp), the one `rankstat --direct` applies too.
  return options_.trust.judge_file(st, instance, message);
}

void SegmentRegistry::reject(const std::string& name, const struct stat& st, Rejection reason,
                             const std::string& message, std::uint64_t now_ns) {
  Rejected& r = rejected_[name];
  const bool repeat = r.inode == st.st_ino && r.device == st.st_dev && r.reason == reason;
  r = Rejected{st.st_ino, st.st_dev, st.st_mode, st.st_uid, st.st_gid, st.st_size, ctime_ns(st), reason};
  if (repeat) return;  // counted and logged for this file and reason already
  switch (reason.kind) {
    case Rejection::Kind::kUntrusted:
      ++counters_.rejected_untrusted[static_cast<std::size_t>(reason.untrusted)];
      break;
    case Rejection::Kind::kHardLink:
      ++counters_.rejected_hard_link;
      break;
    case Rejection::Kind::kBusError:
      ++counters_.quarantined_bus_error;
      break;
    case Rejection::Kind::kInvalid:
      ++counters_.rejected_by_reason[static_cast<std::size_t>(reason.invalid)];
      break;
  }
  if (!may_log(log_limiter_, counters_.log_lines_suppressed, now_ns)) return;
  spdlog::warn("rejected segment {} ({}): {}", name, rejection_name(reason), message);
}

void SegmentRegistry::note_faults(const RankSegment& s, std::uint64_t now_ns) {
  SegmentFault fault = SegmentFault::kNone;
  if (s.take_unreported_memory_fault()) {
    fault = s.memory_fault();
  } else if (s.take_unreported_ring_fault()) {
    fault = s.ring_fault();
    ++counters_.corrupt_rings;
  } else {
    return;
  }
  const bool memory = fault == SegmentFault::kTruncated || fault == SegmentFault::kBusError;
  switch (fault) {
    case SegmentFault::kTruncated:
      ++counters_.quarantined_truncated;
      break;
    case SegmentFault::kBusError:
      ++counters_.quarantined_bus_error;
      break;
    case SegmentFault::kRingIndex:
      ++counters_.quarantined_ring_index;
      break;
    case SegmentFault::kNone:
    case SegmentFault::kRingRecord:
      ++counters_.quarantined_ring_record;
      break;
  }
  if (!may_log(log_limiter_, counters_.log_lines_suppressed, now_ns)) return;
  if (memory) {
    spdlog::error(
        "segment {} (pid {}) quarantined ({}): its file shrank below its mapping; last good values "
        "kept, its memory is no longer read",
        s.name(), s.identity().pid, segment_fault_name(fault));
  } else {
    spdlog::error(
        "segment {} (pid {}) quarantined ({}): ring indices or record lengths are inconsistent; last good "
        "values kept, ring no longer read",
        s.name(), s.identity().pid, segment_fault_name(fault));
  }
}

void SegmentRegistry::note_resource_error(int error, const std::string& what, std::uint64_t now_ns) {
  if (error == EMFILE || error == ENFILE) ++counters_.fd_exhaustion;
  if (!log_limiter_.allow(now_ns)) {
    ++counters_.log_lines_suppressed;
    return;
  }
  spdlog::warn("{}: {}; not a verdict on the rank, retried later (raise LimitNOFILE / ulimit -n)", what,
               shm::errno_text(error));
}

}  // namespace rankstat
