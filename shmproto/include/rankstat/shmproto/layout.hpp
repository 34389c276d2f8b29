// The rankstat shared-memory contract, layout major 3.
//
// One segment per producing rank thread, a file named rankstat.<instance>.<role>.<rank-key> in the shm
// directory. Byte-level diagrams, the memory-ordering protocol and the compatibility rule are in
// docs/shm-layout.md; every offset below is pinned by a static_assert so a change that moves a field
// fails to compile instead of silently breaking a reader built from another revision.
//
// Rules for everything in this file: fixed-width fields only (no size_t, bool, enums without an
// underlying type, pointers), little-endian x86-64/aarch64 only, explicit padding, and every atomic
// field 8-byte aligned and lock-free so it is address-free across processes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace rankstat::shm {

// "RANKSTAT" read as a little-endian u64. Written last, with a release store: a reader that sees the
// magic sees a fully initialised header.
inline constexpr std::uint64_t kMagic = 0x5441'5453'4B4E'4152ull;

// Compatibility rule: a reader accepts a segment only if layout_major equals its own major. Within one
// major, a newer minor only appends (new header fields in reserved space, new record types, new fields
// at the end of a record whose length grows). A reader of minor m reads min(m, segment minor) worth of
// fields. layout_hash must equal the reader's hash when the minors are equal.
inline constexpr std::uint16_t kLayoutMajor = 3;
inline constexpr std::uint16_t kLayoutMinor = 0;

inline constexpr std::uint32_t kHeaderBytes = 4096;
inline constexpr std::uint32_t kCacheGroupBytes = 128;  // Aeron-style: two lines against the pair prefetcher

// Producer and consumer hot fields live in separate 256-byte groups, 128 bytes apart at least.
inline constexpr std::uint32_t kProducerGroupOffset = 1024;
inline constexpr std::uint32_t kConsumerGroupOffset = 1280;

inline constexpr std::uint32_t kInstanceBytes = 64;
inline constexpr std::uint32_t kModelNameBytes = 128;
inline constexpr std::uint32_t kEngineTypeBytes = 32;
inline constexpr std::uint32_t kRankKeyBytes = 32;
inline constexpr std::uint32_t kExtraLabelsBytes = 512;
inline constexpr std::uint32_t kMaxRecordTypes = 8;  // latest_record_position slots

inline constexpr std::int32_t kRankUnset = -1;

// --- one field list per structure ------------------------------------------------------------------
//
// Each structure below is followed by its field list, an X-macro written once: F(T, member, offset) for
// a field the contract gives meaning to, R(T, member, offset) for reserved bytes. From the list come the
// offset asserts, a table (FieldInfo) from which the layout hash (schema.hpp) and the docs' offset
// tables are made, and a check that the listed fields tile the structure: a field added to a struct but
// not to its list, or a gap, does not compile. tests/unit/shmproto/test_layout.cpp keeps an independent,
// hand-written copy of every structure as the cross-check.
struct FieldInfo {
  const char* name;
  std::uint64_t offset;
  std::uint64_t size;
  bool reserved;
};

// Whether `fields`, in order, cover [0, total) exactly once.
template <std::size_t N>
constexpr bool fields_tile(const FieldInfo (&fields)[N], std::uint64_t total) {
  std::uint64_t at = 0;
  for (const FieldInfo& f : fields) {
    if (f.offset != at) return false;
    at += f.size;
  }
  return at == total;
}

#define RANKSTAT_LAYOUT_ASSERT(T, member, offset) \
  static_assert(offsetof(T, member) == (offset), #T "::" #member " moved");
#define RANKSTAT_LAYOUT_FIELD(T, member, offset) \
  FieldInfo{#member, offsetof(T, member), sizeof(T::member), false},
#define RANKSTAT_LAYOUT_RESERVED(T, member, offset) \
  FieldInfo{#member, offsetof(T, member), sizeof(T::member), true},
// Expands a structure's list into its asserts and its table k<T>Fields, and checks the tiling.
#define RANKSTAT_DEFINE_LAYOUT(T, LIST)                                                                   \
  LIST(T, RANKSTAT_LAYOUT_ASSERT, RANKSTAT_LAYOUT_ASSERT)                                                 \
  inline constexpr FieldInfo k##T##Fields[] = {LIST(T, RANKSTAT_LAYOUT_FIELD, RANKSTAT_LAYOUT_RESERVED)}; \
  static_assert(fields_tile(k##T##Fields, sizeof(T)), #T "'s field list misses a field or leaves a gap");

// An enumeration written as a list X(enumerator, text) and expanded into the enum class `E` (values 0,
// 1, ... in list order) and its one text table `TEXTS`, indexed by value: a reason or a label added to
// the list gets its text in the same line, and no switch elsewhere can miss it.
#define RANKSTAT_ENUM_ENUMERATOR(enumerator, text) enumerator,
#define RANKSTAT_ENUM_TEXT(enumerator, text) text,
#define RANKSTAT_DEFINE_ENUM_WITH_TEXTS(E, TEXTS, LIST)           \
  enum class E : std::uint8_t { LIST(RANKSTAT_ENUM_ENUMERATOR) }; \
  inline constexpr std::string_view TEXTS[] = {LIST(RANKSTAT_ENUM_TEXT)};

enum class SegmentState : std::uint32_t {
  kInitializing = 0,  // never visible under the final name: creation happens under a temporary name
  kReady = 1,
  // A clean exit is signalled by SegmentHeader::closed (producer group), not here: group A is immutable.
};

enum class Role : std::uint32_t {
  kUnknown = 0,
  kScheduler = 1,  // one per TP/PP/DP rank
  kTokenizer = 2,  // HTTP / tokenizer front end
  kDetokenizer = 3,
  kOther = 4,
};

// Identity flags (SegmentHeader::flags).
inline constexpr std::uint32_t kFlagPriorityScheduling = 1u << 0;    // add the priority label
inline constexpr std::uint32_t kFlagAllSchedulersMetrics = 1u << 1;  // every rank exports, not just attn_tp 0
inline constexpr std::uint32_t kFlagDpAttention = 1u << 2;

// Page 0 of every segment. Group A (bytes 0..1023) is written once by the creator before the magic;
// group B (producer) and group C (consumer) are the only fields that change afterwards.
struct SegmentHeader {
  // --- group A: identity and geometry, immutable after the magic is published ---
  std::uint64_t magic;                   // 0: kMagic, stored last (release)
  std::uint16_t layout_major;            // 8
  std::uint16_t layout_minor;            // 10
  std::uint32_t header_bytes;            // 12: kHeaderBytes
  std::uint64_t layout_hash;             // 16: kLayoutHash of the writer's build
  std::uint64_t segment_bytes;           // 24: must equal the file size
  std::uint32_t state;                   // 32: SegmentState; atomic (release on change)
  std::uint32_t role;                    // 36: Role
  std::uint32_t pid;                     // 40: getpid() of the writer at creation
  std::uint32_t flags;                   // 44: kFlag*
  std::uint64_t pid_start_ticks;         // 48: field 22 of /proc/<pid>/stat; pid alone is reused
  std::uint64_t generation;              // 56: random nonce per incarnation
  std::uint64_t created_realtime_ns;     // 64: wall clock, for humans only
  std::uint64_t created_monotonic_ns;    // 72: CLOCK_MONOTONIC
  std::int32_t tp_rank;                  // 80: kRankUnset when not applicable
  std::int32_t pp_rank;                  // 84
  std::int32_t dp_rank;                  // 88: kRankUnset -> no dp_rank label
  std::int32_t moe_ep_rank;              // 92
  std::int32_t attn_tp_rank;             // 96
  std::int32_t attn_dp_rank;             // 100
  std::int32_t attn_cp_rank;             // 104
  std::int32_t tp_size;                  // 108
  std::int32_t pp_size;                  // 112
  std::int32_t dp_size;                  // 116
  std::uint32_t reserved_a0;             // 120
  std::uint32_t reserved_a1;             // 124
  std::uint64_t ring_offset;             // 128: from the start of the segment
  std::uint64_t ring_bytes;              // 136: power of two
  std::uint64_t cumulative_offset;       // 144
  std::uint64_t cumulative_bytes;        // 152
  std::uint32_t max_record_bytes;        // 160: largest record the writer will append
  std::uint32_t reserved_a2;             // 164
  std::uint8_t reserved_a3[24];          // 168
  char instance[kInstanceBytes];         // 192: NUL-terminated [A-Za-z0-9_-]
  char model_name[kModelNameBytes];      // 256: NUL-terminated UTF-8
  char engine_type[kEngineTypeBytes];    // 384: "unified" | "prefill" | "decode" | ...
  char rank_key[kRankKeyBytes];          // 416: last component of the segment name
  char extra_labels[kExtraLabelsBytes];  // 448: "name\0value\0name\0value\0\0"
  std::uint8_t reserved_a4[64];          // 960

  // --- group B: producer-owned (bytes 1024..1279) ---
  std::uint64_t tail;              // 1024: bytes ever committed to the ring; release store = publication
  std::uint64_t records_written;   // 1032: records accepted (== next sequence number)
  std::uint64_t dropped_records;   // 1040: records refused because the ring was full
  std::uint64_t heartbeat_ns;      // 1048: CLOCK_MONOTONIC of the last append or heartbeat
  std::uint64_t oversize_records;  // 1056: records refused because they exceed max_record_bytes
  std::uint64_t closed;            // 1064: 1 after a clean exit (release); the writer appends no more
  std::uint64_t latest_record_position[kMaxRecordTypes];  // 1072: ring position of the newest record per
                                                          // type, +1 (0 = none)
  std::uint8_t reserved_b1[144];                          // 1136

  // --- group C: consumer-owned (bytes 1280..1535) ---
  std::uint64_t head;                   // 1280: bytes consumed; release store after copying out
  std::uint64_t consumer_heartbeat_ns;  // 1288: CLOCK_MONOTONIC of the consumer's last drain
  std::uint32_t consumer_pid;           // 1296
  std::uint32_t reserved_c0;            // 1300
  std::uint8_t reserved_c1[232];        // 1304

  std::uint8_t reserved_tail[kHeaderBytes - 1536];  // room for minor versions to append
};

static_assert(std::is_standard_layout_v<SegmentHeader> && std::is_trivially_copyable_v<SegmentHeader>);
static_assert(sizeof(SegmentHeader) == kHeaderBytes, "the header is exactly one page");
// clang-format off
#define RANKSTAT_SEGMENT_HEADER_FIELDS(T, F, R)                                                      \
  F(T, magic, 0) F(T, layout_major, 8) F(T, layout_minor, 10) F(T, header_bytes, 12)                \
  F(T, layout_hash, 16) F(T, segment_bytes, 24) F(T, state, 32) F(T, role, 36) F(T, pid, 40)        \
  F(T, flags, 44) F(T, pid_start_ticks, 48) F(T, generation, 56) F(T, created_realtime_ns, 64)     \
  F(T, created_monotonic_ns, 72) F(T, tp_rank, 80) F(T, pp_rank, 84) F(T, dp_rank, 88)             \
  F(T, moe_ep_rank, 92) F(T, attn_tp_rank, 96) F(T, attn_dp_rank, 100) F(T, attn_cp_rank, 104)     \
  F(T, tp_size, 108) F(T, pp_size, 112) F(T, dp_size, 116) R(T, reserved_a0, 120)                  \
  R(T, reserved_a1, 124) F(T, ring_offset, 128) F(T, ring_bytes, 136) F(T, cumulative_offset, 144) \
  F(T, cumulative_bytes, 152) F(T, max_record_bytes, 160) R(T, reserved_a2, 164)                   \
  R(T, reserved_a3, 168) F(T, instance, 192) F(T, model_name, 256) F(T, engine_type, 384)          \
  F(T, rank_key, 416) F(T, extra_labels, 448) R(T, reserved_a4, 960)                               \
  F(T, tail, kProducerGroupOffset) F(T, records_written, 1032) F(T, dropped_records, 1040)         \
  F(T, heartbeat_ns, 1048) F(T, oversize_records, 1056) F(T, closed, 1064)                         \
  F(T, latest_record_position, 1072) R(T, reserved_b1, 1136)                                       \
  F(T, head, kConsumerGroupOffset) F(T, consumer_heartbeat_ns, 1288) F(T, consumer_pid, 1296)      \
  R(T, reserved_c0, 1300) R(T, reserved_c1, 1304) R(T, reserved_tail, 1536)
// clang-format on
RANKSTAT_DEFINE_LAYOUT(SegmentHeader, RANKSTAT_SEGMENT_HEADER_FIELDS)
static_assert(kConsumerGroupOffset - kProducerGroupOffset >= 2 * kCacheGroupBytes);

// --- the record ring ---------------------------------------------------------------------------------
//
// Every record starts with this header and is followed by its payload. Records start on 64-byte
// boundaries (two records never share a cache line); `length` is the true size, the slot is
// align_up(length, kRecordAlignment). A record that would cross the end of the ring is preceded by a
// padding record covering the rest of the ring, so every record is contiguous.
struct RecordHeader {
  std::uint32_t length;        // 0: header + payload bytes
  std::uint16_t type;          // 4: RecordType
  std::uint16_t type_version;  // 6: per-type version; readers skip versions they do not know
  std::uint64_t sequence;      // 8: dense over accepted records of this segment (padding excluded)
  std::uint64_t timestamp_ns;  // 16: CLOCK_MONOTONIC at append; orders mostrecent across ranks
};
static_assert(sizeof(RecordHeader) == 24);
// clang-format off
#define RANKSTAT_RECORD_HEADER_FIELDS(T, F, R) \
  F(T, length, 0) F(T, type, 4) F(T, type_version, 6) F(T, sequence, 8) F(T, timestamp_ns, 16)
// clang-format on
RANKSTAT_DEFINE_LAYOUT(RecordHeader, RANKSTAT_RECORD_HEADER_FIELDS)

inline constexpr std::uint32_t kRecordAlignment = 64;
inline constexpr std::uint64_t kMinRingBytes = 4096;
inline constexpr std::uint64_t kMaxRingBytes = 1ull << 30;
inline constexpr std::uint32_t kMaxRecordBytes = 16384;

enum class RecordType : std::uint16_t {
  kPadding = 0xFFFF,
  kSchedulerSnapshot = 1,
  kSeriesUpdate = 2,  // SeriesUpdateRecord: one gauge value as set, in order, timestamped
};

// Payload of a kSeriesUpdate record (type_version 1). The cumulative block holds the same value (what
// is exported); the record is how the daemon sees every value of a gauge in order, not only the last.
struct SeriesUpdateRecord {
  std::uint32_t series_index;  // 0: descriptor index in the cumulative block
  std::uint32_t op;            // 4: SeriesUpdateOp
  double value;                // 8: the gauge's value after the update
};
static_assert(sizeof(SeriesUpdateRecord) == 16);
// clang-format off
#define RANKSTAT_SERIES_UPDATE_RECORD_FIELDS(T, F, R) F(T, series_index, 0) F(T, op, 4) F(T, value, 8)
// clang-format on
RANKSTAT_DEFINE_LAYOUT(SeriesUpdateRecord, RANKSTAT_SERIES_UPDATE_RECORD_FIELDS)
enum class SeriesUpdateOp : std::uint32_t { kGaugeSet = 1 };
inline constexpr std::uint16_t kSeriesUpdateVersion = 1;

constexpr std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

constexpr bool is_power_of_two(std::uint64_t value) {
  return value != 0 && (value & (value - 1)) == 0;
}

// --- the cumulative block ------------------------------------------------------------------------------
//
// Counters, histograms and standalone gauges kept as running state by the single writer. Series are
// appended at run time: the writer fills a descriptor (and, for histograms, its bucket bounds) and only
// then publishes series_count with a release store. A published descriptor never changes. Values are
// 8-byte words updated with relaxed atomic stores; gauges and histograms carry a per-series sequence
// word (even = stable) so a reader gets a consistent (value, timestamp) or (buckets, sum).
struct CumulativeHeader {
  std::uint32_t series_capacity;        // 0: number of SeriesDescriptor slots
  std::uint32_t bounds_capacity;        // 4: number of f64 bucket bounds
  std::uint32_t values_capacity;        // 8: number of 8-byte value words
  std::uint32_t text_capacity;          // 12: bytes of the text area (label lists and help texts)
  std::uint8_t reserved1[48];           // 16
  std::uint32_t series_count;           // 64: published descriptors (release store by the writer)
  std::uint32_t bounds_used;            // 68: informational
  std::uint32_t values_used;            // 72: informational
  std::uint32_t registration_failures;  // 76: series the writer could not add (block full, bad name)
  std::uint32_t text_used;              // 80: informational
  // Of registration_failures, those refused for room (counted by the writer, exported by the daemon as
  // rankstat_series_registrations_refused_total{reason}): no_space, the shm directory had no page left
  // for the series (its pages are reserved as the block grows); full, the block's capacity is used up.
  std::uint32_t registrations_no_space;  // 84
  std::uint32_t registrations_full;      // 88
  std::uint8_t reserved2[36];            // 92
};
static_assert(sizeof(CumulativeHeader) == 128);
// clang-format off
#define RANKSTAT_CUMULATIVE_HEADER_FIELDS(T, F, R)                                                   \
  F(T, series_capacity, 0) F(T, bounds_capacity, 4) F(T, values_capacity, 8) F(T, text_capacity, 12) \
  R(T, reserved1, 16) F(T, series_count, 64) F(T, bounds_used, 68) F(T, values_used, 72)           \
  F(T, registration_failures, 76) F(T, text_used, 80) F(T, registrations_no_space, 84)             \
  F(T, registrations_full, 88) R(T, reserved2, 92)
// clang-format on
RANKSTAT_DEFINE_LAYOUT(CumulativeHeader, RANKSTAT_CUMULATIVE_HEADER_FIELDS)

enum class SeriesKind : std::uint8_t {
  kCounter = 1,    // values: [f64 total]
  kGauge = 2,      // values: [seq, f64 value, u64 set_ns (0 = never set)]
  kHistogram = 3,  // values: [seq, u64 count per bucket (bucket_count finite + 1 for +Inf), f64 sum]
  kSummary = 4,    // values: [seq, u64 count, f64 sum] (prometheus_client's multiprocess summary)
};
inline constexpr std::uint8_t kSeriesKindMax = 4;

// Multiprocess aggregation mode of a gauge family, as prometheus_client names them.
enum class GaugeMode : std::uint8_t {
  kAll = 0,
  kLiveAll = 1,
  kSum = 2,
  kLiveSum = 3,
  kMin = 4,
  kLiveMin = 5,
  kMax = 6,
  kLiveMax = 7,
  kMostRecent = 8,
  kLiveMostRecent = 9,
};
inline constexpr std::uint8_t kGaugeModeCount = 10;

// The series carries only its own labels, not the segment's identity labels: what a binding that passes
// the engine's own label dicts (prometheus_client's interface) registers.
inline constexpr std::uint32_t kSeriesWithoutIdentityLabels = 1u << 0;

inline constexpr std::uint16_t kMaxHistogramBuckets = 256;

// A series' texts (family name, label list, help) live in the text area, each located by offset and
// length: any length the area has room for, any byte (a NUL inside a label value included). A label list
// is, per label, a u32 name length, the name, a u32 value length and the value (lengths little-endian and
// unaligned; the empty list is 0 bytes). Layout 3.0 replaced 2.0's inline 96-byte family name and its
// NUL-separated label lists, which could not carry a NUL nor a long name.
struct SeriesDescriptor {
  std::uint8_t kind;            // 0: SeriesKind
  std::uint8_t gauge_mode;      // 1: GaugeMode (gauges only)
  std::uint16_t bucket_count;   // 2: finite bucket bounds (histograms only)
  std::uint32_t values_offset;  // 4: first value word, index into the values area
  std::uint32_t bounds_offset;  // 8: first bound, index into the bounds area
  std::uint32_t flags;          // 12: kSeries* bits
  std::uint32_t labels_offset;  // 16: byte offset of the label list in the text area
  std::uint32_t labels_bytes;   // 20: bytes of the label list (0: no labels)
  std::uint32_t help_offset;    // 24: byte offset of the help text in the text area
  std::uint32_t help_bytes;     // 28: help text bytes, no terminator (0: no help)
  std::uint32_t family_offset;  // 32: byte offset of the family name (as exposed) in the text area
  std::uint32_t family_bytes;   // 36: family name bytes, no terminator (never 0)
  std::uint8_t reserved[88];    // 40
};
static_assert(sizeof(SeriesDescriptor) == 128);
// clang-format off
#define RANKSTAT_SERIES_DESCRIPTOR_FIELDS(T, F, R)                                                  \
  F(T, kind, 0) F(T, gauge_mode, 1) F(T, bucket_count, 2) F(T, values_offset, 4)                  \
  F(T, bounds_offset, 8) F(T, flags, 12) F(T, labels_offset, 16) F(T, labels_bytes, 20)           \
  F(T, help_offset, 24) F(T, help_bytes, 28) F(T, family_offset, 32) F(T, family_bytes, 36)       \
  R(T, reserved, 40)
// clang-format on
RANKSTAT_DEFINE_LAYOUT(SeriesDescriptor, RANKSTAT_SERIES_DESCRIPTOR_FIELDS)

// Value words a series of this kind occupies.
constexpr std::uint32_t series_value_words(SeriesKind kind, std::uint16_t bucket_count) {
  switch (kind) {
    case SeriesKind::kCounter:
      return 1;
    case SeriesKind::kGauge:
      return 3;
    case SeriesKind::kHistogram:
      return 1u + bucket_count + 1u + 1u;
    case SeriesKind::kSummary:
      return 3;
  }
  return 0;
}

// Largest capacities a writer may ask for and a reader accepts.
inline constexpr std::uint32_t kMaxSeriesCapacity = 1u << 20;
inline constexpr std::uint32_t kMaxBoundsCapacity = 1u << 24;
inline constexpr std::uint32_t kMaxValuesCapacity = 1u << 24;
inline constexpr std::uint32_t kMaxTextCapacity = 1u << 28;

// Region sizes for a cumulative block of the given capacities; offsets are relative to the block start.
struct CumulativeGeometry {
  std::uint32_t series_capacity = 0;
  std::uint32_t bounds_capacity = 0;
  std::uint32_t values_capacity = 0;
  std::uint32_t text_capacity = 0;  // bytes; 0 gives kDefaultTextBytesPerSeries per series

  constexpr std::uint64_t descriptors_offset() const { return sizeof(CumulativeHeader); }
  constexpr std::uint64_t bounds_offset() const {
    return descriptors_offset() + std::uint64_t{series_capacity} * sizeof(SeriesDescriptor);
  }
  constexpr std::uint64_t values_offset() const {
    return bounds_offset() + std::uint64_t{bounds_capacity} * 8;
  }
  constexpr std::uint64_t text_offset() const { return values_offset() + std::uint64_t{values_capacity} * 8; }
  constexpr std::uint32_t text_bytes() const {
    return text_capacity != 0 ? text_capacity : series_capacity * kDefaultTextBytesPerSeries;
  }
  constexpr std::uint64_t total_bytes() const { return align_up(text_offset() + text_bytes(), kHeaderBytes); }
  static constexpr std::uint32_t kDefaultTextBytesPerSeries = 192;
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared counters must be address-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "shared counters must be address-free");

}  // namespace rankstat::shm
