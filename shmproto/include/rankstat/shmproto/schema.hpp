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

// Every enumerator and flag whose value a writer stores in a segment and a reader interprets.
struct NamedValue {
  const char* name;
  std::uint64_t value;
};
template <typename E>
constexpr std::uint64_t value_of(E e) {
  return static_cast<std::uint64_t>(e);
}
inline constexpr NamedValue kContractValues[] = {
    {"SegmentState::kInitializing", value_of(SegmentState::kInitializing)},
    {"SegmentState::kReady", value_of(SegmentState::kReady)},
    {"Role::kUnknown", value_of(Role::kUnknown)},
    {"Role::kScheduler", value_of(Role::kScheduler)},
    {"Role::kTokenizer", value_of(Role::kTokenizer)},
    {"Role::kDetokenizer", value_of(Role::kDetokenizer)},
    {"Role::kOther", value_of(Role::kOther)},
    {"kRankUnset", value_of(kRankUnset)},
    {"kFlagPriorityScheduling", kFlagPriorityScheduling},
    {"kFlagAllSchedulersMetrics", kFlagAllSchedulersMetrics},
    {"kFlagDpAttention", kFlagDpAttention},
    {"RecordType::kPadding", value_of(RecordType::kPadding)},
    {"RecordType::kSchedulerSnapshot", value_of(RecordType::kSchedulerSnapshot)},
    {"RecordType::kSeriesUpdate", value_of(RecordType::kSeriesUpdate)},
    {"SeriesUpdateOp::kGaugeSet", value_of(SeriesUpdateOp::kGaugeSet)},
    {"SeriesKind::kCounter", value_of(SeriesKind::kCounter)},
    {"SeriesKind::kGauge", value_of(SeriesKind::kGauge)},
    {"SeriesKind::kHistogram", value_of(SeriesKind::kHistogram)},
    {"SeriesKind::kSummary", value_of(SeriesKind::kSummary)},
    {"GaugeMode::kAll", value_of(GaugeMode::kAll)},
    {"GaugeMode::kLiveAll", value_of(GaugeMode::kLiveAll)},
    {"GaugeMode::kSum", value_of(GaugeMode::kSum)},
    {"GaugeMode::kLiveSum", value_of(GaugeMode::kLiveSum)},
    {"GaugeMode::kMin", value_of(GaugeMode::kMin)},
    {"GaugeMode::kLiveMin", value_of(GaugeMode::kLiveMin)},
    {"GaugeMode::kMax", value_of(GaugeMode::kMax)},
    {"GaugeMode::kLiveMax", value_of(GaugeMode::kLiveMax)},
    {"GaugeMode::kMostRecent", value_of(GaugeMode::kMostRecent)},
    {"GaugeMode::kLiveMostRecent", value_of(GaugeMode::kLiveMostRecent)},
    {"kSeriesWithoutIdentityLabels", kSeriesWithoutIdentityLabels},
    {"ReportKind::kUnspecified", value_of(ReportKind::kUnspecified)},
    {"ReportKind::kPrefill", value_of(ReportKind::kPrefill)},
    {"ReportKind::kDecode", value_of(ReportKind::kDecode)},
    {"ReportKind::kIdle", value_of(ReportKind::kIdle)},
    {"kGroupLora", kGroupLora},
    {"kGroupHiCache", kGroupHiCache},
    {"kGroupStreamingSessions", kGroupStreamingSessions},
    {"kGroupSpeculative", kGroupSpeculative},
    {"kGroupDisaggregation", kGroupDisaggregation},
    {"kGroupRoutingKeys", kGroupRoutingKeys},
    {"QueueId::kRunning", value_of(QueueId::kRunning)},
    {"QueueId::kWaiting", value_of(QueueId::kWaiting)},
    {"QueueId::kPrefillBootstrap", value_of(QueueId::kPrefillBootstrap)},
    {"QueueId::kPrefillInflight", value_of(QueueId::kPrefillInflight)},
    {"QueueId::kDecodePrealloc", value_of(QueueId::kDecodePrealloc)},
    {"QueueId::kDecodeTransfer", value_of(QueueId::kDecodeTransfer)},
    {"kPriorityIsNone", kPriorityIsNone},
    {"FieldType::kI64", value_of(FieldType::kI64)},
    {"FieldType::kF64", value_of(FieldType::kF64)},
};

// The enumerations whose members are counted: a member added without its line above does not compile.
constexpr std::size_t count_values(std::string_view prefix) {
  std::size_t n = 0;
  for (const NamedValue& v : kContractValues) {
    if (std::string_view(v.name).starts_with(prefix)) ++n;
  }
  return n;
}
static_assert(count_values("GaugeMode::") == kGaugeModeCount);
static_assert(count_values("QueueId::") == kQueueIdCount);
static_assert(count_values("SeriesKind::") == kSeriesKindMax);
static_assert(count_values("Role::") == value_of(Role::kOther) + 1);
static_assert(count_values("ReportKind::") == value_of(ReportKind::kIdle) + 1);

// The fields of one structure's list (layout.hpp), reserved bytes left out.
template <std::size_t N>
constexpr void hash_fields(LayoutHasher& h, const FieldInfo (&fields)[N]) {
  for (const FieldInfo& f : fields) {
    if (!f.reserved) h.field(f.name, f.offset, f.size);
  }
}

constexpr std::uint64_t compute_layout_hash() {
  LayoutHasher h;
  h.add("rankstat").add(kLayoutMajor).add(kLayoutMinor);
  h.add("SegmentHeader").add(sizeof(SegmentHeader));
  hash_fields(h, kSegmentHeaderFields);
  h.add("RecordHeader").add(sizeof(RecordHeader)).add(kRecordAlignment);
  hash_fields(h, kRecordHeaderFields);
  h.add("CumulativeHeader").add(sizeof(CumulativeHeader));
  hash_fields(h, kCumulativeHeaderFields);
  h.add("SeriesDescriptor").add(sizeof(SeriesDescriptor));
  hash_fields(h, kSeriesDescriptorFields);
  h.add("SeriesKinds").add(kSeriesKindMax).add(kMaxHistogramBuckets).add("length-prefixed texts");
  h.add("SeriesUpdateRecord").add(sizeof(SeriesUpdateRecord)).add(kSeriesUpdateVersion);
  hash_fields(h, kSeriesUpdateRecordFields);
  h.add("SchedulerSnapshot").add(sizeof(SchedulerSnapshot)).add(kSchedulerSnapshotVersion);
  for (const ScalarField& f : kSchedulerScalarFields) {
    h.add(f.name).add(f.offset).add(static_cast<std::uint64_t>(f.type)).add(f.group);
  }
  h.field("routing_key_running_req_counts", offsetof(SchedulerSnapshot, routing_key_running_req_counts),
          sizeof(SchedulerSnapshot::routing_key_running_req_counts))
      .field("routing_key_all_req_counts", offsetof(SchedulerSnapshot, routing_key_all_req_counts),
             sizeof(SchedulerSnapshot::routing_key_all_req_counts));
  h.add("PriorityCount").add(sizeof(PriorityCount));
  hash_fields(h, kPriorityCountFields);
  // The values written into those fields: two builds that number a role, a queue or a mode differently
  // disagree about the data as surely as about the bytes.
  for (const NamedValue& v : kContractValues) h.add(v.name).add(v.value);
  return h.value();
}

inline constexpr std::uint64_t kLayoutHash = compute_layout_hash();

}  // namespace rankstat::shm
