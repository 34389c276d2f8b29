// The time integrals of one segment generation (gauge_integral.hpp): which of its gauges are integrated,
// their tracks, the checkpoints a previous daemon left for them, and the gauge updates waiting for their
// series' descriptor. RankSegment owns one and feeds it every drained report. io thread only.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gauge_integral.hpp"
#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

// One series of the cumulative block, validated, with its value as of the last refresh.
struct SeriesState {
  shm::SeriesInfo info;
  shm::SeriesValue value;
};

// A gauge of this generation integrated over time (gauge_integral.hpp): a typed snapshot field or a
// series declared through the metric classes.
struct IntegratedGauge {
  std::string family;             // the gauge's family (sglang:num_queue_reqs)
  const shm::ScalarField* field;  // the snapshot field, or nullptr for a series
  std::uint32_t series_position;  // index in RankSegment::series() for a series
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

class RankIntegrals {
 public:
  // Off until start().
  bool enabled() const { return settings_ != nullptr; }
  // Starts integrating the gauges `settings` names (it must outlive this object), continuing from a
  // previous daemon's checkpoints (by IntegratedGauge::checkpoint_key): the snapshot fields now (only
  // when `snapshot_exported`), the series as track_series() is given them. `descriptors` series
  // descriptors have been read so far. False (and off) when `settings` integrates nothing.
  bool start(const IntegralSettings* settings, bool snapshot_exported,
             std::map<std::string, IntegralCheckpoint> checkpoints, std::uint32_t descriptors);
  // `descriptors` series descriptors have now been read.
  void cover_descriptors(std::uint32_t descriptors) {
    if (enabled()) series_integral_.resize(descriptors, -1);
  }
  // Gives `series` (at `position` in the segment's series, descriptor `descriptor`) a track if its
  // family is integrated.
  void track_series(const SeriesState& series, std::size_t position, std::uint32_t descriptor);

  // A drained scheduler snapshot: each integrated field it carries.
  void observe_snapshot(const shm::SchedulerSnapshot& snapshot, std::uint64_t timestamp_ns) {
    for (const auto& [field, track] : snapshot_fields_) {
      if (!shm::field_present(snapshot, *field)) continue;
      note_observation(track, timestamp_ns, shm::read_scalar(snapshot, *field).as_double());
    }
  }
  // A drained gauge update record of descriptor `series_index`. One whose descriptor has not been read
  // yet (published between the descriptor scan and the drain) waits for it (has_pending()).
  void observe_update(std::uint32_t series_index, std::uint64_t timestamp_ns, double value) {
    if (!enabled()) return;
    if (series_index < series_integral_.size()) {
      const std::int32_t at = series_integral_[series_index];
      if (at >= 0) note_observation(static_cast<std::size_t>(at), timestamp_ns, value);
    } else if (pending_updates_.size() < kMaxPendingUpdates) {
      pending_updates_.push_back({series_index, timestamp_ns, value});
    }
  }
  bool has_pending() const { return !pending_updates_.empty(); }
  // After the descriptors were read again: integrates the waiting updates in their order.
  void apply_pending();

  // Holds every gauge's last value up to `heartbeat_ns`, and starts a series that no drained record has
  // set from its value in `series` (the cumulative block's).
  void settle(std::uint64_t heartbeat_ns, const std::vector<SeriesState>& series);
  const std::vector<IntegratedGauge>& gauges() const { return gauges_; }

 private:
  void add(std::string family, const shm::ScalarField* field, std::uint32_t series_position,
           std::string checkpoint_key);
  // Every integrated gauge of every drained report comes here. An unchanged value changes nothing
  // (GaugeTrack::observe would ignore it too); most fields of most reports are unchanged, and this check
  // reads one contiguous array instead of each gauge's track.
  void note_observation(std::size_t track, std::uint64_t timestamp_ns, double value) {
    if (last_observed_[track] == value) return;
    last_observed_[track] = value;
    gauges_[track].track.observe(timestamp_ns, value, settings_->peak_window_ns);
  }

  const IntegralSettings* settings_ = nullptr;
  std::vector<IntegratedGauge> gauges_;
  // The snapshot fields integrated, each with its index in gauges_ (looked at on every report).
  std::vector<std::pair<const shm::ScalarField*, std::size_t>> snapshot_fields_;
  std::vector<std::int32_t> series_integral_;  // per descriptor index: index in gauges_ or -1
  std::map<std::string, IntegralCheckpoint> unclaimed_checkpoints_;
  std::vector<double> last_observed_;  // per gauges_ entry: the value last logged (NaN: none yet)
  struct PendingUpdate {
    std::uint32_t series_index;
    std::uint64_t timestamp_ns;
    double value;
  };
  std::vector<PendingUpdate> pending_updates_;
  static constexpr std::size_t kMaxPendingUpdates = 65536;
};

}  // namespace rankstat
