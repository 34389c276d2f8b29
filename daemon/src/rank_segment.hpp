// The daemon's view of one segment generation: its mapping, ring consumer, latest scheduler snapshot,
// cumulative series and liveness. Owned and used only by the daemon's io thread (not thread-safe).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "gauge_integral.hpp"
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

// One series of the cumulative block, validated, with its value as of the last refresh.
struct SeriesState {
  shm::SeriesInfo info;
  shm::SeriesValue value;
};

// A priority value that has appeared in a queue breakdown; SGLang keeps exporting it (as 0 when
// absent) once seen.
struct SeenPriority {
  std::uint8_t queue;
  std::int32_t priority;
  bool is_none;
  auto operator<=>(const SeenPriority&) const = default;
};

// A gauge of this generation integrated over time (gauge_integral.hpp): a typed snapshot field or a
// series declared through the metric classes.
struct IntegratedGauge {
  std::string family;             // the gauge's family (sglang:num_queue_reqs)
  const shm::ScalarField* field;  // the snapshot field, or nullptr for a series
  std::uint32_t series_position;  // index in series() for a series
  std::string checkpoint_key;     // "field:<name>" or "series:<descriptor index>": stable per generation
  std::string integral_name;      // the exported families (gauge_integral.hpp), named once
  std::string window_max_name;
  std::string window_min_name;
  GaugeTrack track;
};

// What a previous daemon exported for one integrated gauge of a generation (RetiredTotals keeps it).
struct IntegralCheckpoint {
  double integral = 0;
  double value = 0;
  std::uint64_t until_ns = 0;
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
  const std::vector<IntegratedGauge>& integrated() const { return integrated_; }

  // Producer-group fields as of now; once the memory is gone, the last ones read.
  shm::ProducerState producer() const;

  // Every read of the mapping runs under a shm::BusGuard (rankstat/shmproto/bus_guard.hpp). When the file
  // shrinks below the mapping ("truncated", found by check_file_size) or a read raises SIGBUS ("bus_error"),
  // the segment's memory is never read again: its last good values, totals and producer state stay exported.
  // Empty while the memory is readable.
  std::string_view memory_fault() const { return memory_fault_; }
  // fstat of the descriptor; false (and memory_fault() "truncated") if the file is now smaller than the
  // mapping. A system call: for the liveness pass, never the drain path.
  bool check_file_size();
  // Why the ring was quarantined: "ring_index" (head/tail inconsistent), "ring_record" (a record length
  // or padding that cannot be right), or empty.
  std::string_view ring_fault() const;
  // True the first time it is called after a memory or ring fault appeared (for logging and counting
  // each fault of a generation once).
  bool take_unreported_memory_fault() const;
  bool take_unreported_ring_fault() const;
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

  bool ring_corrupt() const { return ring_corrupt_; }
  // Set when one of the segment's families disagrees with the type or mode other ranks gave it: the
  // whole segment is then left out of the exposition (and counted), never merged half-way.
  bool schema_conflict() const { return schema_conflict_; }
  void mark_schema_conflict() { schema_conflict_ = true; }
  std::uint64_t records_drained() const { return records_drained_; }
  // Of the last drain(): the fraction of the ring's bytes it consumed, and whether the writer dropped a
  // record (ring full) since the drain before (what the poll pacer steers by).
  double last_drain_fill() const { return last_drain_fill_; }
  bool dropped_before_last_drain() const { return dropped_before_last_drain_; }
  std::uint64_t sequence_gaps() const { return sequence_gaps_; }
  std::uint64_t malformed_records() const { return malformed_records_; }
  // Gauge update records drained (one per set of a gauge declared through the metric classes).
  std::uint64_t gauge_updates() const { return gauge_updates_; }
  std::uint64_t invalid_series() const { return invalid_series_; }
  // At most `limit` series are read from this generation; descriptors beyond it are skipped and counted
  // (series_over_limit) so one rank cannot make the daemon allocate without bound.
  void set_max_series(std::uint32_t limit) { max_series_ = limit; }
  std::uint64_t series_over_limit() const { return series_over_limit_; }
  double ring_fill_ratio() const;
  // Records accepted by the writer per second, over the last few seconds.
  double records_per_second() const { return records_per_second_; }
  void update_rate(std::uint64_t now_ns);
  // SGLang's idle rule: gen_throughput is decode-owned and falls to 0 once no decode report has come
  // for `stale_after_ns` (a rank with no traffic must not show its last burst forever).
  void apply_staleness(std::uint64_t now_ns, std::uint64_t stale_after_ns);

 private:
  void apply_record(const shm::RecordHeader& header, std::span<const std::uint8_t> payload);
  void recover_consumed_snapshot();
  // refresh_cumulative without anything else; returns false if the memory is gone.
  bool read_cumulative();
  void add_integrated(std::string family, const shm::ScalarField* field, std::uint32_t series_position,
                      std::string checkpoint_key);
  void observe_snapshot_integrals();
  // Every integrated gauge of every drained report comes here. An unchanged value changes nothing
  // (GaugeTrack::observe would ignore it too); most fields of most reports are unchanged, and this check
  // reads one contiguous array instead of each gauge's track.
  void note_observation(std::size_t track, std::uint64_t timestamp_ns, double value) {
    if (last_observed_[track] == value) return;
    last_observed_[track] = value;
    integrated_[track].track.observe(timestamp_ns, value, integrals_->peak_window_ns);
  }
  // Gives `series` (at `position` in series_, descriptor `descriptor`) a track if its family is integrated.
  void track_series(const SeriesState& series, std::size_t position, std::uint32_t descriptor);
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
  double last_drain_fill_ = 0;
  bool dropped_before_last_drain_ = false;
  std::uint64_t dropped_seen_ = 0;
  RankState state_ = RankState::kLive;
  std::uint64_t state_since_ns_ = 0;
  std::uint64_t heartbeat_at_state_change_ = 0;
  bool ring_corrupt_ = false;
  shm::DrainStatus ring_status_ = shm::DrainStatus::kOk;
  mutable bool ring_fault_reported_ = false;
  // Written by const readers (producer()) when they find the memory gone.
  mutable std::string_view memory_fault_;
  mutable bool memory_fault_reported_ = false;
  mutable shm::ProducerState last_producer_{};
  std::vector<shm::SeriesValue> staging_;  // refresh_cumulative reads here first, commits if no fault
  bool schema_conflict_ = false;
  std::uint64_t records_drained_ = 0;
  std::uint64_t sequence_gaps_ = 0;
  std::uint64_t malformed_records_ = 0;
  std::uint64_t gauge_updates_ = 0;
  std::uint64_t invalid_series_ = 0;
  std::uint32_t max_series_ = 100000;
  std::uint64_t series_over_limit_ = 0;
  const IntegralSettings* integrals_ = nullptr;
  std::vector<IntegratedGauge> integrated_;
  // The snapshot fields integrated, each with its index in integrated_ (looked at on every report).
  std::vector<std::pair<const shm::ScalarField*, std::size_t>> snapshot_integrals_;
  std::vector<std::int32_t> series_integral_;  // per descriptor index: index in integrated_ or -1
  std::map<std::string, IntegralCheckpoint> unclaimed_checkpoints_;
  std::vector<double> last_observed_;  // per integrated_ entry: the value last logged (NaN: none yet)
  // Gauge updates of series whose descriptor this daemon had not read yet when the record was drained
  // (published between the descriptor scan and the drain): applied, in order, once it is read.
  struct PendingUpdate {
    std::uint32_t series_index;
    std::uint64_t timestamp_ns;
    double value;
  };
  std::vector<PendingUpdate> pending_updates_;
  static constexpr std::size_t kMaxPendingUpdates = 65536;
  std::uint64_t rate_window_start_ns_ = 0;
  std::uint64_t rate_window_start_records_ = 0;
  double records_per_second_ = 0;
};

}  // namespace rankstat
