// librankstat.so: the C ABI of rankstat.h over rankstat::Reporter.
//
// Every exported function catches everything: an exception must never unwind into C or Python frames.
// Error messages live in thread-local storage. The hot-path failures (ring full, oversize, closed, a
// bad id) only store a pointer to static text, so a dropped record costs no allocation; the
// std::string is touched only by the cold paths (open, registration), which is also when its
// thread-exit destructor gets registered.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

// Built with -fvisibility=hidden: only the declarations of the public header are exported.
#pragma GCC visibility push(default)
#include "rankstat/rankstat.h"
#pragma GCC visibility pop

#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "rankstat/shmproto/schema.hpp"

struct rankstat_reporter {
  rankstat::Reporter reporter;
  // Reporter::identity_labels() at open: rankstat_identity_label hands out pointers into it.
  rankstat::shm::LabelPairs identity_labels;
};

namespace {

using rankstat::Status;

// nullptr means "the message is in tls_error_message". Constant-initialised and trivially destructible,
// so touching it on the hot path neither allocates nor registers a destructor.
thread_local const char* tls_error_text = "";
thread_local std::string tls_error_message;

constexpr std::uint32_t kIdentityV1Bytes = sizeof(rankstat_identity);
constexpr std::uint32_t kGeometryV1Bytes = offsetof(rankstat_geometry, text_capacity);
constexpr std::uint32_t kGeometryWithTextBytes =
    offsetof(rankstat_geometry, text_capacity) + sizeof(std::uint32_t);
// A series spec before the text lengths were appended (layout 2), and with them.
constexpr std::uint32_t kSeriesSpecV1Bytes = offsetof(rankstat_series_spec, family_length);
constexpr std::uint32_t kSeriesSpecLengthsBytes = sizeof(rankstat_series_spec);
// The first rankstat_permissions had mode and group only; shm_dir was appended after it.
constexpr std::uint32_t kPermissionsV1Bytes = offsetof(rankstat_permissions, shm_dir);
constexpr std::uint32_t kPermissionsWithShmDirBytes =
    offsetof(rankstat_permissions, shm_dir) + sizeof(rankstat_permissions::shm_dir);

static_assert(RANKSTAT_OK == static_cast<int>(Status::kOk));
static_assert(RANKSTAT_ERR_INVALID_ARGUMENT == static_cast<int>(Status::kInvalidArgument));
static_assert(RANKSTAT_ERR_NO_SPACE == static_cast<int>(Status::kNoSpace));
static_assert(RANKSTAT_ERR_PERMISSION == static_cast<int>(Status::kPermission));
static_assert(RANKSTAT_ERR_IO == static_cast<int>(Status::kIo));
static_assert(RANKSTAT_ERR_RING_FULL == static_cast<int>(Status::kRingFull));
static_assert(RANKSTAT_ERR_OVERSIZE == static_cast<int>(Status::kOversize));
static_assert(RANKSTAT_ERR_CLOSED == static_cast<int>(Status::kClosed));
static_assert(RANKSTAT_ERR_REGISTRY_FULL == static_cast<int>(Status::kRegistryFull));
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
// rankstat_update is a wire format for bindings: pinned like the shared-memory structures.
static_assert(sizeof(rankstat_update) == 32);
static_assert(offsetof(rankstat_update, op) == 0 && offsetof(rankstat_update, id) == 4);
static_assert(offsetof(rankstat_update, value) == 8 && offsetof(rankstat_update, count) == 16);
static_assert(offsetof(rankstat_update, sum_delta) == 24);
static_assert(std::is_trivially_copyable_v<rankstat_update>);

const char* static_text(Status status) {
  switch (status) {
    case Status::kOk:
      return "";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kNoSpace:
      return "the shm directory is full";
    case Status::kPermission:
      return "permission denied";
    case Status::kIo:
      return "I/O error";
    case Status::kRingFull:
      return "ring full: record dropped and counted (the daemon is slow or absent)";
    case Status::kOversize:
      return "record larger than the segment's max_record_bytes: dropped and counted";
    case Status::kClosed:
      return "reporter is NULL or closed";
    case Status::kRegistryFull:
      return "the cumulative block has no room for another series";
  }
  return "unknown error";
}

// Hot-path failure: no allocation, the text is static.
int fail(Status status, const char* text = nullptr) {
  tls_error_text = text != nullptr ? text : static_text(status);
  return static_cast<int>(status);
}

// Cold-path failure with a message of its own. Falls back to static text if the copy cannot allocate.
int fail_with(Status status, std::string_view message) {
  try {
    tls_error_message.assign(message);
    tls_error_text = nullptr;
  } catch (...) {
    tls_error_text = static_text(status);
  }
  return static_cast<int>(status);
}

int result(Status status) {
  return status == Status::kOk ? RANKSTAT_OK : fail(status);
}

// Called from the catch-all of every function: whatever escaped is reported, never propagated.
int internal_error() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(Status::kIo, "out of memory");
  } catch (...) {
    return fail(Status::kIo, "internal error");
  }
}

bool read_labels(std::uint32_t count, const char* const* names, const char* const* values,
                 rankstat::shm::LabelPairs& out) {
  if (count == 0) return true;
  if (names == nullptr || values == nullptr) return false;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    if (names[i] == nullptr || values[i] == nullptr) return false;
    out.emplace_back(names[i], values[i]);
  }
  return true;
}

// Labels whose texts are given by length (RANKSTAT_SERIES_TEXT_LENGTHS): NUL bytes included.
bool read_sized_labels(std::uint32_t count, const char* const* names, const char* const* values,
                       const size_t* name_lengths, const size_t* value_lengths,
                       rankstat::shm::LabelPairs& out) {
  if (count == 0) return true;
  if (names == nullptr || values == nullptr || name_lengths == nullptr || value_lengths == nullptr)
    return false;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    if ((names[i] == nullptr && name_lengths[i] != 0) || (values[i] == nullptr && value_lengths[i] != 0))
      return false;
    out.emplace_back(names[i] != nullptr ? std::string(names[i], name_lengths[i]) : std::string(),
                     values[i] != nullptr ? std::string(values[i], value_lengths[i]) : std::string());
  }
  return true;
}

// The reason shm::check_series found for refusing a series (the registration's
// Reporter::last_refusal), as text naming the label at fault; empty when none was recorded. The
// reasons and their texts are shmproto's (RANKSTAT_SERIES_REFUSALS); this only adds the culprit.
std::string refusal_text(const rankstat::shm::SeriesCheck& check, const rankstat::shm::LabelPairs& labels) {
  namespace shm = rankstat::shm;
  if (!check) return {};
  const std::string text(shm::series_refusal_text(check.refusal));
  if (shm::is_label_refusal(check.refusal) && check.label < labels.size()) {
    return "label " + shm::quoted_for_message(labels[check.label].first) + " " + text;
  }
  if (check.refusal == shm::SeriesRefusal::kTooManyBounds) {
    return text + " (" + std::to_string(shm::kMaxHistogramBuckets) + ")";
  }
  return text;
}

int registration_failed(const rankstat_reporter& reporter, const rankstat::shm::LabelPairs& labels,
                        Status status, const char* kind, std::string_view family) {
  if (status == Status::kClosed) return fail(status);
  std::string message = std::string("cannot register ") + kind + " '" + std::string(family) + "': ";
  if (status == Status::kRegistryFull) {
    message += "the cumulative block is full (series, bucket bounds, value words or text bytes)";
  } else if (status == Status::kNoSpace) {
    message +=
        "the shm directory has no room for its pages (the segment grows as series are registered; free "
        "space or enlarge the shm directory, a later registration is tried again)";
  } else if (status == Status::kIo) {
    message += "out of memory or I/O error while reserving its pages";
  } else if (const std::string why = refusal_text(reporter.reporter.last_refusal(), labels); !why.empty()) {
    message += why;
  } else {
    message += "invalid family name, labels, bucket bounds or mode";
  }
  return fail_with(status, message);
}

}  // namespace

extern "C" {

void rankstat_identity_init(rankstat_identity* identity) {
  if (identity == nullptr) return;
  std::memset(identity, 0, sizeof *identity);
  identity->struct_size = sizeof(rankstat_identity);
  try {
    // Mirrors the defaults of shm::SegmentIdentity; NULL strings select its default strings. (Its
    // default strings fit the small-string buffer, so this cannot throw in practice.)
    const rankstat::shm::SegmentIdentity defaults;
    identity->role = static_cast<std::uint32_t>(defaults.role);
    identity->tp_rank = defaults.tp_rank;
    identity->pp_rank = defaults.pp_rank;
    identity->dp_rank = defaults.dp_rank;
    identity->moe_ep_rank = defaults.moe_ep_rank;
    identity->attn_tp_rank = defaults.attn_tp_rank;
    identity->attn_dp_rank = defaults.attn_dp_rank;
    identity->attn_cp_rank = defaults.attn_cp_rank;
    identity->tp_size = defaults.tp_size;
    identity->pp_size = defaults.pp_size;
    identity->dp_size = defaults.dp_size;
    identity->flags = defaults.flags;
  } catch (...) {
    internal_error();
  }
}

int rankstat_open(const rankstat_identity* identity, const rankstat_geometry* geometry,
                  rankstat_reporter** out) {
  return rankstat_open_ex(identity, geometry, nullptr, out);
}

int rankstat_open_ex(const rankstat_identity* identity, const rankstat_geometry* geometry,
                     const rankstat_permissions* permissions, rankstat_reporter** out) {
  if (out != nullptr) *out = nullptr;
  try {
    if (out == nullptr || identity == nullptr) {
      return fail_with(Status::kInvalidArgument, "rankstat_open: identity and out must not be NULL");
    }
    if (identity->struct_size < kIdentityV1Bytes) {
      return fail_with(Status::kInvalidArgument,
                       "rankstat_open: identity->struct_size " + std::to_string(identity->struct_size) +
                           " is smaller than sizeof(rankstat_identity) " + std::to_string(kIdentityV1Bytes) +
                           " (call rankstat_identity_init)");
    }
    if (geometry != nullptr && geometry->struct_size < kGeometryV1Bytes) {
      return fail_with(Status::kInvalidArgument,
                       "rankstat_open: geometry->struct_size " + std::to_string(geometry->struct_size) +
                           " is smaller than sizeof(rankstat_geometry) " + std::to_string(kGeometryV1Bytes));
    }
    if (permissions != nullptr && permissions->struct_size < kPermissionsV1Bytes) {
      return fail_with(Status::kInvalidArgument, "rankstat_open_ex: permissions->struct_size " +
                                                     std::to_string(permissions->struct_size) +
                                                     " is smaller than the first rankstat_permissions " +
                                                     std::to_string(kPermissionsV1Bytes));
    }
    if (identity->role < RANKSTAT_ROLE_SCHEDULER || identity->role > RANKSTAT_ROLE_OTHER) {
      return fail_with(Status::kInvalidArgument, "rankstat_open: unknown role " +
                                                     std::to_string(identity->role) + " (RANKSTAT_ROLE_*)");
    }

    rankstat::ReporterOptions options;
    rankstat::shm::SegmentIdentity& id = options.identity;
    id.role = static_cast<rankstat::shm::Role>(identity->role);
    // NULL or "": Reporter::open takes $RANKSTAT_INSTANCE, else "default" (default_instance).
    id.instance = identity->instance != nullptr ? identity->instance : "";
    if (identity->rank_key != nullptr) id.rank_key = identity->rank_key;
    if (identity->model_name != nullptr) id.model_name = identity->model_name;
    if (identity->engine_type != nullptr) id.engine_type = identity->engine_type;
    id.tp_rank = identity->tp_rank;
    id.pp_rank = identity->pp_rank;
    id.dp_rank = identity->dp_rank;
    id.moe_ep_rank = identity->moe_ep_rank;
    id.attn_tp_rank = identity->attn_tp_rank;
    id.attn_dp_rank = identity->attn_dp_rank;
    id.attn_cp_rank = identity->attn_cp_rank;
    id.tp_size = identity->tp_size;
    id.pp_size = identity->pp_size;
    id.dp_size = identity->dp_size;
    id.flags = identity->flags;
    if (!read_labels(identity->extra_label_count, identity->extra_label_names, identity->extra_label_values,
                     id.extra_labels)) {
      return fail_with(Status::kInvalidArgument, "rankstat_open: extra label names or values are NULL");
    }
    if (geometry != nullptr) {
      rankstat::shm::SegmentGeometry& g = options.geometry;
      if (geometry->ring_bytes != 0) g.ring_bytes = geometry->ring_bytes;
      if (geometry->series_capacity != 0) g.series_capacity = geometry->series_capacity;
      if (geometry->bounds_capacity != 0) g.bounds_capacity = geometry->bounds_capacity;
      if (geometry->values_capacity != 0) g.values_capacity = geometry->values_capacity;
      if (geometry->struct_size >= kGeometryWithTextBytes && geometry->text_capacity != 0)
        g.text_capacity = geometry->text_capacity;
    }
    if (permissions != nullptr) {
      if (permissions->mode != 0) options.mode = permissions->mode;
      if (permissions->group != nullptr) options.group = permissions->group;
      // Read only from callers whose struct has the field: older ones end before it.
      if (permissions->struct_size >= kPermissionsWithShmDirBytes && permissions->shm_dir != nullptr) {
        options.shm_dir = permissions->shm_dir;
      }
    }

    auto* handle = new (std::nothrow) rankstat_reporter;
    if (handle == nullptr) return fail(Status::kIo, "out of memory");
    const Status status = handle->reporter.open(options);
    if (status != Status::kOk) {
      const std::string message = handle->reporter.error_message();
      delete handle;
      return message.empty() ? fail(status) : fail_with(status, message);
    }
    handle->identity_labels = handle->reporter.identity_labels();
    *out = handle;
    return RANKSTAT_OK;
  } catch (...) {
    return internal_error();
  }
}

void rankstat_close(rankstat_reporter* reporter) {
  // Reporter::close and its destructor are noexcept; nothing here can throw.
  delete reporter;
}

void rankstat_abandon(rankstat_reporter* reporter) {
  if (reporter == nullptr) return;
  // Abandoned first, so the destructor's close finds nothing left to mark closed.
  reporter->reporter.abandon();
  delete reporter;
}

const char* rankstat_last_error(void) {
  return tls_error_text != nullptr ? tls_error_text : tls_error_message.c_str();
}

int rankstat_identity_label(const rankstat_reporter* reporter, uint32_t index, const char** name,
                            const char** value) {
  if (reporter == nullptr || !reporter->reporter.is_open()) return fail(Status::kClosed);
  if (index >= reporter->identity_labels.size()) {
    return fail(Status::kInvalidArgument, "rankstat_identity_label: index past the last label");
  }
  const auto& [label, text] = reporter->identity_labels[index];
  if (name != nullptr) *name = label.c_str();
  if (value != nullptr) *value = text.c_str();
  return RANKSTAT_OK;
}

const char* rankstat_segment_note(const rankstat_reporter* reporter) {
  return reporter != nullptr ? reporter->reporter.note().c_str() : "";
}

int rankstat_report_scheduler(rankstat_reporter* reporter, const void* snapshot, uint32_t snapshot_bytes,
                              const void* priorities, uint32_t priority_count) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (snapshot == nullptr || snapshot_bytes != sizeof(rankstat::shm::SchedulerSnapshot)) {
      return fail(
          Status::kInvalidArgument,
          "rankstat_report_scheduler: snapshot must point at rankstat_scheduler_snapshot_bytes() bytes");
    }
    if (priority_count > rankstat::shm::kMaxPriorityCounts ||
        (priority_count != 0 && priorities == nullptr)) {
      return fail(Status::kInvalidArgument,
                  "rankstat_report_scheduler: priorities must be non-NULL and at most 64 entries");
    }
    if (!reporter->reporter.is_open()) return fail(Status::kClosed);
    // The caller's buffers need not be aligned (ctypes, numpy): copy the fixed part onto the stack to
    // patch priority_count, and hand the entries over as raw bytes rather than as PriorityCount objects.
    rankstat::shm::SchedulerSnapshot copy{};
    std::memcpy(&copy, snapshot, sizeof copy);
    copy.priority_count = priority_count;
    const std::span<const std::uint8_t> fixed(reinterpret_cast<const std::uint8_t*>(&copy), sizeof copy);
    const std::span<const std::uint8_t> entries(
        static_cast<const std::uint8_t*>(priorities),
        std::size_t{priority_count} * sizeof(rankstat::shm::PriorityCount));
    return result(reporter->reporter.append_record(rankstat::shm::RecordType::kSchedulerSnapshot,
                                                   rankstat::shm::kSchedulerSnapshotVersion, fixed, entries));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_heartbeat(rankstat_reporter* reporter) {
  try {
    if (reporter == nullptr || !reporter->reporter.is_open()) return fail(Status::kClosed);
    reporter->reporter.heartbeat();
    return RANKSTAT_OK;
  } catch (...) {
    return internal_error();
  }
}

int rankstat_register_counter(rankstat_reporter* reporter, const char* family, uint32_t label_count,
                              const char* const* label_names, const char* const* label_values,
                              uint32_t* out_id) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (family == nullptr || out_id == nullptr) {
      return fail(Status::kInvalidArgument, "rankstat_register_counter: family and out_id must not be NULL");
    }
    rankstat::shm::LabelPairs labels;
    if (!read_labels(label_count, label_names, label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    const Status status = reporter->reporter.register_counter(family, labels, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "counter", family);
  } catch (...) {
    return internal_error();
  }
}

int rankstat_register_gauge(rankstat_reporter* reporter, const char* family, uint32_t mode,
                            uint32_t label_count, const char* const* label_names,
                            const char* const* label_values, uint32_t* out_id) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (family == nullptr || out_id == nullptr) {
      return fail(Status::kInvalidArgument, "rankstat_register_gauge: family and out_id must not be NULL");
    }
    // Checked here: the conversion to the 8-bit GaugeMode below would otherwise wrap a bad value.
    if (mode >= rankstat::shm::kGaugeModeCount) {
      return fail(Status::kInvalidArgument, "rankstat_register_gauge: mode must be a RANKSTAT_MODE_* value");
    }
    rankstat::shm::LabelPairs labels;
    if (!read_labels(label_count, label_names, label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    const Status status = reporter->reporter.register_gauge(
        family, static_cast<rankstat::shm::GaugeMode>(static_cast<std::uint8_t>(mode)), labels, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "gauge", family);
  } catch (...) {
    return internal_error();
  }
}

int rankstat_register_histogram(rankstat_reporter* reporter, const char* family, uint32_t label_count,
                                const char* const* label_names, const char* const* label_values,
                                const double* bounds, uint32_t bound_count, uint32_t* out_id) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (family == nullptr || out_id == nullptr || (bound_count != 0 && bounds == nullptr)) {
      return fail(
          Status::kInvalidArgument,
          "rankstat_register_histogram: family, out_id and bounds (when bound_count > 0) must not be NULL");
    }
    rankstat::shm::LabelPairs labels;
    if (!read_labels(label_count, label_names, label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    const std::span<const double> bound_span(bounds, bound_count);
    const Status status = reporter->reporter.register_histogram(family, labels, bound_span, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "histogram", family);
  } catch (...) {
    return internal_error();
  }
}

int rankstat_register_series(rankstat_reporter* reporter, const rankstat_series_spec* spec,
                             uint32_t* out_id) {
  namespace shm = rankstat::shm;
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (spec == nullptr || out_id == nullptr || spec->family == nullptr ||
        spec->struct_size < kSeriesSpecV1Bytes || (spec->bound_count != 0 && spec->bounds == nullptr)) {
      return fail(
          Status::kInvalidArgument,
          "rankstat_register_series: spec (with struct_size set), its family, out_id and bounds (when "
          "bound_count > 0) must not be NULL");
    }
    const bool lengths = (spec->flags & RANKSTAT_SERIES_TEXT_LENGTHS) != 0;
    if (lengths && spec->struct_size < kSeriesSpecLengthsBytes) {
      return fail_with(Status::kInvalidArgument,
                       "rankstat_register_series: RANKSTAT_SERIES_TEXT_LENGTHS needs a struct_size of " +
                           std::to_string(kSeriesSpecLengthsBytes) + ", got " +
                           std::to_string(spec->struct_size));
    }
    if (spec->kind < RANKSTAT_KIND_COUNTER || spec->kind > RANKSTAT_KIND_SUMMARY) {
      return fail(Status::kInvalidArgument, "rankstat_register_series: kind must be a RANKSTAT_KIND_* value");
    }
    if (spec->kind == RANKSTAT_KIND_GAUGE && spec->mode >= shm::kGaugeModeCount) {
      return fail(Status::kInvalidArgument, "rankstat_register_series: mode must be a RANKSTAT_MODE_* value");
    }
    if (spec->kind != RANKSTAT_KIND_HISTOGRAM && spec->bound_count != 0) {
      return fail(Status::kInvalidArgument, "rankstat_register_series: only histograms have bucket bounds");
    }
    shm::LabelPairs labels;
    std::string_view family = spec->family;
    std::string_view help = spec->help != nullptr ? std::string_view(spec->help) : std::string_view();
    if (lengths) {
      if ((spec->help == nullptr && spec->help_length != 0) ||
          !read_sized_labels(spec->label_count, spec->label_names, spec->label_values,
                             spec->label_name_lengths, spec->label_value_lengths, labels)) {
        return fail(Status::kInvalidArgument, "label names, values, their lengths or help are NULL");
      }
      family = std::string_view(spec->family, spec->family_length);
      help = spec->help != nullptr ? std::string_view(spec->help, spec->help_length) : std::string_view();
    } else if (!read_labels(spec->label_count, spec->label_names, spec->label_values, labels)) {
      return fail(Status::kInvalidArgument, "label names or values are NULL");
    }
    rankstat::Reporter::SeriesSpec s;
    s.kind = static_cast<shm::SeriesKind>(static_cast<std::uint8_t>(spec->kind));
    s.mode = static_cast<shm::GaugeMode>(
        static_cast<std::uint8_t>(spec->kind == RANKSTAT_KIND_GAUGE ? spec->mode : 0));
    s.flags = spec->flags & RANKSTAT_SERIES_OWN_LABELS_ONLY;
    s.family = family;
    s.help = help;
    s.labels = &labels;
    s.bounds = std::span<const double>(spec->bounds, spec->bound_count);
    const Status status = reporter->reporter.register_series(s, *out_id);
    return status == Status::kOk ? RANKSTAT_OK
                                 : registration_failed(*reporter, labels, status, "series", family);
  } catch (...) {
    return internal_error();
  }
}

int rankstat_gauge_add(rankstat_reporter* reporter, uint32_t id, double delta) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.gauge_add(id, delta));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_series_value(const rankstat_reporter* reporter, uint32_t id, double* out_value) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (out_value == nullptr)
      return fail(Status::kInvalidArgument, "rankstat_series_value: out_value is NULL");
    return result(reporter->reporter.series_value(id, *out_value));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_histogram_bucket(const rankstat_reporter* reporter, uint32_t id, uint32_t bucket,
                              uint64_t* out_count) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (out_count == nullptr)
      return fail(Status::kInvalidArgument, "rankstat_histogram_bucket: out_count is NULL");
    return result(reporter->reporter.histogram_bucket(id, bucket, *out_count));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_histogram_bucket_add(rankstat_reporter* reporter, uint32_t id, uint32_t bucket, uint64_t count) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.histogram_bucket_add(id, bucket, count));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_histogram_add_sum(rankstat_reporter* reporter, uint32_t id, double sum_delta) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.histogram_add_sum(id, sum_delta));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_counter_add(rankstat_reporter* reporter, uint32_t id, double delta) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.counter_add(id, delta));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_counter_reset(rankstat_reporter* reporter, uint32_t id) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.counter_reset(id));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_gauge_set(rankstat_reporter* reporter, uint32_t id, double value) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.gauge_set(id, value));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_histogram_observe(rankstat_reporter* reporter, uint32_t id, double value) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.histogram_observe(id, value));
  } catch (...) {
    return internal_error();
  }
}

int rankstat_histogram_observe_many(rankstat_reporter* reporter, uint32_t id, double value, uint64_t count,
                                    double sum_delta) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(reporter->reporter.histogram_observe_many(id, value, count, sum_delta));
  } catch (...) {
    return internal_error();
  }
}

uint64_t rankstat_dropped_records(const rankstat_reporter* reporter) {
  return reporter == nullptr ? 0 : reporter->reporter.dropped_records();
}

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

int rankstat_apply_updates(rankstat_reporter* reporter, const rankstat_update* updates, uint32_t count,
                           uint32_t* applied) {
  if (applied != nullptr) *applied = 0;
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    if (count != 0 && updates == nullptr) {
      return fail(Status::kInvalidArgument, "rankstat_apply_updates: updates must not be NULL");
    }
    Status first_failure = Status::kOk;
    std::uint32_t done = 0;
    const auto* bytes = reinterpret_cast<const unsigned char*>(updates);
    for (std::uint32_t i = 0; i < count; ++i) {
      // The caller's buffer need not be aligned (ctypes, struct.pack_into): copy each entry out.
      rankstat_update u;
      std::memcpy(&u, bytes + std::size_t{i} * sizeof u, sizeof u);
      Status status = Status::kInvalidArgument;
      switch (u.op) {
        case RANKSTAT_OP_COUNTER_ADD:
          status = reporter->reporter.counter_add(u.id, u.value);
          break;
        case RANKSTAT_OP_GAUGE_SET:
          status = reporter->reporter.gauge_set(u.id, u.value);
          break;
        case RANKSTAT_OP_HISTOGRAM_OBSERVE:
          status = reporter->reporter.histogram_observe_many(u.id, u.value, u.count, u.sum_delta);
          break;
        default:
          break;
      }
      if (status == Status::kOk) {
        ++done;
      } else if (first_failure == Status::kOk) {
        first_failure = status;
      }
    }
    if (applied != nullptr) *applied = done;
    if (first_failure != Status::kOk) {
      return fail(first_failure,
                  first_failure == Status::kInvalidArgument
                      ? "rankstat_apply_updates: an entry had an unknown op, a bad id or a bad value"
                      : nullptr);
    }
    return RANKSTAT_OK;
  } catch (...) {
    return internal_error();
  }
}

}  // extern "C"
