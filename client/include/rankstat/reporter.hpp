// rankstat::Reporter — the C++ API an engine rank uses to publish its stats.
//
// One Reporter owns one segment. Thread-safety: single writer — call it from one thread at a time; use
// one Reporter per producing thread. Every method is noexcept; the hot-path methods (report_scheduler,
// counter_add, gauge_set, histogram_observe*, heartbeat) never allocate, lock, block or make a system
// call beyond clock_gettime. If the daemon is absent or dead the ring fills up and appends turn into
// counted drops costing a few nanoseconds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "rankstat/shmproto/segment.hpp"

namespace rankstat {

// Every outcome a Reporter call can have, written once: X(enumerator, short name, message). Values are
// 0, 1, ... in list order (the C ABI's RANKSTAT_OK and RANKSTAT_ERR_* equal them, pinned in
// c_api_errors.cpp). The short name is for logs and tests (status_name); the message is the C ABI's text when
// a call has no message of its own (status_message).
// clang-format off
#define RANKSTAT_STATUSES(X)                                                                              \
  X(kOk, "ok", "")                                                                                        \
  X(kInvalidArgument, "invalid_argument", "invalid argument")                                             \
  X(kNoSpace, "no_space", "the shm directory is full")                                                    \
  X(kPermission, "permission", "permission denied")                                                       \
  X(kIo, "io", "I/O error")                                                                               \
  X(kRingFull, "ring_full", "ring full: record dropped and counted (the daemon is slow or absent)")        \
  X(kOversize, "oversize", "record larger than the segment's max_record_bytes: dropped and counted")      \
  X(kClosed, "closed", "reporter is NULL or closed")                                                      \
  X(kRegistryFull, "registry_full", "the cumulative block has no room for another series")
// clang-format on

#define RANKSTAT_STATUS_ENUMERATOR(enumerator, name, message) enumerator,
#define RANKSTAT_STATUS_NAME(enumerator, name, message) name,
#define RANKSTAT_STATUS_MESSAGE(enumerator, name, message) message,

enum class Status : int { RANKSTAT_STATUSES(RANKSTAT_STATUS_ENUMERATOR) };

// NUL-terminated (the C ABI hands the messages out as const char*), indexed by Status.
inline constexpr const char* kStatusNames[] = {RANKSTAT_STATUSES(RANKSTAT_STATUS_NAME)};
inline constexpr const char* kStatusMessages[] = {RANKSTAT_STATUSES(RANKSTAT_STATUS_MESSAGE)};

#undef RANKSTAT_STATUS_ENUMERATOR
#undef RANKSTAT_STATUS_NAME
#undef RANKSTAT_STATUS_MESSAGE

// "ok", "ring_full", ...; "unknown" for a value outside the list.
constexpr std::string_view status_name(Status status) noexcept {
  const auto index = static_cast<std::size_t>(status);
  return index < std::size(kStatusNames) ? kStatusNames[index] : "unknown";
}

// The status's message ("" for kOk); "unknown error" for a value outside the list.
constexpr const char* status_message(Status status) noexcept {
  const auto index = static_cast<std::size_t>(status);
  return index < std::size(kStatusMessages) ? kStatusMessages[index] : "unknown error";
}

struct ReporterOptions {
  // Its instance starts empty: open() takes default_instance() for an empty instance, so every client
  // (C++, the C ABI, Python) resolves $RANKSTAT_INSTANCE the same way, here.
  shm::SegmentIdentity identity = [] {
    shm::SegmentIdentity unset;
    unset.instance.clear();
    return unset;
  }();
  std::string shm_dir;  // empty: $RANKSTAT_SHM_DIR, else /dev/shm
  shm::SegmentGeometry geometry;
  // Segment file mode: 0660 when the daemon runs as another user in the segment's group (it writes
  // `head`), 0640 or 0600 when it runs as this user. Bits for others may allow reading but never
  // writing: a world-writable mode is refused (kInvalidArgument), and so is the daemon by default.
  std::uint32_t mode = 0660;
  // Group given to the segment before it is published: a group name or a numeric gid; empty:
  // $RANKSTAT_SHM_GROUP, else the process's own group. The process must be a member of it.
  std::string group;
  bool unlink_on_close = false;  // by default the daemon retires closed segments after reading them
};

// The shm directory to use when none is configured: $RANKSTAT_SHM_DIR, else /dev/shm.
std::string default_shm_dir();
// The instance id to use when none is given: $RANKSTAT_INSTANCE when set and non-empty, else "default"
// (shm::SegmentIdentity's). Not checked here: create_segment refuses an invalid id, naming it.
std::string default_instance();

class Reporter {
 public:
  Reporter() = default;
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;
  Reporter(Reporter&&) noexcept;
  Reporter& operator=(Reporter&&) noexcept;

  // Creates the segment (temporary name, ftruncate, posix_fallocate of the pages written from the start,
  // rename; registrations reserve the rest as they need it). On failure the reporter stays
  // closed, every later call is a no-op returning kClosed, and error_message() says why.
  Status open(const ReporterOptions& options) noexcept;
  bool is_open() const noexcept { return file_.valid(); }
  const std::string& error_message() const noexcept { return error_; }
  const std::string& path() const noexcept { return path_; }
  // Non-empty when the segment was published under another name than its identity's, because a live
  // writer or another user's file held that name: one line naming both (see shm::CreateResult::note).
  const std::string& note() const noexcept { return note_; }

  // Appends one scheduler snapshot record (fixed part plus per-priority queue counts).
  Status report_scheduler(const shm::SchedulerSnapshot& snapshot,
                          std::span<const shm::PriorityCount> priorities = {}) noexcept;
  // Appends a record of any type (for bindings that pack the payload themselves).
  Status append_record(shm::RecordType type, std::uint16_t type_version, std::span<const std::uint8_t> first,
                       std::span<const std::uint8_t> second) noexcept;
  void heartbeat() noexcept;

  // Series registration (may allocate; not for the hot path). Out-ids index the cumulative block.
  // These label the series with the segment's identity plus `labels`; `help` is the family's HELP text.
  Status register_counter(std::string_view family, const shm::LabelPairs& labels, std::uint32_t& id,
                          std::string_view help = {}) noexcept;
  Status register_gauge(std::string_view family, shm::GaugeMode mode, const shm::LabelPairs& labels,
                        std::uint32_t& id, std::string_view help = {}) noexcept;
  Status register_histogram(std::string_view family, const shm::LabelPairs& labels,
                            std::span<const double> bounds, std::uint32_t& id,
                            std::string_view help = {}) noexcept;
  // A series exactly as the engine declared it (prometheus_client's interface): kind, gauge mode, the
  // exposed family name, HELP text, its own labels, bounds; flags shm::kSeriesWithoutIdentityLabels.
  struct SeriesSpec {
    shm::SeriesKind kind = shm::SeriesKind::kCounter;
    shm::GaugeMode mode = shm::GaugeMode::kAll;
    std::uint32_t flags = 0;
    std::string_view family;
    std::string_view help;
    const shm::LabelPairs* labels = nullptr;  // nullptr: none
    std::span<const double> bounds;
  };
  Status register_series(const SeriesSpec& spec, std::uint32_t& id) noexcept;
  // Why the last registration returned kInvalidArgument for its series (shm::check_series: its name,
  // labels, help, kind, mode or bounds); refusal kNone otherwise.
  const shm::SeriesCheck& last_refusal() const noexcept { return cumulative_.last_refusal(); }

  Status counter_add(std::uint32_t id, double delta) noexcept;
  // prometheus_client's Counter.reset(): this writer's total of the series back to 0.
  Status counter_reset(std::uint32_t id) noexcept;
  // Sets the value in the cumulative block and appends a timestamped kSeriesUpdate record, so the daemon
  // sees every value in order; a full ring costs that record (counted as a drop), never the value.
  Status gauge_set(std::uint32_t id, double value) noexcept;
  Status gauge_add(std::uint32_t id, double delta) noexcept;
  // Histograms and summaries (a summary has no finite bounds: its one bucket is the count).
  Status histogram_observe(std::uint32_t id, double value) noexcept;
  Status histogram_observe_many(std::uint32_t id, double value, std::uint64_t count,
                                double sum_delta) noexcept;
  // prometheus_client's histogram-child internals: one bucket alone, the sum alone.
  Status histogram_bucket_add(std::uint32_t id, std::uint32_t bucket, std::uint64_t count) noexcept;
  Status histogram_add_sum(std::uint32_t id, double sum_delta) noexcept;
  // What this writer last stored: counter total, gauge value, histogram/summary sum; a bucket's count.
  Status series_value(std::uint32_t id, double& value) const noexcept;
  Status histogram_bucket(std::uint32_t id, std::uint32_t bucket, std::uint64_t& count) const noexcept;

  // The labels the daemon gives every identity-labelled series of this segment: the identity labels its
  // header carries (shm::for_each_identity_label), then its extra labels. Empty when closed.
  shm::LabelPairs identity_labels() const;

  std::uint64_t dropped_records() const noexcept { return ring_.dropped_records(); }
  std::uint64_t records_written() const noexcept { return ring_.records_written(); }

  // Marks the segment closed; the reporter is closed afterwards. Called in a process other than the one
  // that opened the segment (a forked child), it abandons the segment instead: see abandon().
  void close() noexcept;
  // Releases this process's mapping and descriptor without touching the segment: no header write (no
  // `closed`, no heartbeat), no unlink. For a forked child, which inherits the parent's mapping but must
  // leave the parent's segment and its state in the daemon exactly as they are. The reporter is closed
  // afterwards (every call a no-op returning kClosed).
  void abandon() noexcept;

 private:
  Status check_series(std::uint32_t id, shm::SeriesKind kind) const noexcept;
  Status check_distribution(std::uint32_t id) const noexcept;  // a histogram or a summary
  Status add_series(shm::SeriesKind kind, shm::GaugeMode mode, std::string_view family,
                    const shm::LabelPairs& labels, std::span<const double> bounds, std::uint32_t flags,
                    std::string_view help, std::uint32_t& id) noexcept;

  shm::MappedFile file_;
  std::string path_;
  std::string error_;
  std::string note_;
  bool unlink_on_close_ = false;
  std::int64_t owner_pid_ = 0;  // getpid() at open: a close in any other process only abandons
  shm::RingWriter ring_;
  shm::CumulativeWriter cumulative_;
  std::vector<std::uint8_t> series_kinds_;  // kind per registered id, checked on every update
};

}  // namespace rankstat
