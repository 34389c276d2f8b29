// The layout hash: FNV-1a over a canonical description of every structure in the contract (names,
// offsets, sizes and the scheduler snapshot's field table). Two builds with the same major/minor but a
// different hash disagree about the bytes; the reader refuses such a segment instead of misreading it.
#pragma once

#include <cstdint>
#include <string_view>

#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat::shm {

class LayoutHasher {
 public:
  constexpr LayoutHasher& add(std::string_view text) {
    for (char c : text) mix(static_cast<std::uint8_t>(c));
    mix(0);
    return *this;
  }
  constexpr LayoutHasher& add(std::uint64_t value) {
    for (int i = 0; i < 8; ++i) mix(static_cast<std::uint8_t>(value >> (8 * i)));
    return *this;
  }
  constexpr LayoutHasher& field(std::string_view name, std::uint64_t offset, std::uint64_t size) {
    return add(name).add(offset).add(size);
  }
  constexpr std::uint64_t value() const { return state_; }

 private:
  constexpr void mix(std::uint8_t byte) {
    state_ ^= byte;
    state_ *= 0x100000001b3ull;
  }
  std::uint64_t state_ = 0xcbf29ce484222325ull;
};

#define RANKSTAT_HASH_FIELD(type, member) field(#member, offsetof(type, member), sizeof(type::member))

constexpr std::uint64_t compute_layout_hash() {
  LayoutHasher h;
  h.add("rankstat").add(kLayoutMajor).add(kLayoutMinor);
  h.add("SegmentHeader").add(sizeof(SegmentHeader));
  h.RANKSTAT_HASH_FIELD(SegmentHeader, magic)
      .RANKSTAT_HASH_FIELD(SegmentHeader, layout_major)
      .RANKSTAT_HASH_FIELD(SegmentHeader, layout_minor)
      .RANKSTAT_HASH_FIELD(SegmentHeader, header_bytes)
      .RANKSTAT_HASH_FIELD(SegmentHeader, layout_hash)
      .RANKSTAT_HASH_FIELD(SegmentHeader, segment_bytes)
      .RANKSTAT_HASH_FIELD(SegmentHeader, state)
      .RANKSTAT_HASH_FIELD(SegmentHeader, role)
      .RANKSTAT_HASH_FIELD(SegmentHeader, pid)
      .RANKSTAT_HASH_FIELD(SegmentHeader, flags)
      .RANKSTAT_HASH_FIELD(SegmentHeader, pid_start_ticks)
      .RANKSTAT_HASH_FIELD(SegmentHeader, generation)
      .RANKSTAT_HASH_FIELD(SegmentHeader, created_realtime_ns)
      .RANKSTAT_HASH_FIELD(SegmentHeader, created_monotonic_ns)
      .RANKSTAT_HASH_FIELD(SegmentHeader, tp_rank)
      .RANKSTAT_HASH_FIELD(SegmentHeader, pp_rank)
      .RANKSTAT_HASH_FIELD(SegmentHeader, dp_rank)
      .RANKSTAT_HASH_FIELD(SegmentHeader, moe_ep_rank)
      .RANKSTAT_HASH_FIELD(SegmentHeader, attn_tp_rank)
      .RANKSTAT_HASH_FIELD(SegmentHeader, attn_dp_rank)
      .RANKSTAT_HASH_FIELD(SegmentHeader, attn_cp_rank)
      .RANKSTAT_HASH_FIELD(SegmentHeader, tp_size)
      .RANKSTAT_HASH_FIELD(SegmentHeader, pp_size)
      .RANKSTAT_HASH_FIELD(SegmentHeader, dp_size)
      .RANKSTAT_HASH_FIELD(SegmentHeader, ring_offset)
      .RANKSTAT_HASH_FIELD(SegmentHeader, ring_bytes)
      .RANKSTAT_HASH_FIELD(SegmentHeader, cumulative_offset)
      .RANKSTAT_HASH_FIELD(SegmentHeader, cumulative_bytes)
      .RANKSTAT_HASH_FIELD(SegmentHeader, max_record_bytes)
      .RANKSTAT_HASH_FIELD(SegmentHeader, instance)
      .RANKSTAT_HASH_FIELD(SegmentHeader, model_name)
      .RANKSTAT_HASH_FIELD(SegmentHeader, engine_type)
      .RANKSTAT_HASH_FIELD(SegmentHeader, rank_key)
      .RANKSTAT_HASH_FIELD(SegmentHeader, extra_labels)
      .RANKSTAT_HASH_FIELD(SegmentHeader, tail)
      .RANKSTAT_HASH_FIELD(SegmentHeader, records_written)
      .RANKSTAT_HASH_FIELD(SegmentHeader, dropped_records)
      .RANKSTAT_HASH_FIELD(SegmentHeader, heartbeat_ns)
      .RANKSTAT_HASH_FIELD(SegmentHeader, oversize_records)
      .RANKSTAT_HASH_FIELD(SegmentHeader, closed)
      .RANKSTAT_HASH_FIELD(SegmentHeader, latest_record_position)
      .RANKSTAT_HASH_FIELD(SegmentHeader, head)
      .RANKSTAT_HASH_FIELD(SegmentHeader, consumer_heartbeat_ns)
      .RANKSTAT_HASH_FIELD(SegmentHeader, consumer_pid);
  h.add("RecordHeader").add(sizeof(RecordHeader)).add(kRecordAlignment);
  h.RANKSTAT_HASH_FIELD(RecordHeader, length)
      .RANKSTAT_HASH_FIELD(RecordHeader, type)
      .RANKSTAT_HASH_FIELD(RecordHeader, type_version)
      .RANKSTAT_HASH_FIELD(RecordHeader, sequence)
      .RANKSTAT_HASH_FIELD(RecordHeader, timestamp_ns);
  h.add("CumulativeHeader").add(sizeof(CumulativeHeader));
  h.RANKSTAT_HASH_FIELD(CumulativeHeader, series_capacity)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, bounds_capacity)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, values_capacity)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, text_capacity)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, series_count)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, bounds_used)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, values_used)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, registration_failures)
      .RANKSTAT_HASH_FIELD(CumulativeHeader, text_used);
  h.add("SeriesDescriptor").add(sizeof(SeriesDescriptor));
  h.RANKSTAT_HASH_FIELD(SeriesDescriptor, kind)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, gauge_mode)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, bucket_count)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, values_offset)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, bounds_offset)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, flags)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, labels_offset)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, labels_bytes)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, help_offset)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, help_bytes)
      .RANKSTAT_HASH_FIELD(SeriesDescriptor, family);
  h.add("SeriesKinds").add(kSeriesKindMax).add(kMaxHistogramBuckets).add(kSeriesLabelBytes).add(kHelpBytes);
  h.add("SeriesUpdateRecord").add(sizeof(SeriesUpdateRecord)).add(kSeriesUpdateVersion);
  h.RANKSTAT_HASH_FIELD(SeriesUpdateRecord, series_index)
      .RANKSTAT_HASH_FIELD(SeriesUpdateRecord, op)
      .RANKSTAT_HASH_FIELD(SeriesUpdateRecord, value);
  h.add("SchedulerSnapshot").add(sizeof(SchedulerSnapshot)).add(kSchedulerSnapshotVersion);
  for (const ScalarField& f : kSchedulerScalarFields) {
    h.add(f.name).add(f.offset).add(static_cast<std::uint64_t>(f.type)).add(f.group);
  }
  h.RANKSTAT_HASH_FIELD(SchedulerSnapshot, routing_key_running_req_counts)
      .RANKSTAT_HASH_FIELD(SchedulerSnapshot, routing_key_all_req_counts);
  h.add("PriorityCount").add(sizeof(PriorityCount));
  h.RANKSTAT_HASH_FIELD(PriorityCount, priority)
      .RANKSTAT_HASH_FIELD(PriorityCount, queue)
      .RANKSTAT_HASH_FIELD(PriorityCount, flags)
      .RANKSTAT_HASH_FIELD(PriorityCount, count);
  return h.value();
}

#undef RANKSTAT_HASH_FIELD

inline constexpr std::uint64_t kLayoutHash = compute_layout_hash();

}  // namespace rankstat::shm
