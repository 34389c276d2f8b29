// Record type 1: the scheduler snapshot, one per logged scheduler step.
//
// The field set is SGLang's SchedulerStats (observability/metrics_collector.py): queue counts with a
// per-priority breakdown, the KV pool breakdown for the full / SWA / mamba pools, speculative decoding,
// retraction, PD-disaggregation queues, utilisation and forward occupancy, LoRA, HiCache, streaming
// sessions and routing keys. Layout in docs/shm-layout.md ("Scheduler snapshot").
//
// The payload is a fixed part followed by `priority_count` PriorityCount entries. Readers must take
// the entry count from the record length as well and use the smaller of the two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "rankstat/shmproto/layout.hpp"

namespace rankstat::shm {

inline constexpr std::uint16_t kSchedulerSnapshotVersion = 1;

enum class ReportKind : std::uint32_t {
  kUnspecified = 0,
  kPrefill = 1,  // logged after a prefill batch: owns cache_hit_rate
  kDecode = 2,   // logged every decode_log_interval steps: owns gen_throughput
  kIdle = 3,     // idle refresh (no batch for 30 s): gen_throughput decays to 0
};

// Optional field groups: SGLang creates these gauges only when the feature is on.
inline constexpr std::uint64_t kGroupLora = 1ull << 0;
inline constexpr std::uint64_t kGroupHiCache = 1ull << 1;
inline constexpr std::uint64_t kGroupStreamingSessions = 1ull << 2;
inline constexpr std::uint64_t kGroupSpeculative = 1ull << 3;
inline constexpr std::uint64_t kGroupDisaggregation = 1ull << 4;
inline constexpr std::uint64_t kGroupRoutingKeys = 1ull << 5;

// Which queue a PriorityCount belongs to.
enum class QueueId : std::uint8_t {
  kRunning = 0,
  kWaiting = 1,
  kPrefillBootstrap = 2,
  kPrefillInflight = 3,
  kDecodePrealloc = 4,
  kDecodeTransfer = 5,
};
inline constexpr std::uint8_t kQueueIdCount = 6;

inline constexpr std::uint8_t kPriorityIsNone = 1u << 0;  // SGLang's priority=None requests

struct PriorityCount {
  std::int32_t priority;   // 0
  std::uint8_t queue;      // 4: QueueId
  std::uint8_t flags;      // 5: kPriorityIsNone
  std::uint16_t reserved;  // 6
  std::int64_t count;      // 8
};
static_assert(sizeof(PriorityCount) == 16);
// clang-format off
#define RANKSTAT_PRIORITY_COUNT_FIELDS(T, F, R) \
  F(T, priority, 0) F(T, queue, 4) F(T, flags, 5) R(T, reserved, 6) F(T, count, 8)
// clang-format on
RANKSTAT_DEFINE_LAYOUT(PriorityCount, RANKSTAT_PRIORITY_COUNT_FIELDS)

// Bounds of SGLang's routing-key GaugeHistograms ("gt < count <= le"), plus one overflow bin.
inline constexpr double kRoutingKeyBucketBounds[] = {1, 2, 3, 5, 7, 10, 20, 50, 100, 200};
inline constexpr std::uint32_t kRoutingKeyBins = 11;
// The two routing-key GaugeHistograms this record carries (SGLang's: a mostrecent gauge per bin with
// gt/le labels, "gt < count <= le").
struct RoutingKeyFamily {
  const char* name;
  const char* help;
};
inline constexpr RoutingKeyFamily kRoutingKeyFamilies[] = {
    {"sglang:routing_key_running_req_count",
     "Routing keys by their running request count (gt < count <= le)."},
    {"sglang:routing_key_all_req_count",
     "Routing keys by their running plus waiting request count (gt < count <= le)."},
};

inline constexpr std::uint32_t kMaxPriorityCounts = 64;

struct SchedulerSnapshot {
  std::uint32_t report_kind;     // 0: ReportKind
  std::uint32_t priority_count;  // 4: PriorityCount entries after the fixed part
  std::uint64_t groups;          // 8: kGroup* bits present in this report

  // Basics
  std::int64_t num_running_reqs;        // 16: total over priorities
  std::int64_t num_queue_reqs;          // 24
  std::int64_t num_grammar_queue_reqs;  // 32
  double gen_throughput;                // 40: tokens/s, decode-owned
  double cache_hit_rate;                // 48: prefill-owned
  std::int64_t decode_sum_seq_lens;     // 56
  // Pool usage
  double token_usage;                   // 64: max over full / SWA / mamba
  double full_token_usage;              // 72
  double swa_token_usage;               // 80
  double mamba_usage;                   // 88
  std::int64_t num_used_tokens;         // 96
  std::int64_t kv_available_tokens;     // 104
  std::int64_t kv_evictable_tokens;     // 112
  std::int64_t kv_used_tokens;          // 120
  std::int64_t swa_available_tokens;    // 128
  std::int64_t swa_evictable_tokens;    // 136
  std::int64_t swa_used_tokens;         // 144
  std::int64_t mamba_available_tokens;  // 152
  std::int64_t mamba_evictable_tokens;  // 160
  std::int64_t mamba_used_tokens;       // 168
  // Speculative decoding
  double spec_accept_length;           // 176
  double spec_accept_rate;             // 184
  double spec_cap_length;              // 192
  double spec_block_accept_length;     // 200
  std::int64_t spec_num_steps;         // 208
  std::int64_t spec_num_draft_tokens;  // 216
  // Retraction (reset to 0 after each report, as SGLang does)
  std::int64_t num_retracted_reqs;  // 224
  std::int64_t num_paused_reqs;     // 232
  // PD disaggregation
  std::int64_t num_prefill_bootstrap_queue_reqs;     // 240
  std::int64_t num_prefill_inflight_queue_reqs;      // 248
  std::int64_t num_decode_prealloc_queue_reqs;       // 256
  std::int64_t num_decode_transfer_queue_reqs;       // 264
  double kv_transfer_speed_gb_s;                     // 272
  double kv_transfer_latency_ms;                     // 280
  double pending_prealloc_token_usage;               // 288
  std::int64_t num_decode_deferred_kv_release_reqs;  // 296
  // Utilisation and forward
  double utilization;          // 304: -1 on a PD prefill node
  double fwd_occupancy;        // 312: percent; NaN when the device timer is off
  double new_token_ratio;      // 320
  std::int64_t is_cuda_graph;  // 328
  // LoRA
  std::int64_t lora_pool_slots_used;   // 336
  std::int64_t lora_pool_slots_total;  // 344
  double lora_pool_utilization;        // 352
  // HiCache
  std::int64_t hicache_host_used_tokens;   // 360
  std::int64_t hicache_host_total_tokens;  // 368
  // Streaming sessions
  std::int64_t num_streaming_sessions;         // 376
  std::int64_t streaming_session_held_tokens;  // 384
  // Routing keys
  std::int64_t num_unique_running_routing_keys;                   // 392
  std::uint64_t routing_key_running_req_counts[kRoutingKeyBins];  // 400: per-bin key counts
  std::uint64_t routing_key_all_req_counts[kRoutingKeyBins];      // 488
};                                                                // 576; PriorityCount entries follow

static_assert(std::is_standard_layout_v<SchedulerSnapshot> &&
              std::is_trivially_copyable_v<SchedulerSnapshot>);
static_assert(sizeof(SchedulerSnapshot) == 576);
static_assert(offsetof(SchedulerSnapshot, report_kind) == 0);
static_assert(offsetof(SchedulerSnapshot, priority_count) == 4);
static_assert(offsetof(SchedulerSnapshot, groups) == 8);
static_assert(offsetof(SchedulerSnapshot, routing_key_running_req_counts) == 400);
static_assert(offsetof(SchedulerSnapshot, routing_key_all_req_counts) == 488);

inline constexpr std::uint32_t kSchedulerRecordMaxBytes = static_cast<std::uint32_t>(
    sizeof(RecordHeader) + sizeof(SchedulerSnapshot) + kMaxPriorityCounts * sizeof(PriorityCount));

// The scalar fields, in layout order: the single source for the layout hash, the families the daemon
// exports from this record and the CLI's field listing. `group` 0 means always present.
//
// This record is SGLang's SchedulerStats in fixed layout, so its contract also says how each field is
// exported: as the gauge kSnapshotFamilyPrefix + name, with the help text and multiprocess mode below.
// (Engines that report through the prometheus_client-compatible classes declare their own families in
// their segments instead; the daemon names no family of its own.)
enum class FieldType : std::uint8_t { kI64 = 1, kF64 = 2 };

// How a field is exported: a mostrecent gauge; a per-process gauge (prometheus_client's default mode
// `all`, with a pid label: SGLang's num_retracted_reqs and num_paused_reqs); or not as a gauge at all
// (SGLang observes those per event into histograms, which an engine reports as series).
enum class FieldExport : std::uint8_t { kMostRecentGauge = 0, kPerProcessGauge = 1, kNotExported = 2 };

inline constexpr std::string_view kSnapshotFamilyPrefix = "sglang:";

struct ScalarField {
  const char* name;
  std::uint32_t offset;
  FieldType type;
  std::uint64_t group;
  const char* section;  // grouping as in SchedulerStats, for display
  FieldExport exported;
  const char* help;  // HELP text of the exported family (plain UTF-8; escaped by the exposition)
};

// The offset written in each entry is pinned: an entry whose field moved does not compile.
template <std::size_t Actual, std::size_t Pinned>
consteval std::uint32_t pinned_offset() {
  static_assert(Actual == Pinned, "a scheduler snapshot field moved");
  return static_cast<std::uint32_t>(Actual);
}

#define RANKSTAT_SNAPSHOT_FIELD(field, offset, type, group, section, exported, help)                        \
  ScalarField {                                                                                             \
#field, pinned_offset < offsetof(SchedulerSnapshot, field), offset>(), FieldType::type, group, section, \
        FieldExport::exported, help                                                                         \
  }

inline constexpr ScalarField kSchedulerScalarFields[] = {
    RANKSTAT_SNAPSHOT_FIELD(num_running_reqs, 16, kI64, 0, "basics", kMostRecentGauge,
                            "Requests in the running batch (priority=\"\" is the total)."),
    RANKSTAT_SNAPSHOT_FIELD(num_queue_reqs, 24, kI64, 0, "basics", kMostRecentGauge,
                            "Requests waiting in the scheduler queue (priority=\"\" is the total)."),
    RANKSTAT_SNAPSHOT_FIELD(num_grammar_queue_reqs, 32, kI64, 0, "basics", kMostRecentGauge,
                            "Requests waiting for grammar compilation."),
    RANKSTAT_SNAPSHOT_FIELD(gen_throughput, 40, kF64, 0, "basics", kMostRecentGauge,
                            "Decode throughput in generated tokens per second; 0 after 30 s without decode."),
    RANKSTAT_SNAPSHOT_FIELD(cache_hit_rate, 48, kF64, 0, "basics", kMostRecentGauge,
                            "Prefix cache hit rate of the last prefill batch."),
    RANKSTAT_SNAPSHOT_FIELD(decode_sum_seq_lens, 56, kI64, 0, "basics", kMostRecentGauge,
                            "Sum of sequence lengths in the decode batch."),
    RANKSTAT_SNAPSHOT_FIELD(token_usage, 64, kF64, 0, "pool", kMostRecentGauge,
                            "KV pool usage, the largest of the full, SWA and mamba pools."),
    RANKSTAT_SNAPSHOT_FIELD(full_token_usage, 72, kF64, 0, "pool", kMostRecentGauge,
                            "Usage of the full-attention KV pool."),
    RANKSTAT_SNAPSHOT_FIELD(swa_token_usage, 80, kF64, 0, "pool", kMostRecentGauge,
                            "Usage of the sliding-window KV pool."),
    RANKSTAT_SNAPSHOT_FIELD(mamba_usage, 88, kF64, 0, "pool", kMostRecentGauge,
                            "Usage of the mamba state pool."),
    RANKSTAT_SNAPSHOT_FIELD(num_used_tokens, 96, kI64, 0, "pool", kMostRecentGauge, "KV tokens in use."),
    RANKSTAT_SNAPSHOT_FIELD(kv_available_tokens, 104, kI64, 0, "pool", kMostRecentGauge,
                            "Free tokens in the full KV pool."),
    RANKSTAT_SNAPSHOT_FIELD(kv_evictable_tokens, 112, kI64, 0, "pool", kMostRecentGauge,
                            "Evictable cached tokens in the full KV pool."),
    RANKSTAT_SNAPSHOT_FIELD(kv_used_tokens, 120, kI64, 0, "pool", kMostRecentGauge,
                            "Tokens held by requests in the full KV pool."),
    RANKSTAT_SNAPSHOT_FIELD(swa_available_tokens, 128, kI64, 0, "pool", kMostRecentGauge,
                            "Free tokens in the sliding-window pool."),
    RANKSTAT_SNAPSHOT_FIELD(swa_evictable_tokens, 136, kI64, 0, "pool", kMostRecentGauge,
                            "Evictable tokens in the sliding-window pool."),
    RANKSTAT_SNAPSHOT_FIELD(swa_used_tokens, 144, kI64, 0, "pool", kMostRecentGauge,
                            "Tokens held by requests in the sliding-window pool."),
    RANKSTAT_SNAPSHOT_FIELD(mamba_available_tokens, 152, kI64, 0, "pool", kMostRecentGauge,
                            "Free slots in the mamba state pool."),
    RANKSTAT_SNAPSHOT_FIELD(mamba_evictable_tokens, 160, kI64, 0, "pool", kMostRecentGauge,
                            "Evictable slots in the mamba state pool."),
    RANKSTAT_SNAPSHOT_FIELD(mamba_used_tokens, 168, kI64, 0, "pool", kMostRecentGauge,
                            "Slots held by requests in the mamba state pool."),
    RANKSTAT_SNAPSHOT_FIELD(spec_accept_length, 176, kF64, kGroupSpeculative, "speculative", kMostRecentGauge,
                            "Average tokens produced per speculative verify step, bonus token included."),
    RANKSTAT_SNAPSHOT_FIELD(spec_accept_rate, 184, kF64, kGroupSpeculative, "speculative", kMostRecentGauge,
                            "Fraction of proposed draft tokens that were accepted."),
    RANKSTAT_SNAPSHOT_FIELD(spec_cap_length, 192, kF64, kGroupSpeculative, "speculative", kMostRecentGauge,
                            "Average capped verify window per verify step."),
    RANKSTAT_SNAPSHOT_FIELD(spec_block_accept_length, 200, kF64, kGroupSpeculative, "speculative",
                            kMostRecentGauge, "Average uncapped block accept length per verify step."),
    RANKSTAT_SNAPSHOT_FIELD(spec_num_steps, 208, kI64, kGroupSpeculative, "speculative", kMostRecentGauge,
                            "Speculative steps per verify in the active configuration."),
    RANKSTAT_SNAPSHOT_FIELD(spec_num_draft_tokens, 216, kI64, kGroupSpeculative, "speculative",
                            kMostRecentGauge, "Draft tokens per verify in the active configuration."),
    RANKSTAT_SNAPSHOT_FIELD(num_retracted_reqs, 224, kI64, 0, "retraction", kPerProcessGauge,
                            "Requests retracted since the previous report, per process."),
    RANKSTAT_SNAPSHOT_FIELD(num_paused_reqs, 232, kI64, 0, "retraction", kPerProcessGauge,
                            "Requests paused since the previous report, per process."),
    RANKSTAT_SNAPSHOT_FIELD(num_prefill_bootstrap_queue_reqs, 240, kI64, 0, "disaggregation",
                            kMostRecentGauge, "PD prefill requests waiting for bootstrap."),
    RANKSTAT_SNAPSHOT_FIELD(num_prefill_inflight_queue_reqs, 248, kI64, 0, "disaggregation", kMostRecentGauge,
                            "PD prefill requests whose KV transfer is in flight."),
    RANKSTAT_SNAPSHOT_FIELD(num_decode_prealloc_queue_reqs, 256, kI64, 0, "disaggregation", kMostRecentGauge,
                            "PD decode requests waiting for KV preallocation."),
    RANKSTAT_SNAPSHOT_FIELD(num_decode_transfer_queue_reqs, 264, kI64, 0, "disaggregation", kMostRecentGauge,
                            "PD decode requests waiting for KV transfer."),
    RANKSTAT_SNAPSHOT_FIELD(kv_transfer_speed_gb_s, 272, kF64, kGroupDisaggregation, "disaggregation",
                            kNotExported, "KV transfer speed per request in GB/s."),
    RANKSTAT_SNAPSHOT_FIELD(kv_transfer_latency_ms, 280, kF64, kGroupDisaggregation, "disaggregation",
                            kNotExported, "KV transfer latency per request in milliseconds."),
    RANKSTAT_SNAPSHOT_FIELD(pending_prealloc_token_usage, 288, kF64, 0, "disaggregation", kMostRecentGauge,
                            "KV usage reserved by pending preallocations."),
    RANKSTAT_SNAPSHOT_FIELD(num_decode_deferred_kv_release_reqs, 296, kI64, 0, "disaggregation",
                            kMostRecentGauge, "PD decode requests whose KV release is deferred."),
    RANKSTAT_SNAPSHOT_FIELD(utilization, 304, kF64, 0, "forward", kMostRecentGauge,
                            "Scheduler utilization against its SLO limits; -1 on a PD prefill node."),
    RANKSTAT_SNAPSHOT_FIELD(fwd_occupancy, 312, kF64, 0, "forward", kMostRecentGauge,
                            "Percent of wall time the device spent in forward passes."),
    RANKSTAT_SNAPSHOT_FIELD(new_token_ratio, 320, kF64, 0, "forward", kMostRecentGauge,
                            "Estimated ratio of new tokens used for admission control."),
    RANKSTAT_SNAPSHOT_FIELD(is_cuda_graph, 328, kI64, 0, "forward", kMostRecentGauge,
                            "1 if the last decode batch ran in a CUDA graph."),
    RANKSTAT_SNAPSHOT_FIELD(lora_pool_slots_used, 336, kI64, kGroupLora, "lora", kMostRecentGauge,
                            "LoRA adapter slots in use."),
    RANKSTAT_SNAPSHOT_FIELD(lora_pool_slots_total, 344, kI64, kGroupLora, "lora", kMostRecentGauge,
                            "LoRA adapter slots in the pool."),
    RANKSTAT_SNAPSHOT_FIELD(lora_pool_utilization, 352, kF64, kGroupLora, "lora", kMostRecentGauge,
                            "Fraction of LoRA adapter slots in use."),
    RANKSTAT_SNAPSHOT_FIELD(hicache_host_used_tokens, 360, kI64, kGroupHiCache, "hicache", kMostRecentGauge,
                            "Tokens held in the HiCache host pool."),
    RANKSTAT_SNAPSHOT_FIELD(hicache_host_total_tokens, 368, kI64, kGroupHiCache, "hicache", kMostRecentGauge,
                            "Capacity of the HiCache host pool in tokens."),
    RANKSTAT_SNAPSHOT_FIELD(num_streaming_sessions, 376, kI64, kGroupStreamingSessions, "sessions",
                            kMostRecentGauge, "Open streaming sessions."),
    RANKSTAT_SNAPSHOT_FIELD(streaming_session_held_tokens, 384, kI64, kGroupStreamingSessions, "sessions",
                            kMostRecentGauge, "KV tokens held by streaming sessions."),
    RANKSTAT_SNAPSHOT_FIELD(num_unique_running_routing_keys, 392, kI64, 0, "routing", kMostRecentGauge,
                            "Distinct routing keys among running requests."),
};

#undef RANKSTAT_SNAPSHOT_FIELD

// The record's other members: its fixed head and the routing-key bins, which a binding packs by name
// beside the scalar fields (the C ABI's rankstat_scheduler_aux_field). X(member, pinned offset, type,
// element count); the types continue FieldType's numbering, so one number says a member's type.
enum class AuxType : std::uint8_t { kU32 = 3, kU64 = 4 };
// clang-format off
#define RANKSTAT_SNAPSHOT_AUX_MEMBERS(X)                                        \
  X(report_kind, 0, kU32, 1)                                                    \
  X(priority_count, 4, kU32, 1)                                                 \
  X(groups, 8, kU64, 1)                                                         \
  X(routing_key_running_req_counts, 400, kU64, kRoutingKeyBins)                 \
  X(routing_key_all_req_counts, 488, kU64, kRoutingKeyBins)
// clang-format on

struct AuxMember {
  const char* name;
  std::uint32_t offset;
  AuxType type;
  std::uint32_t count;
  constexpr std::uint32_t bytes() const { return (type == AuxType::kU32 ? 4u : 8u) * count; }
};

#define RANKSTAT_SNAPSHOT_AUX_MEMBER(member, offset, type, count) \
  AuxMember{#member, pinned_offset<offsetof(SchedulerSnapshot, member), offset>(), AuxType::type, count},
inline constexpr AuxMember kSchedulerAuxMembers[] = {
    RANKSTAT_SNAPSHOT_AUX_MEMBERS(RANKSTAT_SNAPSHOT_AUX_MEMBER)};
#undef RANKSTAT_SNAPSHOT_AUX_MEMBER

// The scalar table and the aux members tile the record: a member added to the struct but to neither
// table, a size that disagrees with the struct, or a gap, does not compile.
constexpr bool snapshot_fields_tile() {
  bool covered[sizeof(SchedulerSnapshot)] = {};
  const auto cover = [&covered](std::uint64_t offset, std::uint64_t bytes) {
    for (std::uint64_t at = offset; at < offset + bytes; ++at) {
      if (at >= sizeof(SchedulerSnapshot) || covered[at]) return false;
      covered[at] = true;
    }
    return true;
  };
  for (const ScalarField& f : kSchedulerScalarFields) {
    if (!cover(f.offset, 8)) return false;  // every scalar is an i64 or an f64
  }
  for (const AuxMember& m : kSchedulerAuxMembers) {
    if (!cover(m.offset, m.bytes())) return false;
  }
  for (const bool byte : covered) {
    if (!byte) return false;
  }
  return true;
}
static_assert(snapshot_fields_tile(),
              "kSchedulerScalarFields and kSchedulerAuxMembers miss, overlap or mis-size a member of "
              "SchedulerSnapshot");
#define RANKSTAT_SNAPSHOT_AUX_SIZE(member, offset, type, count) \
  static_assert(sizeof(SchedulerSnapshot::member) ==            \
                AuxMember{#member, offset, AuxType::type, count}.bytes());
RANKSTAT_SNAPSHOT_AUX_MEMBERS(RANKSTAT_SNAPSHOT_AUX_SIZE)
#undef RANKSTAT_SNAPSHOT_AUX_SIZE

// Whether `field` is part of this report (its optional group, if any, was sent).
inline bool field_present(const SchedulerSnapshot& s, const ScalarField& field) {
  return field.group == 0 || (s.groups & field.group) != 0;
}

// A scalar field's stored value; `integer` is meaningful for kI64 fields, `real` for kF64 ones.
struct ScalarValue {
  bool is_integer = false;
  std::int64_t integer = 0;
  double real = 0;
  double as_double() const { return is_integer ? static_cast<double>(integer) : real; }
};

inline ScalarValue read_scalar(const SchedulerSnapshot& s, const ScalarField& field) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&s);
  ScalarValue v;
  v.is_integer = field.type == FieldType::kI64;
  if (v.is_integer) {
    std::memcpy(&v.integer, bytes + field.offset, sizeof v.integer);
  } else {
    std::memcpy(&v.real, bytes + field.offset, sizeof v.real);
  }
  return v;
}

// "prefill", "decode", "idle" or "unspecified" (also for values a newer writer may send).
inline std::string_view report_kind_name(std::uint32_t kind) {
  switch (static_cast<ReportKind>(kind)) {
    case ReportKind::kPrefill:
      return "prefill";
    case ReportKind::kDecode:
      return "decode";
    case ReportKind::kIdle:
      return "idle";
    case ReportKind::kUnspecified:
      break;
  }
  return "unspecified";
}

// SGLang logs a prefill batch and a decode batch with different reports, and each owns some gauges:
// a prefill report sets cache_hit_rate, a decode report gen_throughput, an idle refresh drops
// gen_throughput to 0; the gauge the report does not own keeps the last value its owner set. Every
// reader (the daemon over every record in order, rankstat --direct over the snapshots it samples) applies
// this one rule. Until a reader has seen an owner report, the value a report carries is taken as is (a
// reader that starts mid-stream, after a daemon restart say, has no better one); an unspecified report
// owns everything.
inline constexpr std::uint64_t kGenThroughputStaleNs = 30'000'000'000ull;  // SGLang's idle rule: 30 s

class ReportOwnership {
 public:
  // Rewrites in `s` (reported at timestamp_ns) what earlier reports own; remembers what `s` owns.
  void apply(SchedulerSnapshot& s, std::uint64_t timestamp_ns) {
    switch (static_cast<ReportKind>(s.report_kind)) {
      case ReportKind::kPrefill:
        remember_cache_hit_rate(s.cache_hit_rate);
        if (have_gen_throughput_) s.gen_throughput = gen_throughput_;
        break;
      case ReportKind::kDecode:
        if (have_cache_hit_rate_) s.cache_hit_rate = cache_hit_rate_;
        remember_gen_throughput(s.gen_throughput, timestamp_ns);
        break;
      case ReportKind::kIdle:
        if (have_cache_hit_rate_) s.cache_hit_rate = cache_hit_rate_;
        s.gen_throughput = 0;
        remember_gen_throughput(0, 0);
        break;
      case ReportKind::kUnspecified:
      default:  // a kind a newer writer added: its values as given
        remember_cache_hit_rate(s.cache_hit_rate);
        remember_gen_throughput(s.gen_throughput, timestamp_ns);
        break;
    }
  }

  // gen_throughput falls to 0 once the last decode report is older than stale_after_ns.
  void apply_staleness(SchedulerSnapshot& s, std::uint64_t now_ns, std::uint64_t stale_after_ns) {
    if (last_decode_ns_ == 0 || now_ns <= last_decode_ns_ || now_ns - last_decode_ns_ <= stale_after_ns)
      return;
    s.gen_throughput = 0;
    remember_gen_throughput(0, 0);
  }

 private:
  void remember_cache_hit_rate(double value) {
    cache_hit_rate_ = value;
    have_cache_hit_rate_ = true;
  }
  void remember_gen_throughput(double value, std::uint64_t decode_ns) {
    gen_throughput_ = value;
    have_gen_throughput_ = true;
    last_decode_ns_ = decode_ns;
  }

  double cache_hit_rate_ = 0;
  double gen_throughput_ = 0;
  bool have_cache_hit_rate_ = false;
  bool have_gen_throughput_ = false;
  std::uint64_t last_decode_ns_ = 0;  // 0: no decode report to go stale
};

// The queue whose total a QueueId's per-priority entries break down, by scalar field name.
inline constexpr const char* kQueueTotalField[kQueueIdCount] = {
    "num_running_reqs",
    "num_queue_reqs",
    "num_prefill_bootstrap_queue_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
};

}  // namespace rankstat::shm
