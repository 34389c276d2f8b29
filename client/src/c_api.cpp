// librankstat.so: the C ABI of rankstat.h over rankstat::Reporter.
//
// Every exported function catches everything: an exception must never unwind into C or Python frames,
// and ends in c_api_internal.hpp's fail/result. This file holds opening, closing and the per-call
// updates; registration (c_api_register.cpp), the update batch (c_api_updates.cpp), the contract's
// constants and tables (c_api_contract.cpp) and the error state (c_api_errors.cpp) have their own.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>

#include "c_api_internal.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

using rankstat::Status;
using namespace rankstat::c_api;  // NOLINT(google-build-using-namespace): this file is the C ABI's glue

namespace {

constexpr std::uint32_t kIdentityV1Bytes = sizeof(rankstat_identity);
constexpr std::uint32_t kGeometryV1Bytes = offsetof(rankstat_geometry, text_capacity);
constexpr std::uint32_t kGeometryWithTextBytes =
    offsetof(rankstat_geometry, text_capacity) + sizeof(std::uint32_t);
// The first rankstat_permissions had mode and group only; shm_dir was appended after it.
constexpr std::uint32_t kPermissionsV1Bytes = offsetof(rankstat_permissions, shm_dir);
constexpr std::uint32_t kPermissionsWithShmDirBytes =
    offsetof(rankstat_permissions, shm_dir) + sizeof(rankstat_permissions::shm_dir);

// The body of every per-call update: a NULL handle is kClosed, the Reporter's status is the result, and
// nothing escapes into C. A template: each caller compiles its own copy, as when each wrote it out.
template <typename Call>
int update(rankstat_reporter* reporter, Call&& call) {
  try {
    if (reporter == nullptr) return fail(Status::kClosed);
    return result(call(reporter->reporter));
  } catch (...) {
    return internal_error();
  }
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

int rankstat_gauge_add(rankstat_reporter* reporter, uint32_t id, double delta) {
  return update(reporter, [&](rankstat::Reporter& r) { return r.gauge_add(id, delta); });
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
  return update(reporter, [&](rankstat::Reporter& r) { return r.histogram_bucket_add(id, bucket, count); });
}

int rankstat_histogram_add_sum(rankstat_reporter* reporter, uint32_t id, double sum_delta) {
  return update(reporter, [&](rankstat::Reporter& r) { return r.histogram_add_sum(id, sum_delta); });
}

int rankstat_counter_add(rankstat_reporter* reporter, uint32_t id, double delta) {
  return update(reporter, [&](rankstat::Reporter& r) { return r.counter_add(id, delta); });
}

int rankstat_counter_reset(rankstat_reporter* reporter, uint32_t id) {
  return update(reporter, [&](rankstat::Reporter& r) { return r.counter_reset(id); });
}

int rankstat_gauge_set(rankstat_reporter* reporter, uint32_t id, double value) {
  return update(reporter, [&](rankstat::Reporter& r) { return r.gauge_set(id, value); });
}

int rankstat_histogram_observe(rankstat_reporter* reporter, uint32_t id, double value) {
  return update(reporter, [&](rankstat::Reporter& r) { return r.histogram_observe(id, value); });
}

int rankstat_histogram_observe_many(rankstat_reporter* reporter, uint32_t id, double value, uint64_t count,
                                    double sum_delta) {
  return update(reporter,
                [&](rankstat::Reporter& r) { return r.histogram_observe_many(id, value, count, sum_delta); });
}

uint64_t rankstat_dropped_records(const rankstat_reporter* reporter) {
  return reporter == nullptr ? 0 : reporter->reporter.dropped_records();
}

}  // extern "C"
