// Binary compatibility of the shared-memory contract, in the style of iceoryx's layout tests: every
// structure is declared a second time here, independently, from the documented offsets; the test writes
// through one declaration and reads through the other. A change to layout.hpp that moves a byte fails
// here even if someone "fixed" the static_asserts next to it.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "rankstat/shmproto/schema.hpp"

namespace {

namespace shm = rankstat::shm;

// ---- the documented layout, declared independently -------------------------------------------------

struct ExpectedSegmentHeader {
  std::uint64_t magic;                 // 0
  std::uint16_t layout_major;          // 8
  std::uint16_t layout_minor;          // 10
  std::uint32_t header_bytes;          // 12
  std::uint64_t layout_hash;           // 16
  std::uint64_t segment_bytes;         // 24
  std::uint32_t state;                 // 32
  std::uint32_t role;                  // 36
  std::uint32_t pid;                   // 40
  std::uint32_t flags;                 // 44
  std::uint64_t pid_start_ticks;       // 48
  std::uint64_t generation;            // 56
  std::uint64_t created_realtime_ns;   // 64
  std::uint64_t created_monotonic_ns;  // 72
  std::int32_t ranks[10];              // 80: tp, pp, dp, moe_ep, attn_tp, attn_dp, attn_cp, tp/pp/dp size
  std::uint8_t gap0[8];                // 120
  std::uint64_t ring_offset;           // 128
  std::uint64_t ring_bytes;            // 136
  std::uint64_t cumulative_offset;     // 144
  std::uint64_t cumulative_bytes;      // 152
  std::uint32_t max_record_bytes;      // 160
  std::uint8_t gap1[28];               // 164
  char instance[64];                   // 192
  char model_name[128];                // 256
  char engine_type[32];                // 384
  char rank_key[32];                   // 416
  char extra_labels[512];              // 448
  std::uint8_t gap2[64];               // 960
  std::uint64_t tail;                  // 1024
  std::uint64_t records_written;       // 1032
  std::uint64_t dropped_records;       // 1040
  std::uint64_t heartbeat_ns;          // 1048
  std::uint64_t oversize_records;      // 1056
  std::uint64_t closed;                // 1064
  std::uint64_t latest_record_position[8];  // 1072
  std::uint8_t gap3[144];                   // 1136
  std::uint64_t head;                       // 1280
  std::uint64_t consumer_heartbeat_ns;      // 1288
  std::uint32_t consumer_pid;               // 1296
  std::uint8_t gap4[4096 - 1300];           // 1300
};

struct ExpectedRecordHeader {
  std::uint32_t length;
  std::uint16_t type;
  std::uint16_t type_version;
  std::uint64_t sequence;
  std::uint64_t timestamp_ns;
};

struct ExpectedCumulativeHeader {
  std::uint32_t series_capacity;         // 0
  std::uint32_t bounds_capacity;         // 4
  std::uint32_t values_capacity;         // 8
  std::uint32_t text_capacity;           // 12
  std::uint8_t gap0[48];                 // 16
  std::uint32_t series_count;            // 64
  std::uint32_t bounds_used;             // 68
  std::uint32_t values_used;             // 72
  std::uint32_t registration_failures;   // 76
  std::uint32_t text_used;               // 80
  std::uint32_t registrations_no_space;  // 84
  std::uint32_t registrations_full;      // 88
  std::uint8_t gap1[36];                 // 92
};

struct ExpectedSeriesDescriptor {
  std::uint8_t kind;            // 0
  std::uint8_t gauge_mode;      // 1
  std::uint16_t bucket_count;   // 2
  std::uint32_t values_offset;  // 4
  std::uint32_t bounds_offset;  // 8
  std::uint32_t flags;          // 12
  std::uint32_t labels_offset;  // 16
  std::uint32_t labels_bytes;   // 20
  std::uint32_t help_offset;    // 24
  std::uint32_t help_bytes;     // 28
  std::uint32_t family_offset;  // 32
  std::uint32_t family_bytes;   // 36
  std::uint8_t gap0[88];        // 40
};

struct ExpectedSeriesUpdateRecord {
  std::uint32_t series_index;  // 0
  std::uint32_t op;            // 4
  double value;                // 8
};

struct ExpectedPriorityCount {
  std::int32_t priority;
  std::uint8_t queue;
  std::uint8_t flags;
  std::uint16_t gap0;
  std::int64_t count;
};

static_assert(sizeof(ExpectedSegmentHeader) == sizeof(shm::SegmentHeader));
static_assert(sizeof(ExpectedRecordHeader) == sizeof(shm::RecordHeader));
static_assert(sizeof(ExpectedCumulativeHeader) == sizeof(shm::CumulativeHeader));
static_assert(sizeof(ExpectedSeriesDescriptor) == sizeof(shm::SeriesDescriptor));
static_assert(sizeof(ExpectedSeriesUpdateRecord) == sizeof(shm::SeriesUpdateRecord));
static_assert(sizeof(ExpectedPriorityCount) == sizeof(shm::PriorityCount));

// Deterministic, non-periodic bytes, so a field read at the wrong offset sees a different value.
template <typename T>
void fill_pattern(T& object, std::uint64_t seed) {
  auto* bytes = reinterpret_cast<unsigned char*>(&object);
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    bytes[i] = static_cast<unsigned char>(state >> 56);
  }
}

template <typename To, typename From>
To reinterpret_bytes(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

template <typename A, typename B>
bool same_bytes(const A& a, const B& b) {
  static_assert(sizeof(A) == sizeof(B));
  return std::memcmp(&a, &b, sizeof(A)) == 0;
}

// The scalar fields of the scheduler snapshot as documented: name, offset, type (1 = i64, 2 = f64).
struct DocumentedField {
  std::string_view name;
  std::uint32_t offset;
  std::uint8_t type;
};
constexpr DocumentedField kDocumentedSnapshotFields[] = {
    {"num_running_reqs", 16, 1},
    {"num_queue_reqs", 24, 1},
    {"num_grammar_queue_reqs", 32, 1},
    {"gen_throughput", 40, 2},
    {"cache_hit_rate", 48, 2},
    {"decode_sum_seq_lens", 56, 1},
    {"token_usage", 64, 2},
    {"full_token_usage", 72, 2},
    {"swa_token_usage", 80, 2},
    {"mamba_usage", 88, 2},
    {"num_used_tokens", 96, 1},
    {"kv_available_tokens", 104, 1},
    {"kv_evictable_tokens", 112, 1},
    {"kv_used_tokens", 120, 1},
    {"swa_available_tokens", 128, 1},
    {"swa_evictable_tokens", 136, 1},
    {"swa_used_tokens", 144, 1},
    {"mamba_available_tokens", 152, 1},
    {"mamba_evictable_tokens", 160, 1},
    {"mamba_used_tokens", 168, 1},
    {"spec_accept_length", 176, 2},
    {"spec_accept_rate", 184, 2},
    {"spec_cap_length", 192, 2},
    {"spec_block_accept_length", 200, 2},
    {"spec_num_steps", 208, 1},
    {"spec_num_draft_tokens", 216, 1},
    {"num_retracted_reqs", 224, 1},
    {"num_paused_reqs", 232, 1},
    {"num_prefill_bootstrap_queue_reqs", 240, 1},
    {"num_prefill_inflight_queue_reqs", 248, 1},
    {"num_decode_prealloc_queue_reqs", 256, 1},
    {"num_decode_transfer_queue_reqs", 264, 1},
    {"kv_transfer_speed_gb_s", 272, 2},
    {"kv_transfer_latency_ms", 280, 2},
    {"pending_prealloc_token_usage", 288, 2},
    {"num_decode_deferred_kv_release_reqs", 296, 1},
    {"utilization", 304, 2},
    {"fwd_occupancy", 312, 2},
    {"new_token_ratio", 320, 2},
    {"is_cuda_graph", 328, 1},
    {"lora_pool_slots_used", 336, 1},
    {"lora_pool_slots_total", 344, 1},
    {"lora_pool_utilization", 352, 2},
    {"hicache_host_used_tokens", 360, 1},
    {"hicache_host_total_tokens", 368, 1},
    {"num_streaming_sessions", 376, 1},
    {"streaming_session_held_tokens", 384, 1},
    {"num_unique_running_routing_keys", 392, 1},
};

// The scalar-field part of compute_layout_hash(), over any table, so a modified table can be hashed.
std::uint64_t hash_field_table(std::span<const shm::ScalarField> fields) {
  shm::LayoutHasher h;
  for (const shm::ScalarField& f : fields) {
    h.add(f.name).add(f.offset).add(static_cast<std::uint64_t>(f.type)).add(f.group);
  }
  return h.value();
}

}  // namespace

TEST_CASE("The magic number spells RANKSTAT in memory order", "[layout]") {
  char text[sizeof shm::kMagic];
  std::memcpy(text, &shm::kMagic, sizeof text);
  CHECK(std::string_view(text, sizeof text) == "RANKSTAT");
}

TEST_CASE("The segment header matches the documented layout byte for byte", "[layout]") {
  SECTION("a pattern written through the documented layout reads back through SegmentHeader") {
    ExpectedSegmentHeader expected;
    fill_pattern(expected, 1);
    const auto actual = reinterpret_bytes<shm::SegmentHeader>(expected);
    CHECK(actual.magic == expected.magic);
    CHECK(actual.layout_major == expected.layout_major);
    CHECK(actual.layout_minor == expected.layout_minor);
    CHECK(actual.header_bytes == expected.header_bytes);
    CHECK(actual.layout_hash == expected.layout_hash);
    CHECK(actual.segment_bytes == expected.segment_bytes);
    CHECK(actual.state == expected.state);
    CHECK(actual.role == expected.role);
    CHECK(actual.pid == expected.pid);
    CHECK(actual.flags == expected.flags);
    CHECK(actual.pid_start_ticks == expected.pid_start_ticks);
    CHECK(actual.generation == expected.generation);
    CHECK(actual.created_realtime_ns == expected.created_realtime_ns);
    CHECK(actual.created_monotonic_ns == expected.created_monotonic_ns);
    CHECK(actual.tp_rank == expected.ranks[0]);
    CHECK(actual.pp_rank == expected.ranks[1]);
    CHECK(actual.dp_rank == expected.ranks[2]);
    CHECK(actual.moe_ep_rank == expected.ranks[3]);
    CHECK(actual.attn_tp_rank == expected.ranks[4]);
    CHECK(actual.attn_dp_rank == expected.ranks[5]);
    CHECK(actual.attn_cp_rank == expected.ranks[6]);
    CHECK(actual.tp_size == expected.ranks[7]);
    CHECK(actual.pp_size == expected.ranks[8]);
    CHECK(actual.dp_size == expected.ranks[9]);
    CHECK(actual.ring_offset == expected.ring_offset);
    CHECK(actual.ring_bytes == expected.ring_bytes);
    CHECK(actual.cumulative_offset == expected.cumulative_offset);
    CHECK(actual.cumulative_bytes == expected.cumulative_bytes);
    CHECK(actual.max_record_bytes == expected.max_record_bytes);
    CHECK(same_bytes(actual.instance, expected.instance));
    CHECK(same_bytes(actual.model_name, expected.model_name));
    CHECK(same_bytes(actual.engine_type, expected.engine_type));
    CHECK(same_bytes(actual.rank_key, expected.rank_key));
    CHECK(same_bytes(actual.extra_labels, expected.extra_labels));
    CHECK(actual.tail == expected.tail);
    CHECK(actual.records_written == expected.records_written);
    CHECK(actual.dropped_records == expected.dropped_records);
    CHECK(actual.heartbeat_ns == expected.heartbeat_ns);
    CHECK(actual.oversize_records == expected.oversize_records);
    CHECK(actual.closed == expected.closed);
    CHECK(same_bytes(actual.latest_record_position, expected.latest_record_position));
    CHECK(actual.head == expected.head);
    CHECK(actual.consumer_heartbeat_ns == expected.consumer_heartbeat_ns);
    CHECK(actual.consumer_pid == expected.consumer_pid);
  }

  SECTION("fields set through SegmentHeader land at the documented offsets") {
    shm::SegmentHeader actual{};
    actual.magic = shm::kMagic;
    actual.layout_major = 0x1234;
    actual.segment_bytes = 0x0102030405060708ull;
    actual.dp_rank = -7;
    actual.dp_size = 9;
    actual.max_record_bytes = 0xABCD;
    std::memcpy(actual.rank_key, "tp1-pp0-ep0", 12);
    actual.tail = 4242;
    actual.closed = 1;
    actual.latest_record_position[7] = 77;
    actual.head = 2121;
    actual.consumer_pid = 31337;
    const auto expected = reinterpret_bytes<ExpectedSegmentHeader>(actual);
    CHECK(expected.magic == shm::kMagic);
    CHECK(expected.layout_major == 0x1234);
    CHECK(expected.segment_bytes == 0x0102030405060708ull);
    CHECK(expected.ranks[2] == -7);
    CHECK(expected.ranks[9] == 9);
    CHECK(expected.max_record_bytes == 0xABCD);
    CHECK(std::string_view(expected.rank_key) == "tp1-pp0-ep0");
    CHECK(expected.tail == 4242);
    CHECK(expected.closed == 1);
    CHECK(expected.latest_record_position[7] == 77);
    CHECK(expected.head == 2121);
    CHECK(expected.consumer_pid == 31337);
  }

  SECTION("the producer and consumer groups never share a cache-line pair") {
    STATIC_REQUIRE(offsetof(ExpectedSegmentHeader, tail) == 1024);
    STATIC_REQUIRE(offsetof(ExpectedSegmentHeader, head) == 1280);
    STATIC_REQUIRE(offsetof(shm::SegmentHeader, head) - offsetof(shm::SegmentHeader, closed) >= 2 * 64);
  }
}

TEST_CASE("Every field shared between processes is naturally aligned for lock-free atomics", "[layout]") {
  STATIC_REQUIRE(alignof(shm::SegmentHeader) == 8);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, magic) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, state) % 4 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, tail) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, records_written) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, dropped_records) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, heartbeat_ns) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, closed) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, latest_record_position) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::SegmentHeader, head) % 8 == 0);
  STATIC_REQUIRE(offsetof(shm::CumulativeHeader, series_count) % 4 == 0);
  STATIC_REQUIRE(offsetof(shm::CumulativeHeader, registration_failures) % 4 == 0);
  STATIC_REQUIRE(std::atomic_ref<std::uint64_t>::required_alignment == 8);
  STATIC_REQUIRE(std::atomic<std::uint64_t>::is_always_lock_free);
}

TEST_CASE("Record headers, cumulative headers, descriptors and priority entries match the documented layout",
          "[layout]") {
  SECTION("record header") {
    ExpectedRecordHeader expected;
    fill_pattern(expected, 2);
    const auto actual = reinterpret_bytes<shm::RecordHeader>(expected);
    CHECK(actual.length == expected.length);
    CHECK(actual.type == expected.type);
    CHECK(actual.type_version == expected.type_version);
    CHECK(actual.sequence == expected.sequence);
    CHECK(actual.timestamp_ns == expected.timestamp_ns);
    STATIC_REQUIRE(static_cast<std::uint16_t>(shm::RecordType::kPadding) == 0xFFFF);
    STATIC_REQUIRE(static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot) == 1);
    STATIC_REQUIRE(shm::kRecordAlignment == 64);
  }
  SECTION("cumulative header") {
    ExpectedCumulativeHeader expected;
    fill_pattern(expected, 3);
    const auto actual = reinterpret_bytes<shm::CumulativeHeader>(expected);
    CHECK(actual.series_capacity == expected.series_capacity);
    CHECK(actual.bounds_capacity == expected.bounds_capacity);
    CHECK(actual.values_capacity == expected.values_capacity);
    CHECK(actual.series_count == expected.series_count);
    CHECK(actual.bounds_used == expected.bounds_used);
    CHECK(actual.values_used == expected.values_used);
    CHECK(actual.registration_failures == expected.registration_failures);
    CHECK(actual.text_capacity == expected.text_capacity);
    CHECK(actual.text_used == expected.text_used);
    CHECK(actual.registrations_no_space == expected.registrations_no_space);
    CHECK(actual.registrations_full == expected.registrations_full);
  }
  SECTION("series descriptor") {
    ExpectedSeriesDescriptor expected;
    fill_pattern(expected, 4);
    const auto actual = reinterpret_bytes<shm::SeriesDescriptor>(expected);
    CHECK(actual.kind == expected.kind);
    CHECK(actual.gauge_mode == expected.gauge_mode);
    CHECK(actual.bucket_count == expected.bucket_count);
    CHECK(actual.values_offset == expected.values_offset);
    CHECK(actual.bounds_offset == expected.bounds_offset);
    CHECK(actual.flags == expected.flags);
    CHECK(actual.labels_offset == expected.labels_offset);
    CHECK(actual.labels_bytes == expected.labels_bytes);
    CHECK(actual.help_offset == expected.help_offset);
    CHECK(actual.help_bytes == expected.help_bytes);
    CHECK(actual.family_offset == expected.family_offset);
    CHECK(actual.family_bytes == expected.family_bytes);
    STATIC_REQUIRE(static_cast<int>(shm::SeriesKind::kCounter) == 1);
    STATIC_REQUIRE(static_cast<int>(shm::SeriesKind::kGauge) == 2);
    STATIC_REQUIRE(static_cast<int>(shm::SeriesKind::kHistogram) == 3);
    STATIC_REQUIRE(static_cast<int>(shm::SeriesKind::kSummary) == 4);
    STATIC_REQUIRE(shm::series_value_words(shm::SeriesKind::kSummary, 0) == 3);
    STATIC_REQUIRE(shm::series_value_words(shm::SeriesKind::kHistogram, 5) == 1 + 5 + 1 + 1);
  }
  SECTION("series update record") {
    ExpectedSeriesUpdateRecord expected;
    fill_pattern(expected, 6);
    const auto actual = reinterpret_bytes<shm::SeriesUpdateRecord>(expected);
    CHECK(actual.series_index == expected.series_index);
    CHECK(actual.op == expected.op);
    CHECK(same_bytes(actual.value, expected.value));
    STATIC_REQUIRE(static_cast<std::uint16_t>(shm::RecordType::kSeriesUpdate) == 2);
  }
  SECTION("priority entry") {
    ExpectedPriorityCount expected;
    fill_pattern(expected, 5);
    const auto actual = reinterpret_bytes<shm::PriorityCount>(expected);
    CHECK(actual.priority == expected.priority);
    CHECK(actual.queue == expected.queue);
    CHECK(actual.flags == expected.flags);
    CHECK(actual.count == expected.count);
  }
}

TEST_CASE("The scheduler snapshot field table matches the documented offsets and types", "[layout]") {
  const auto fields = std::span(shm::kSchedulerScalarFields);
  REQUIRE(fields.size() == std::size(kDocumentedSnapshotFields));
  for (std::size_t i = 0; i < fields.size(); ++i) {
    INFO("field " << i << " " << fields[i].name);
    CHECK(std::string_view(fields[i].name) == kDocumentedSnapshotFields[i].name);
    CHECK(fields[i].offset == kDocumentedSnapshotFields[i].offset);
    CHECK(static_cast<int>(fields[i].type) == kDocumentedSnapshotFields[i].type);
  }
  STATIC_REQUIRE(sizeof(shm::SchedulerSnapshot) == 576);
  STATIC_REQUIRE(offsetof(shm::SchedulerSnapshot, report_kind) == 0);
  STATIC_REQUIRE(offsetof(shm::SchedulerSnapshot, priority_count) == 4);
  STATIC_REQUIRE(offsetof(shm::SchedulerSnapshot, groups) == 8);
  STATIC_REQUIRE(offsetof(shm::SchedulerSnapshot, routing_key_running_req_counts) == 400);
  STATIC_REQUIRE(offsetof(shm::SchedulerSnapshot, routing_key_all_req_counts) == 488);
  STATIC_REQUIRE(shm::kSchedulerRecordMaxBytes == 24 + 576 + 64 * 16);

  SECTION("a value written at a documented offset reads back through the struct") {
    shm::SchedulerSnapshot snapshot{};
    unsigned char bytes[sizeof snapshot]{};
    const std::int64_t running = 123456789;
    const double throughput = 4321.5;
    std::memcpy(bytes + 16, &running, sizeof running);
    std::memcpy(bytes + 40, &throughput, sizeof throughput);
    std::memcpy(&snapshot, bytes, sizeof snapshot);
    CHECK(snapshot.num_running_reqs == running);
    CHECK(snapshot.gen_throughput == throughput);
  }
}

TEST_CASE("The layout hash is a compile-time constant that is stable within a build", "[layout][hash]") {
  STATIC_REQUIRE(shm::kLayoutHash == shm::compute_layout_hash());
  CHECK(shm::kLayoutHash != 0);
  CHECK(shm::compute_layout_hash() == shm::compute_layout_hash());
}

TEST_CASE("The layout hash changes when any entry of the field table changes", "[layout][hash]") {
  std::array<shm::ScalarField, std::size(shm::kSchedulerScalarFields)> table{};
  std::copy(std::begin(shm::kSchedulerScalarFields), std::end(shm::kSchedulerScalarFields), table.begin());
  const std::uint64_t original = hash_field_table(table);
  CHECK(hash_field_table(table) == original);

  auto modified = table;
  SECTION("an offset moves") {
    modified[5].offset += 8;
  }
  SECTION("a field is renamed") {
    modified[5].name = "decode_sum_seq_len";
  }
  SECTION("a type changes") {
    modified[5].type = shm::FieldType::kF64;
  }
  SECTION("a field changes its optional group") {
    modified[5].group = shm::kGroupLora;
  }
  SECTION("two fields swap places") {
    std::swap(modified[3], modified[4]);
  }
  CHECK(hash_field_table(modified) != original);
}

TEST_CASE("The layout hasher separates names, offsets and sizes unambiguously", "[layout][hash]") {
  using shm::LayoutHasher;
  CHECK(LayoutHasher().field("a", 0, 8).value() != LayoutHasher().field("a", 8, 0).value());
  CHECK(LayoutHasher().add("ab").add("c").value() != LayoutHasher().add("a").add("bc").value());
  CHECK(LayoutHasher().field("tail", 1024, 8).value() != LayoutHasher().field("tail", 1032, 8).value());
  CHECK(LayoutHasher().add("x").value() == LayoutHasher().add("x").value());
}

namespace {

template <std::size_t N>
void append_table(std::string& out, const char* title, std::size_t bytes, const shm::FieldInfo (&fields)[N]) {
  out += "### `" + std::string(title) + "` (" + std::to_string(bytes) + " bytes)\n\n";
  out += "| offset | bytes | field |\n|---:|---:|---|\n";
  for (const shm::FieldInfo& f : fields) {
    out += "| " + std::to_string(f.offset) + " | " + std::to_string(f.size) + " | " +
           (f.reserved ? std::string("reserved") : "`" + std::string(f.name) + "`") + " |\n";
  }
  out += "\n";
}

// The generated part of docs/shm-layout.md: every structure's field list as a table.
std::string field_offset_tables() {
  std::string out;
  append_table(out, "SegmentHeader", sizeof(shm::SegmentHeader), shm::kSegmentHeaderFields);
  append_table(out, "RecordHeader", sizeof(shm::RecordHeader), shm::kRecordHeaderFields);
  append_table(out, "SeriesUpdateRecord", sizeof(shm::SeriesUpdateRecord), shm::kSeriesUpdateRecordFields);
  append_table(out, "CumulativeHeader", sizeof(shm::CumulativeHeader), shm::kCumulativeHeaderFields);
  append_table(out, "SeriesDescriptor", sizeof(shm::SeriesDescriptor), shm::kSeriesDescriptorFields);
  append_table(out, "PriorityCount", sizeof(shm::PriorityCount), shm::kPriorityCountFields);
  out += "### `SchedulerSnapshot` (" + std::to_string(sizeof(shm::SchedulerSnapshot)) +
         " bytes, then `priority_count` × `PriorityCount`)\n\n";
  out += "| offset | bytes | field |\n|---:|---:|---|\n";
  out += "| 0 | 4 | `report_kind` |\n| 4 | 4 | `priority_count` |\n| 8 | 8 | `groups` |\n";
  for (const shm::ScalarField& f : shm::kSchedulerScalarFields) {
    out += "| " + std::to_string(f.offset) + " | 8 | `" + f.name + "` (" +
           (f.type == shm::FieldType::kI64 ? "i64" : "f64") + ") |\n";
  }
  out += "| " + std::to_string(offsetof(shm::SchedulerSnapshot, routing_key_running_req_counts)) + " | " +
         std::to_string(sizeof(shm::SchedulerSnapshot::routing_key_running_req_counts)) +
         " | `routing_key_running_req_counts` (u64 × " + std::to_string(shm::kRoutingKeyBins) + ") |\n";
  out += "| " + std::to_string(offsetof(shm::SchedulerSnapshot, routing_key_all_req_counts)) + " | " +
         std::to_string(sizeof(shm::SchedulerSnapshot::routing_key_all_req_counts)) +
         " | `routing_key_all_req_counts` (u64 × " + std::to_string(shm::kRoutingKeyBins) + ") |\n";
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("docs/shm-layout.md's offset tables are generated from the field lists and current",
          "[layout][docs]") {
  constexpr std::string_view kBegin = "<!-- field tables: begin -->\n";
  constexpr std::string_view kEnd = "<!-- field tables: end -->\n";
  const std::string path = std::string(RANKSTAT_SOURCE_DIR) + "/docs/shm-layout.md";
  std::string doc = read_text(path);
  REQUIRE_FALSE(doc.empty());
  const auto begin = doc.find(kBegin);
  const auto end = doc.find(kEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  REQUIRE(begin < end);
  const std::string expected = field_offset_tables();
  const std::string current = doc.substr(begin + kBegin.size(), end - begin - kBegin.size());
  if (current != expected) {
    if (const char* update = std::getenv("RANKSTAT_UPDATE_GOLDEN");
        update != nullptr && update == std::string("1")) {
      doc.replace(begin + kBegin.size(), current.size(), expected);
      std::ofstream(path) << doc;
    }
  }
  INFO("regenerate with RANKSTAT_UPDATE_GOLDEN=1 test_shmproto '[docs]'; expected:\n" << expected);
  CHECK(current == expected);
}

TEST_CASE("every structure's field list covers it byte for byte and is in offset order", "[layout]") {
  STATIC_REQUIRE(shm::fields_tile(shm::kSegmentHeaderFields, sizeof(shm::SegmentHeader)));
  STATIC_REQUIRE(shm::fields_tile(shm::kCumulativeHeaderFields, sizeof(shm::CumulativeHeader)));
  STATIC_REQUIRE(shm::snapshot_fields_tile());
  // The check itself rejects a gap, an overlap and a short list.
  constexpr shm::FieldInfo gap[] = {{"a", 0, 4, false}, {"b", 8, 8, false}};
  constexpr shm::FieldInfo overlap[] = {{"a", 0, 8, false}, {"b", 4, 8, false}};
  constexpr shm::FieldInfo whole[] = {{"a", 0, 8, false}, {"b", 8, 8, true}};
  STATIC_REQUIRE_FALSE(shm::fields_tile(gap, 16));
  STATIC_REQUIRE_FALSE(shm::fields_tile(overlap, 16));
  STATIC_REQUIRE_FALSE(shm::fields_tile(whole, 24));
  STATIC_REQUIRE(shm::fields_tile(whole, 16));
}

TEST_CASE("the layout hash covers the values of every enumeration a segment stores", "[layout][hash]") {
  // Renumbering any one value changes the hash: the hash of the list with one value changed differs.
  auto hash_values = [](std::span<const shm::NamedValue> values) {
    shm::LayoutHasher h;
    for (const auto& v : values) h.add(v.name).add(v.value);
    return h.value();
  };
  std::vector<shm::NamedValue> values(std::begin(shm::kContractValues), std::end(shm::kContractValues));
  const std::uint64_t original = hash_values(values);
  for (std::size_t i = 0; i < values.size(); ++i) {
    auto changed = values;
    changed[i].value += 1;
    INFO(values[i].name);
    CHECK(hash_values(changed) != original);
  }
  CHECK(std::any_of(values.begin(), values.end(), [](const shm::NamedValue& v) {
    return std::string_view(v.name) == "QueueId::kDecodeTransfer";
  }));
}
