#include "rank_segment.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

#include "rankstat/shmproto/bus_guard.hpp"

namespace rankstat {

RankSegment::RankSegment(std::string name, std::string path, shm::OpenedSegment opened, std::uint64_t now_ns)
    : name_(std::move(name)), path_(std::move(path)), opened_(std::move(opened)), opened_ns_(now_ns) {
  id_ = name_.substr(shm::kSegmentPrefix.size());
  shm::install_bus_guard();
  const shm::SegmentHeader& h = opened_.identity;
  cumulative_ = shm::CumulativeReader(opened_.cumulative(), opened_.cumulative_geometry);
  scheduler_.priorities.reserve(shm::kMaxPriorityCounts);
  state_since_ns_ = now_ns;
  rate_window_start_ns_ = now_ns;
  read_guarded([&] {
    // The RingReader holds a record-sized scratch buffer; keep it in place inside this object, which
    // the daemon never moves (it is held by unique_ptr).
    ring_ = shm::RingReader(opened_.file.header(), opened_.ring(), h.ring_bytes, /*publish_head=*/true);
    shm::shared(opened_.file.header()->consumer_pid)
        .store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
  });
  if (memory_fault_.empty()) recover_consumed_snapshot();
  rate_window_start_records_ = producer().records_written;
}

// Runs `read` with the mapping guarded against SIGBUS. Returns false without reading if the memory
// was already found missing, and false (recording "bus_error") if it went missing during `read`.
template <typename Read>
bool RankSegment::read_guarded(Read&& read) const {
  if (!memory_fault_.empty()) return false;
  if (shm::run_bus_guarded(opened_.file.bytes(), opened_.file.size(), std::forward<Read>(read))) return true;
  memory_fault_ = "bus_error";
  return false;
}

shm::ProducerState RankSegment::producer() const {
  shm::ProducerState now;
  if (read_guarded([&] { now = shm::read_producer_state(*opened_.file.header()); })) last_producer_ = now;
  return last_producer_;
}

bool RankSegment::check_file_size() {
  if (!memory_fault_.empty()) return false;
  struct stat st {};
  if (fstat(opened_.file.fd(), &st) != 0) return true;  // cannot tell; the guard still protects reads
  if (static_cast<std::uint64_t>(st.st_size) >= opened_.file.size()) return true;
  memory_fault_ = "truncated";
  return false;
}

std::string_view RankSegment::ring_fault() const {
  switch (ring_status_) {
    case shm::DrainStatus::kOk:
      return {};
    case shm::DrainStatus::kCorruptIndex:
      return "ring_index";
    case shm::DrainStatus::kCorruptRecord:
      return "ring_record";
  }
  return "ring_record";
}

bool RankSegment::take_unreported_memory_fault() const {
  if (memory_fault_.empty() || memory_fault_reported_) return false;
  memory_fault_reported_ = true;
  return true;
}

bool RankSegment::take_unreported_ring_fault() const {
  if (!ring_corrupt_ || ring_fault_reported_) return false;
  ring_fault_reported_ = true;
  return true;
}

void RankSegment::recover_consumed_snapshot() {
  // A daemon that restarts finds the ring already drained up to `head` by its predecessor: the newest
  // snapshot would stay invisible until the rank's next report (30 s for an idle SGLang rank). Read it
  // back without consuming, if the writer has not overwritten it since.
  shm::SegmentHeader& live = *opened_.file.header();
  std::uint64_t position_plus_one = 0;
  if (!read_guarded([&] {
        position_plus_one =
            shm::shared(
                live.latest_record_position[static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot)])
                .load(std::memory_order_acquire);
      })) {
    return;
  }
  if (position_plus_one == 0 || position_plus_one - 1 >= ring_.head()) return;  // will be drained normally
  shm::RecordHeader header{};
  std::vector<std::uint8_t> payload(shm::kMaxRecordBytes);
  std::int64_t bytes = -1;
  const bool read = read_guarded([&] {
    bytes = shm::peek_latest_record(&live, opened_.ring(), opened_.identity.ring_bytes,
                                    shm::RecordType::kSchedulerSnapshot, header, payload);
  });
  if (read && bytes >= 0) {
    apply_record(header, std::span<const std::uint8_t>(payload.data(), static_cast<std::size_t>(bytes)));
  }
}

void RankSegment::set_state(RankState state, std::uint64_t now_ns) {
  if (state != state_) {
    state_ = state;
    state_since_ns_ = now_ns;
    heartbeat_at_state_change_ = producer().heartbeat_ns;
  }
}

bool RankSegment::drain(std::uint64_t now_ns) {
  if (ring_corrupt_ || !memory_fault_.empty()) return false;
  // Bound one pass so a flooded ring cannot starve the other segments or a scrape.
  constexpr std::uint64_t kMaxBytesPerPass = 256 * 1024;
  shm::DrainStats stats;
  std::uint64_t dropped = dropped_seen_;
  {
    shm::BusGuard guard(opened_.file.bytes(), opened_.file.size());
    // Each record is copied out before the callback runs, so a fault during that copy is seen here and
    // the torn copy (zeros where the pages vanished) is never applied; earlier records were whole.
    stats = ring_.drain(
        [&](const shm::RecordHeader& header, std::span<const std::uint8_t> payload) {
          if (!guard.faulted()) apply_record(header, payload);
        },
        kMaxBytesPerPass);
    shm::shared(opened_.file.header()->consumer_heartbeat_ns).store(now_ns, std::memory_order_relaxed);
    dropped = shm::shared(opened_.file.header()->dropped_records).load(std::memory_order_relaxed);
    if (guard.faulted()) {
      memory_fault_ = "bus_error";
      return false;
    }
  }
  records_drained_ += stats.records;
  sequence_gaps_ += stats.sequence_gaps;
  last_drain_fill_ = static_cast<double>(stats.bytes) / static_cast<double>(opened_.identity.ring_bytes);
  // Any change counts: the value comes from shared memory and may be garbage, which at worst makes the
  // daemon poll at its fastest.
  dropped_before_last_drain_ = dropped != dropped_seen_;
  dropped_seen_ = dropped;
  if (!pending_updates_.empty()) {
    // Gauge updates of series published after the last descriptor scan: read the descriptors, then
    // integrate the updates in their order.
    read_cumulative();
    for (const PendingUpdate& u : pending_updates_) {
      if (u.series_index < series_integral_.size() && series_integral_[u.series_index] >= 0) {
        note_observation(static_cast<std::size_t>(series_integral_[u.series_index]), u.timestamp_ns, u.value);
      }
    }
    pending_updates_.clear();
  }
  if (stats.status != shm::DrainStatus::kOk) {
    ring_corrupt_ = true;
    ring_status_ = stats.status;
    return false;
  }
  return true;
}

void RankSegment::apply_record(const shm::RecordHeader& header, std::span<const std::uint8_t> payload) {
  if (header.type == static_cast<std::uint16_t>(shm::RecordType::kSeriesUpdate)) {
    // A gauge value as it was set. The exported value comes from the cumulative block; these records
    // give the order and time of every value between two scrapes.
    shm::SeriesUpdateRecord update{};
    if (header.type_version < 1 || payload.size() < sizeof update) {
      ++malformed_records_;
      return;
    }
    std::memcpy(&update, payload.data(), sizeof update);
    ++gauge_updates_;
    if (integrals_ == nullptr) return;
    if (update.series_index < series_integral_.size()) {
      const std::int32_t at = series_integral_[update.series_index];
      if (at >= 0) note_observation(static_cast<std::size_t>(at), header.timestamp_ns, update.value);
    } else if (pending_updates_.size() < kMaxPendingUpdates) {
      pending_updates_.push_back({update.series_index, header.timestamp_ns, update.value});
    }
    return;
  }
  if (header.type != static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot))
    return;  // unknown: skip
  if (header.type_version < 1 || payload.size() < sizeof(shm::SchedulerSnapshot)) {
    ++malformed_records_;
    return;
  }
  // A newer minor may append fields after the ones this build knows: read the known prefix only.
  std::memcpy(&scheduler_.fixed, payload.data(), sizeof(shm::SchedulerSnapshot));
  const std::size_t room = (payload.size() - sizeof(shm::SchedulerSnapshot)) / sizeof(shm::PriorityCount);
  const std::size_t count =
      std::min<std::size_t>({scheduler_.fixed.priority_count, room, std::size_t{shm::kMaxPriorityCounts}});
  scheduler_.priorities.resize(count);
  if (count != 0) {
    std::memcpy(scheduler_.priorities.data(), payload.data() + sizeof(shm::SchedulerSnapshot),
                count * sizeof(shm::PriorityCount));
  }
  for (const shm::PriorityCount& entry : scheduler_.priorities) {
    if (entry.queue >= shm::kQueueIdCount) continue;
    const bool none = (entry.flags & shm::kPriorityIsNone) != 0;
    seen_priorities_.insert(SeenPriority{entry.queue, none ? 0 : entry.priority, none});
  }
  ownership_.apply(scheduler_.fixed, header.timestamp_ns);
  scheduler_.present = true;
  scheduler_.timestamp_ns = header.timestamp_ns;
  scheduler_.sequence = header.sequence;
  observe_snapshot_integrals();
}

void RankSegment::observe_snapshot_integrals() {
  if (integrals_ == nullptr || !scheduler_.present) return;
  for (const auto& [field, track] : snapshot_integrals_) {
    if (!shm::field_present(scheduler_.fixed, *field)) continue;
    note_observation(track, scheduler_.timestamp_ns, shm::read_scalar(scheduler_.fixed, *field).as_double());
  }
}

void RankSegment::add_integrated(std::string family, const shm::ScalarField* field,
                                 std::uint32_t series_position, std::string checkpoint_key) {
  IntegratedGauge gauge{std::move(family), field, series_position, std::move(checkpoint_key), {}, {}, {}, {}};
  gauge.integral_name = integral_family_name(gauge.family);
  gauge.window_max_name = window_max_family_name(gauge.family);
  gauge.window_min_name = window_min_family_name(gauge.family);
  if (auto it = unclaimed_checkpoints_.find(gauge.checkpoint_key); it != unclaimed_checkpoints_.end()) {
    gauge.track.restore(it->second.integral, it->second.value, it->second.until_ns);
    unclaimed_checkpoints_.erase(it);
  }
  integrated_.push_back(std::move(gauge));
  last_observed_.push_back(std::numeric_limits<double>::quiet_NaN());  // never equal: logged
}

void RankSegment::track_series(const SeriesState& series, std::size_t position, std::uint32_t descriptor) {
  if (series.info.kind != shm::SeriesKind::kGauge || !integrals_->wants(series.info.family)) return;
  if (descriptor < series_integral_.size())
    series_integral_[descriptor] = static_cast<std::int32_t>(integrated_.size());
  add_integrated(series.info.family, nullptr, static_cast<std::uint32_t>(position),
                 "series:" + std::to_string(descriptor));
}

void RankSegment::set_integrals(const IntegralSettings* settings, bool snapshot_exported,
                                std::map<std::string, IntegralCheckpoint> checkpoints) {
  if (settings == nullptr || !settings->enabled()) return;
  integrals_ = settings;
  unclaimed_checkpoints_ = std::move(checkpoints);
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    std::string family = std::string(shm::kSnapshotFamilyPrefix).append(field.name);
    if (snapshot_exported && field.exported != shm::FieldExport::kNotExported && settings->wants(family)) {
      snapshot_integrals_.emplace_back(&field, integrated_.size());
      add_integrated(std::move(family), &field, 0, std::string("field:").append(field.name));
    }
  }
  // Series read before now (at open): give them their tracks.
  series_integral_.assign(descriptors_seen_, -1);
  for (std::size_t position = 0; position < series_.size(); ++position)
    track_series(series_[position], position, series_descriptor_index_[position]);
  // The snapshot recovered at open (the newest one, which a previous daemon may have consumed) holds
  // from its own timestamp on.
  observe_snapshot_integrals();
}

void RankSegment::settle_integrals(std::uint64_t now_ns) {
  if (integrals_ == nullptr) return;
  const std::uint64_t heartbeat = std::min(producer().heartbeat_ns, now_ns);
  for (IntegratedGauge& g : integrated_) {
    if (g.field == nullptr && !g.track.has_value() && g.series_position < series_.size()) {
      const shm::SeriesValue& v = series_[g.series_position].value;
      if (v.set_ns != 0) g.track.observe(v.set_ns, v.value, integrals_->peak_window_ns);
    }
    g.track.hold_until(heartbeat);
  }
}

void RankSegment::refresh_cumulative() {
  read_cumulative();
}

bool RankSegment::read_cumulative() {
  // Two phases: read everything into staging, commit only if no read faulted. A SIGBUS mid-refresh
  // patches the vanished pages with zeros; committing those would make counters go backwards.
  std::vector<SeriesState> fresh;
  std::vector<std::uint32_t> fresh_indices;  // descriptor index of each
  std::uint64_t invalid = 0;
  std::uint64_t over_limit = 0;
  std::uint32_t published = 0;
  const bool read = read_guarded([&] {
    published = cumulative_.published_series();
    for (std::uint32_t i = descriptors_seen_; i < published; ++i) {
      if (series_.size() + fresh.size() >= max_series_) {
        over_limit += published - i;
        break;
      }
      auto info = cumulative_.read_descriptor(i);
      if (!info) {
        ++invalid;
        continue;
      }
      fresh.push_back(SeriesState{std::move(*info), {}});
      fresh_indices.push_back(i);
    }
    staging_.resize(series_.size() + fresh.size());
    for (std::size_t i = 0; i < series_.size(); ++i) cumulative_.read_value(series_[i].info, staging_[i]);
    for (std::size_t i = 0; i < fresh.size(); ++i)
      cumulative_.read_value(fresh[i].info, staging_[series_.size() + i]);
  });
  if (!read) return false;
  invalid_series_ += invalid;
  series_over_limit_ += over_limit;
  descriptors_seen_ = std::max(descriptors_seen_, published);
  if (integrals_ != nullptr) series_integral_.resize(descriptors_seen_, -1);
  for (std::size_t f = 0; f < fresh.size(); ++f) {
    if (integrals_ != nullptr) track_series(fresh[f], series_.size(), fresh_indices[f]);
    series_.push_back(std::move(fresh[f]));
    series_descriptor_index_.push_back(fresh_indices[f]);
  }
  for (std::size_t i = 0; i < series_.size(); ++i) {
    // A sequence that never settles means the writer died mid-update: keep the last good value.
    if (staging_[i].consistent) std::swap(series_[i].value, staging_[i]);
  }
  return true;
}

double RankSegment::ring_fill_ratio() const {
  const shm::ProducerState p = producer();
  const std::uint64_t ring_bytes = opened_.identity.ring_bytes;
  if (p.tail < ring_.head() || ring_bytes == 0) return 0;
  return std::min(1.0, static_cast<double>(p.tail - ring_.head()) / static_cast<double>(ring_bytes));
}

void RankSegment::apply_staleness(std::uint64_t now_ns, std::uint64_t stale_after_ns) {
  ownership_.apply_staleness(scheduler_.fixed, now_ns, stale_after_ns);
}

void RankSegment::update_rate(std::uint64_t now_ns) {
  constexpr std::uint64_t kWindowNs = 2'000'000'000;
  if (now_ns - rate_window_start_ns_ < kWindowNs) return;
  const std::uint64_t written = producer().records_written;
  const std::uint64_t delta =
      written >= rate_window_start_records_ ? written - rate_window_start_records_ : 0;
  records_per_second_ =
      static_cast<double>(delta) * 1e9 / static_cast<double>(now_ns - rate_window_start_ns_);
  rate_window_start_ns_ = now_ns;
  rate_window_start_records_ = written;
}

}  // namespace rankstat
