// The C ABI's update batch: an array of rankstat_update entries (one ctypes call for many updates, the
// Python slow path's flush) applied in order.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "c_api_internal.hpp"

using rankstat::Status;
using rankstat::c_api::fail;
using rankstat::c_api::internal_error;

// rankstat_update is a wire format for bindings: pinned like the shared-memory structures.
static_assert(sizeof(rankstat_update) == 32);
static_assert(offsetof(rankstat_update, op) == 0 && offsetof(rankstat_update, id) == 4);
static_assert(offsetof(rankstat_update, value) == 8 && offsetof(rankstat_update, count) == 16);
static_assert(offsetof(rankstat_update, sum_delta) == 24);
static_assert(std::is_trivially_copyable_v<rankstat_update>);

extern "C" {

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
