#include "rank_segment.hpp"

#include <algorithm>
#include <cstring>
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
  read_guarded([&] {
    // The RingReader holds a record-sized scratch buffer; keep it in place inside this object, which
    // the daemon never moves (it is held by unique_ptr).
    ring_ = shm::RingReader(opened_.file.header(), opened_.ring(), h.ring_bytes, /*publish_head=*/true);
    shm::shared(opened_.file.header()->consumer_pid)
        .store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
  });
  if (memory_fault() == SegmentFault::kNone) recover_consumed_snapshot();
  rate_.start(now_ns, producer().records_written);
}

std::string_view segment_fault_name(SegmentFault fault) {
  switch (fault) {
    case SegmentFault::kNone:
      return {};
    case SegmentFault::kTruncated:
      return "truncated";
    case SegmentFault::kBusError:
      return "bus_error";
    case SegmentFault::kRingIndex:
      return "ring_index";
    case SegmentFault::kRingRecord:
      return "ring_record";
  }
  return "ring_record";
}

// Runs `read` with the mapping guarded against SIGBUS. Returns false without reading if the memory
// was already found missing, and false (recording kBusError) if it went missing during `read`.
template <typename Read>
bool RankSegment::read_guarded(Read&& read) const {
  if (memory_fault() != SegmentFault::kNone) return false;
  if (shm::run_bus_guarded(opened_.file.bytes(), opened_.file.size(), std::forward<Read>(read))) return true;
  faults_.set_memory(SegmentFault::kBusError);
  return false;
}

shm::ProducerState RankSegment::producer() const {
  shm::ProducerState now;
  if (read_guarded([&] { now = shm::read_producer_state(*opened_.file.header()); })) last_producer_ = now;
  return last_producer_;
}

bool RankSegment::check_file_size() {
  if (memory_fault() != SegmentFault::kNone) return false;
  struct stat st {};
  if (fstat(opened_.file.fd(), &st) != 0) return true;  // cannot tell; the guard still protects reads
  if (static_cast<std::uint64_t>(st.st_size) >= opened_.file.size()) return true;
  faults_.set_memory(SegmentFault::kTruncated);
  return false;
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
  if (ring_corrupt() || memory_fault() != SegmentFault::kNone) return false;
  // Bound one pass so a flooded ring cannot starve the other segments or a scrape.
  constexpr std::uint64_t kMaxBytesPerPass = std::uint64_t{256} * 1024;
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
      faults_.set_memory(SegmentFault::kBusError);
      return false;
    }
  }
  drained_.records += stats.records;
  drained_.sequence_gaps += stats.sequence_gaps;
  drained_.last_fill = static_cast<double>(stats.bytes) / static_cast<double>(opened_.identity.ring_bytes);
  // Any change counts: the value comes from shared memory and may be garbage, which at worst makes the
  // daemon poll at its fastest.
  drained_.dropped_before_last = dropped != dropped_seen_;
  dropped_seen_ = dropped;
  if (integrals_.has_pending()) {
    // Gauge updates of series published after the last descriptor scan: read the descriptors, then
    // integrate the updates in their order.
    read_cumulative();
    integrals_.apply_pending();
  }
  if (stats.status != shm::DrainStatus::kOk) {
    faults_.set_ring(stats.status == shm::DrainStatus::kCorruptIndex ? SegmentFault::kRingIndex
                                                                     : SegmentFault::kRingRecord);
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
      ++drained_.malformed;
      return;
    }
    std::memcpy(&update, payload.data(), sizeof update);
    ++drained_.gauge_updates;
    integrals_.observe_update(update.series_index, header.timestamp_ns, update.value);
    return;
  }
  if (header.type != static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot))
    return;  // unknown: skip
  if (header.type_version < 1 || payload.size() < sizeof(shm::SchedulerSnapshot)) {
    ++drained_.malformed;
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
  note_seen_priorities(scheduler_.priorities, seen_priorities_);
  ownership_.apply(scheduler_.fixed, header.timestamp_ns);
  scheduler_.present = true;
  scheduler_.timestamp_ns = header.timestamp_ns;
  scheduler_.sequence = header.sequence;
  integrals_.observe_snapshot(scheduler_.fixed, header.timestamp_ns);
}

void RankSegment::set_integrals(const IntegralSettings* settings, bool snapshot_exported,
                                std::map<std::string, IntegralCheckpoint> checkpoints) {
  if (!integrals_.start(settings, snapshot_exported, std::move(checkpoints), descriptors_seen_)) return;
  // Series read before now (at open): give them their tracks.
  for (std::size_t position = 0; position < series_.size(); ++position)
    integrals_.track_series(series_[position], position, series_descriptor_index_[position]);
  // The snapshot recovered at open (the newest one, which a previous daemon may have consumed) holds
  // from its own timestamp on.
  if (scheduler_.present) integrals_.observe_snapshot(scheduler_.fixed, scheduler_.timestamp_ns);
}

void RankSegment::settle_integrals(std::uint64_t now_ns) {
  if (!integrals_.enabled()) return;
  // A live writer that reports on events holds its last value until now: silence is "unchanged", not
  // "gone" (a gauge held 3 s after its last set accrues those 3 s). A writer that steps on a clock
  // heartbeats every step, and a stalled, dead or closed one held its values until its last sign of life.
  const bool held_until_now = state_ == RankState::kLive && !producer().reports_steps;
  integrals_.settle(held_until_now ? now_ns : std::min(producer().heartbeat_ns, now_ns), series_);
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
  shm::CumulativeReader::Refused refused;
  const bool read = read_guarded([&] {
    published = cumulative_.published_series();
    refused = cumulative_.refused_registrations();
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
  refused_ = refused;
  descriptors_seen_ = std::max(descriptors_seen_, published);
  integrals_.cover_descriptors(descriptors_seen_);
  for (std::size_t f = 0; f < fresh.size(); ++f) {
    integrals_.track_series(fresh[f], series_.size(), fresh_indices[f]);
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
  if (rate_.due(now_ns)) rate_.update(now_ns, producer().records_written);
}

void RecordRate::start(std::uint64_t now_ns, std::uint64_t written) {
  window_start_ns_ = now_ns;
  window_start_records_ = written;
}

void RecordRate::update(std::uint64_t now_ns, std::uint64_t written) {
  const std::uint64_t delta = written >= window_start_records_ ? written - window_start_records_ : 0;
  per_second_ = static_cast<double>(delta) * 1e9 / static_cast<double>(now_ns - window_start_ns_);
  window_start_ns_ = now_ns;
  window_start_records_ = written;
}

}  // namespace rankstat
