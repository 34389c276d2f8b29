// The daemon's view of one segment generation: its mapping, ring consumer, latest scheduler snapshot,
// cumulative series and liveness. Owned and used only by the daemon's io thread (not thread-safe).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "engine_rules.hpp"
#include "rank_integrals.hpp"
#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/liveness.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

// The liveness states and rule are the contract's (shmproto/liveness.hpp), shared with rankstat --direct.
using shm::is_live;
using shm::kRankStateCount;
using shm::rank_state_name;
using shm::RankState;

struct SchedulerView {
  bool present = false;
  shm::SchedulerSnapshot fixed{};
  std::vector<shm::PriorityCount> priorities;
  std::uint64_t timestamp_ns = 0;
  std::uint64_t sequence = 0;
};

// Why a segment's memory or ring is no longer read. SegmentRegistry counts and logs each once per
// generation; segment_fault_name() is its name in the log line and the quarantine counter's reason label.
enum class SegmentFault : std::uint8_t {
  kNone,
  kTruncated,   // the file shrank below the mapping (found by check_file_size)
  kBusError,    // a read of the mapping raised SIGBUS
  kRingIndex,   // the ring's head/tail are inconsistent
  kRingRecord,  // a record length or padding that cannot be right
};
std::string_view segment_fault_name(SegmentFault fault);  // "truncated", "bus_error", ...; "" for kNone

// The first memory fault and the first ring fault of a generation, each reported once.
class FaultLatch {
 public:
  SegmentFault memory() const { return memory_; }
  SegmentFault ring() const { return ring_; }
  void set_memory(SegmentFault fault) { memory_ = fault; }
  void set_ring(SegmentFault fault) { ring_ = fault; }
  // True the first time it is called after the fault appeared.
  bool take_unreported_memory() { return take(memory_, memory_reported_); }
  bool take_unreported_ring() { return take(ring_, ring_reported_); }

 private:
  static bool take(SegmentFault fault, bool& reported) {
    if (fault == SegmentFault::kNone || reported) return false;
    reported = true;
    return true;
  }
  SegmentFault memory_ = SegmentFault::kNone;
  SegmentFault ring_ = SegmentFault::kNone;
  bool memory_reported_ = false;
  bool ring_reported_ = false;
};

// Records accepted by a writer per second, over windows of a few seconds.
class RecordRate {
 public:
  // `written`: the writer's records_written at `now_ns`.
  void start(std::uint64_t now_ns, std::uint64_t written);
  // Whether a window has passed, so update() should be given a fresh `written`.
  bool due(std::uint64_t now_ns) const { return now_ns - window_start_ns_ >= kWindowNs; }
  void update(std::uint64_t now_ns, std::uint64_t written);
  double per_second() const { return per_second_; }

 private:
  static constexpr std::uint64_t kWindowNs = 2'000'000'000;
  std::uint64_t window_start_ns_ = 0;
  std::uint64_t window_start_records_ = 0;
  double per_second_ = 0;
};

// What the drains of one generation found, as plain counters.
struct DrainStats {
  std::uint64_t records = 0;  // applied, including the last drain of a generation that died or closed
  std::uint64_t sequence_gaps = 0;
  std::uint64_t malformed = 0;
  std::uint64_t gauge_updates = 0;  // one per set of a gauge declared through the metric classes
  // Of the last drain(): the fraction of the ring's bytes it consumed, and whether the writer dropped a
  // record (ring full) since the drain before (what the poll pacer steers by).
  double last_fill = 0;
  bool dropped_before_last = false;
};

class RankSegment {
 public:
  RankSegment(std::string name, std::string path, shm::OpenedSegment opened, std::uint64_t now_ns);

  const std::string& name() const { return name_; }  // file name, rankstat.<instance>.<role>.<rank-key>
  const std::string& id() const { return id_; }      // <instance>.<role>.<rank-key>
  const std::string& path() const { return path_; }
  const shm::SegmentHeader& identity() const { return opened_.identity; }
  std::uint64_t inode() const { return opened_.inode; }
  std::uint64_t device() const { return opened_.device; }
  int fd() const { return opened_.file.fd(); }
  std::uint64_t opened_ns() const { return opened_ns_; }

  // Drains committed records. Returns false if the ring is corrupt (the segment is then quarantined:
  // its last good values stay, nothing more is read from the ring) or its memory is gone (below).
  bool drain(std::uint64_t now_ns);
  // Picks up newly registered series and reads every series' current value.
  void refresh_cumulative();

  // Starts integrating the gauges `settings` names (it must outlive this object), continuing from a
  // previous daemon's checkpoints (by IntegratedGauge::checkpoint_key). Snapshot fields only when
  // `snapshot_exported` (the engine-level rule: other ranks' snapshot gauges are never served). Call
  // once, before the first drain.
  void set_integrals(const IntegralSettings* settings, bool snapshot_exported,
                     std::map<std::string, IntegralCheckpoint> checkpoints);
  // Before a scrape (and before integrated() is read): applies the logged reports, holds every
  // integrated gauge's last value up to the writer's heartbeat (its last sign of life, never later than
  // `now_ns`: a garbage heartbeat cannot run a counter ahead), and starts a series that no drained record
  // has set (its value was set while no daemon drained, or by a record the previous daemon consumed)
  // from the cumulative block's value.
  void settle_integrals(std::uint64_t now_ns);
  const std::vector<IntegratedGauge>& integrated() const { return integrals_.gauges(); }

  // Producer-group fields as of now; once the memory is gone, the last ones read.
  shm::ProducerState producer() const;

  // Every read of the mapping runs under a shm::BusGuard (rankstat/shmproto/bus_guard.hpp). When the file
  // shrinks below the mapping (kTruncated, found by check_file_size) or a read raises SIGBUS (kBusError),
  // the segment's memory is never read again: its last good values, totals and producer state stay exported.
  // kNone while the memory is readable.
  SegmentFault memory_fault() const { return faults_.memory(); }
  // fstat of the descriptor; false (and memory_fault() kTruncated) if the file is now smaller than the
  // mapping. A system call: for the liveness pass, never the drain path.
  bool check_file_size();
  // Why the ring was quarantined (kRingIndex or kRingRecord), or kNone.
  SegmentFault ring_fault() const { return faults_.ring(); }
  // True the first time it is called after a memory or ring fault appeared (for logging and counting
  // each fault of a generation once).
  bool take_unreported_memory_fault() const { return faults_.take_unreported_memory(); }
  bool take_unreported_ring_fault() const { return faults_.take_unreported_ring(); }
  const SchedulerView& scheduler() const { return scheduler_; }
  const std::vector<SeriesState>& series() const { return series_; }
  const std::set<SeenPriority>& seen_priorities() const { return seen_priorities_; }

  // Set while the daemon holds a pidfd, verified against the writer's start time, that reports the
  // writer's exit: the liveness pass then needs no /proc read to know the process is alive and the same.
  bool exit_watched() const { return exit_watched_; }
  void set_exit_watched(bool watched) { exit_watched_ = watched; }

  RankState state() const { return state_; }
  std::uint64_t state_since_ns() const { return state_since_ns_; }
  void set_state(RankState state, std::uint64_t now_ns);
  // The writer's heartbeat when the state last changed: a heartbeat newer than that in a DEAD
  // generation means someone still writes it (a writer in another pid namespace), and its file is
  // then never unlinked.
  std::uint64_t heartbeat_at_state_change() const { return heartbeat_at_state_change_; }

  bool ring_corrupt() const { return faults_.ring() != SegmentFault::kNone; }
  // Series of a family that another generation declares with another type, mode or buckets, and that
  // lost (SegmentRegistry::resolve_declarations): left out of the scrape, the retired totals and the
  // checkpoints; this generation's other families are served as usual. By position in series().
  bool series_left_out(std::size_t position) const {
    return position < left_out_.size() && left_out_[position] != 0;
  }
  std::size_t series_left_out_count() const { return left_out_count_; }
  void set_series_left_out(std::vector<std::uint8_t> left_out) {
    left_out_ = std::move(left_out);
    left_out_count_ = static_cast<std::size_t>(std::count(left_out_.begin(), left_out_.end(), 1));
  }
  // Set once the generation's cumulative series are in the retired totals (SegmentRegistry::fold, when
  // it can count no more): the scrape then takes only its gauges from it, until it is retired.
  bool folded() const { return folded_; }
  void mark_folded() { folded_ = true; }
  const DrainStats& drained() const { return drained_; }
  std::uint64_t invalid_series() const { return invalid_series_; }
  // Registrations the writer refused (no room in the shm directory, block full, invalid), as its
  // cumulative header counts them at the last refresh.
  const shm::CumulativeReader::Refused& refused_registrations() const { return refused_; }
  // At most `limit` series are read from this generation; descriptors beyond it are skipped and counted
  // (series_over_limit) so one rank cannot make the daemon allocate without bound.
  void set_max_series(std::uint32_t limit) { max_series_ = limit; }
  std::uint64_t series_over_limit() const { return series_over_limit_; }
  double ring_fill_ratio() const;
  // Records accepted by the writer per second, over the last few seconds.
  double records_per_second() const { return rate_.per_second(); }
  void update_rate(std::uint64_t now_ns);
  // SGLang's idle rule: gen_throughput is decode-owned and falls to 0 once no decode report has come
  // for `stale_after_ns` (a rank with no traffic must not show its last burst forever).
  void apply_staleness(std::uint64_t now_ns, std::uint64_t stale_after_ns);

 private:
  void apply_record(const shm::RecordHeader& header, std::span<const std::uint8_t> payload);
  void recover_consumed_snapshot();
  // refresh_cumulative without anything else; returns false if the memory is gone.
  bool read_cumulative();
  template <typename Read>
  bool read_guarded(Read&& read) const;  // false if the memory is (or just went) missing

  std::string name_;
  std::string id_;
  std::string path_;
  shm::OpenedSegment opened_;
  shm::RingReader ring_;
  shm::CumulativeReader cumulative_;
  std::uint64_t opened_ns_ = 0;
  SchedulerView scheduler_;
  std::vector<SeriesState> series_;
  std::vector<std::uint32_t> series_descriptor_index_;  // per series_ entry
  std::uint32_t descriptors_seen_ = 0;
  std::set<SeenPriority> seen_priorities_;
  // Report-kind ownership: a decode report does not reset the prefill-owned cache_hit_rate, a prefill
  // report does not reset the decode-owned gen_throughput.
  shm::ReportOwnership ownership_;  // SGLang's report-kind rule, over every snapshot in order
  bool exit_watched_ = false;
  std::uint64_t dropped_seen_ = 0;
  RankState state_ = RankState::kLive;
  std::uint64_t state_since_ns_ = 0;
  std::uint64_t heartbeat_at_state_change_ = 0;
  // Written by const readers (producer()) when they find the memory gone.
  mutable FaultLatch faults_;
  mutable shm::ProducerState last_producer_{};
  std::vector<shm::SeriesValue> staging_;  // refresh_cumulative reads here first, commits if no fault
  std::vector<std::uint8_t> left_out_;     // by series position; 1: left out
  std::size_t left_out_count_ = 0;
  bool folded_ = false;
  DrainStats drained_;
  std::uint64_t invalid_series_ = 0;
  shm::CumulativeReader::Refused refused_;
  std::uint32_t max_series_ = 100000;
  std::uint64_t series_over_limit_ = 0;
  RankIntegrals integrals_;
  RecordRate rate_;
};

}  // namespace rankstat
