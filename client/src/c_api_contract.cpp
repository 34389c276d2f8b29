// What the C ABI tells bindings about the contract: the constants rankstat.h repeats, pinned to
// shmproto's, the layout version and hash, and the scheduler record's field tables (a binding builds its
// record from them instead of hard-coding offsets).

#include <cstdint>
#include <iterator>
#include <span>

#include "c_api_internal.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "rankstat/shmproto/schema.hpp"

using rankstat::Status;
using rankstat::c_api::fail;

static_assert(RANKSTAT_ROLE_SCHEDULER == static_cast<int>(rankstat::shm::Role::kScheduler));
static_assert(RANKSTAT_ROLE_OTHER == static_cast<int>(rankstat::shm::Role::kOther));
static_assert(RANKSTAT_RANK_UNSET == rankstat::shm::kRankUnset);
static_assert(RANKSTAT_FLAG_PRIORITY_SCHEDULING == rankstat::shm::kFlagPriorityScheduling);
static_assert(RANKSTAT_FLAG_ALL_SCHEDULERS_METRICS == rankstat::shm::kFlagAllSchedulersMetrics);
static_assert(RANKSTAT_FLAG_DP_ATTENTION == rankstat::shm::kFlagDpAttention);
static_assert(RANKSTAT_MODE_LIVEMOSTRECENT + 1 == rankstat::shm::kGaugeModeCount);
static_assert(RANKSTAT_REPORT_PREFILL == static_cast<int>(rankstat::shm::ReportKind::kPrefill));
static_assert(RANKSTAT_REPORT_DECODE == static_cast<int>(rankstat::shm::ReportKind::kDecode));
static_assert(RANKSTAT_REPORT_IDLE == static_cast<int>(rankstat::shm::ReportKind::kIdle));
static_assert(RANKSTAT_GROUP_LORA == rankstat::shm::kGroupLora);
static_assert(RANKSTAT_GROUP_HICACHE == rankstat::shm::kGroupHiCache);
static_assert(RANKSTAT_GROUP_STREAMING_SESSIONS == rankstat::shm::kGroupStreamingSessions);
static_assert(RANKSTAT_GROUP_SPECULATIVE == rankstat::shm::kGroupSpeculative);
static_assert(RANKSTAT_GROUP_DISAGGREGATION == rankstat::shm::kGroupDisaggregation);
static_assert(RANKSTAT_GROUP_ROUTING_KEYS == rankstat::shm::kGroupRoutingKeys);
static_assert(RANKSTAT_QUEUE_RUNNING == static_cast<int>(rankstat::shm::QueueId::kRunning));
static_assert(RANKSTAT_QUEUE_WAITING == static_cast<int>(rankstat::shm::QueueId::kWaiting));
static_assert(RANKSTAT_QUEUE_PREFILL_BOOTSTRAP ==
              static_cast<int>(rankstat::shm::QueueId::kPrefillBootstrap));
static_assert(RANKSTAT_QUEUE_PREFILL_INFLIGHT == static_cast<int>(rankstat::shm::QueueId::kPrefillInflight));
static_assert(RANKSTAT_QUEUE_DECODE_PREALLOC == static_cast<int>(rankstat::shm::QueueId::kDecodePrealloc));
static_assert(RANKSTAT_QUEUE_DECODE_TRANSFER == static_cast<int>(rankstat::shm::QueueId::kDecodeTransfer));
static_assert(RANKSTAT_PRIORITY_IS_NONE == rankstat::shm::kPriorityIsNone);
// rankstat.h documents the aux members' type numbers.
static_assert(static_cast<int>(rankstat::shm::AuxType::kU32) == 3);
static_assert(static_cast<int>(rankstat::shm::AuxType::kU64) == 4);

extern "C" {

uint32_t rankstat_layout_major(void) {
  return rankstat::shm::kLayoutMajor;
}
uint32_t rankstat_layout_minor(void) {
  return rankstat::shm::kLayoutMinor;
}
uint64_t rankstat_layout_hash(void) {
  return rankstat::shm::kLayoutHash;
}
uint32_t rankstat_scheduler_snapshot_bytes(void) {
  return sizeof(rankstat::shm::SchedulerSnapshot);
}

int rankstat_scheduler_field(uint32_t index, const char** name, uint32_t* offset, uint32_t* type) {
  constexpr auto kFields = std::span(rankstat::shm::kSchedulerScalarFields);
  if (index >= kFields.size())
    return fail(Status::kInvalidArgument, "rankstat_scheduler_field: index past the last field");
  const rankstat::shm::ScalarField& field = kFields[index];
  if (name != nullptr) *name = field.name;
  if (offset != nullptr) *offset = field.offset;
  if (type != nullptr) *type = static_cast<std::uint32_t>(field.type);
  return RANKSTAT_OK;
}

int rankstat_scheduler_aux_field(uint32_t index, const char** name, uint32_t* offset, uint32_t* type,
                                 uint32_t* count) {
  constexpr auto kMembers = std::span(rankstat::shm::kSchedulerAuxMembers);
  if (index >= kMembers.size()) {
    return fail(Status::kInvalidArgument, "rankstat_scheduler_aux_field: index past the last member");
  }
  const rankstat::shm::AuxMember& member = kMembers[index];
  if (name != nullptr) *name = member.name;
  if (offset != nullptr) *offset = member.offset;
  if (type != nullptr) *type = static_cast<std::uint32_t>(member.type);
  if (count != nullptr) *count = member.count;
  return RANKSTAT_OK;
}

int rankstat_routing_key_bounds(const double** bounds, uint32_t* count) {
  if (bounds != nullptr) *bounds = rankstat::shm::kRoutingKeyBucketBounds;
  if (count != nullptr)
    *count = static_cast<std::uint32_t>(std::size(rankstat::shm::kRoutingKeyBucketBounds));
  return RANKSTAT_OK;
}

uint32_t rankstat_priority_count_bytes(void) {
  return sizeof(rankstat::shm::PriorityCount);
}

uint32_t rankstat_max_priority_counts(void) {
  return rankstat::shm::kMaxPriorityCounts;
}

}  // extern "C"
