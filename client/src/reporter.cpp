#include "rankstat/reporter.hpp"

#include <grp.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "rankstat/shmproto/process.hpp"

namespace rankstat {

namespace {

Status status_from_create_error(shm::CreateError error) {
  switch (error) {
    case shm::CreateError::kNone:
      return Status::kOk;
    case shm::CreateError::kInvalidArgument:
      return Status::kInvalidArgument;
    case shm::CreateError::kNoSpace:
      return Status::kNoSpace;
    case shm::CreateError::kPermission:
      return Status::kPermission;
    case shm::CreateError::kIo:
      break;
  }
  return Status::kIo;
}

Status status_from_append(shm::AppendStatus status) {
  switch (status) {
    case shm::AppendStatus::kOk:
      return Status::kOk;
    case shm::AppendStatus::kFull:
      return Status::kRingFull;
    case shm::AppendStatus::kOversize:
      break;
  }
  return Status::kOversize;
}

Status status_from_register(shm::RegisterStatus status) {
  switch (status) {
    case shm::RegisterStatus::kOk:
      return Status::kOk;
    case shm::RegisterStatus::kInvalid:
      return Status::kInvalidArgument;
    case shm::RegisterStatus::kNoSpace:
      return Status::kNoSpace;
    case shm::RegisterStatus::kFull:
      break;
  }
  return Status::kRegistryFull;
}

// A group name or numeric gid; -1 if it names no group.
std::int64_t resolve_group(const std::string& group) {
  if (group.find_first_not_of("0123456789") == std::string::npos && group.size() <= 10) {
    const unsigned long long gid = std::strtoull(group.c_str(), nullptr, 10);
    return gid <= 0xFFFFFFFEull ? static_cast<std::int64_t>(gid) : -1;
  }
  struct group entry {};
  struct group* found = nullptr;
  std::vector<char> buffer(16384);
  if (getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr)
    return -1;
  return static_cast<std::int64_t>(found->gr_gid);
}

}  // namespace

std::string default_shm_dir() {
  // getenv is not synchronised with setenv; callers read it at open time, not on the hot path.
  const char* configured = std::getenv("RANKSTAT_SHM_DIR");  // NOLINT(concurrency-mt-unsafe): see above
  if (configured != nullptr && configured[0] != '\0') return configured;
  return "/dev/shm";
}

std::string default_instance() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read once at open, like RANKSTAT_SHM_DIR
  const char* configured = std::getenv("RANKSTAT_INSTANCE");
  if (configured != nullptr && configured[0] != '\0') return configured;
  return shm::SegmentIdentity{}.instance;
}

Reporter::~Reporter() {
  close();
}

// The ring and cumulative writers hold raw pointers into the mapping. Moving a MappedFile transfers the
// mapping without remapping it, so those pointers stay valid in the destination; the source is reset to
// the default (closed) state so it can never write through them again.
Reporter::Reporter(Reporter&& other) noexcept
    : file_(std::move(other.file_)),
      path_(std::move(other.path_)),
      error_(std::move(other.error_)),
      note_(std::move(other.note_)),
      unlink_on_close_(std::exchange(other.unlink_on_close_, false)),
      owner_pid_(std::exchange(other.owner_pid_, 0)),
      ring_(std::exchange(other.ring_, {})),
      cumulative_(std::exchange(other.cumulative_, {})),
      series_kinds_(std::move(other.series_kinds_)) {}

Reporter& Reporter::operator=(Reporter&& other) noexcept {
  if (this != &other) {
    close();
    file_ = std::move(other.file_);
    path_ = std::move(other.path_);
    error_ = std::move(other.error_);
    note_ = std::move(other.note_);
    unlink_on_close_ = std::exchange(other.unlink_on_close_, false);
    owner_pid_ = std::exchange(other.owner_pid_, 0);
    ring_ = std::exchange(other.ring_, {});
    cumulative_ = std::exchange(other.cumulative_, {});
    series_kinds_ = std::move(other.series_kinds_);
  }
  return *this;
}

Status Reporter::open(const ReporterOptions& options) noexcept {
  // Re-opening retires the previous segment cleanly rather than leaking its mapping.
  close();
  ring_ = {};
  cumulative_ = {};
  try {
    error_.clear();
    path_.clear();
    note_.clear();
    const auto role = static_cast<std::uint32_t>(options.identity.role);
    if (role < static_cast<std::uint32_t>(shm::Role::kScheduler) ||
        role > static_cast<std::uint32_t>(shm::Role::kOther)) {
      error_ = "role must be scheduler, tokenizer, detokenizer or other";
      return Status::kInvalidArgument;
    }
    if ((options.mode & ~0666u) != 0 || (options.mode & 0002u) != 0 || (options.mode & 0600u) != 0600u) {
      error_ =
          "segment mode must give its owner read and write, others never write, and no execute or "
          "special bits (0660, 0640 or 0600)";
      return Status::kInvalidArgument;
    }
    shm::CreateOptions create;
    create.directory = options.shm_dir.empty() ? default_shm_dir() : options.shm_dir;
    create.mode = options.mode;
    create.geometry = options.geometry;
    std::string group = options.group;
    if (group.empty()) {
      // NOLINTNEXTLINE(concurrency-mt-unsafe): read once at open, like RANKSTAT_SHM_DIR
      const char* configured = std::getenv("RANKSTAT_SHM_GROUP");
      if (configured != nullptr) group = configured;
    }
    if (!group.empty()) {
      create.group = resolve_group(group);
      if (create.group < 0) {
        error_ = "segment group '" + group + "' is neither a group name nor a numeric gid";
        return Status::kInvalidArgument;
      }
    }
    const shm::SegmentIdentity* identity = &options.identity;
    shm::SegmentIdentity resolved;
    if (options.identity.instance.empty()) {
      resolved = options.identity;
      resolved.instance = default_instance();
      identity = &resolved;
    }
    shm::CreateResult created = shm::create_segment(*identity, create);
    if (created.error != shm::CreateError::kNone) {
      error_ = std::move(created.message);
      return status_from_create_error(created.error);
    }
    file_ = std::move(created.file);
    path_ = std::move(created.path);
    note_ = std::move(created.note);
    unlink_on_close_ = options.unlink_on_close;
    owner_pid_ = ::getpid();
    // Reserved up front so registration never reallocates after a series exists in shared memory: a
    // failed push_back there would leave a published series without a recorded kind.
    series_kinds_.clear();
    series_kinds_.reserve(options.geometry.series_capacity);
    shm::SegmentHeader* header = file_.header();
    ring_ = shm::RingWriter(header, file_.bytes() + header->ring_offset, header->ring_bytes,
                            header->max_record_bytes);
    // The writer reserves the block's pages as registrations fill them (created.space): a segment
    // costs what its series use.
    cumulative_ = shm::CumulativeWriter(
        shm::cumulative_region(file_.bytes() + header->cumulative_offset, options.geometry.cumulative()),
        created.space);
    return Status::kOk;
  } catch (...) {
    // Out of memory. A segment already published is retired (closed and unlinked) so the daemon does
    // not wait for records from a reporter that never came up.
    if (file_.valid()) shm::close_segment(file_, path_, true);
    error_.clear();  // assigning a message could throw again
    path_.clear();
    note_.clear();
    return Status::kIo;
  }
}

Status Reporter::report_scheduler(const shm::SchedulerSnapshot& snapshot,
                                  std::span<const shm::PriorityCount> priorities) noexcept {
  if (!is_open()) return Status::kClosed;
  if (priorities.size() > shm::kMaxPriorityCounts) return Status::kInvalidArgument;
  // Written straight into the ring (no staging copy); the timestamp is taken only once the record has
  // room, so a full ring (daemon away) costs a few nanoseconds.
  shm::AppendStatus appended = shm::AppendStatus::kOk;
  std::uint8_t* payload =
      ring_.claim(shm::RecordType::kSchedulerSnapshot, shm::kSchedulerSnapshotVersion,
                  static_cast<std::uint32_t>(sizeof snapshot + priorities.size_bytes()), appended);
  if (payload == nullptr) return status_from_append(appended);
  // The sizes are hidden from the optimiser on purpose: GCC expands these copies into `rep movsq`
  // (the snapshot's known 576 bytes, and the priorities' multiple of 16), whose start-up cost at a
  // destination 24 bytes into a 64-byte slot made them as costly as the rest of the append; glibc's
  // vector memcpy is not (bench/bench_append.cpp, docs/performance.md).
  std::size_t snapshot_bytes = sizeof snapshot;
  std::size_t priority_bytes = priorities.size_bytes();
  asm("" : "+r"(snapshot_bytes), "+r"(priority_bytes));
  std::memcpy(payload, &snapshot, snapshot_bytes);
  // The record states the number of entries it really carries, whatever the caller's struct says.
  const auto count = static_cast<std::uint32_t>(priorities.size());
  std::memcpy(payload + offsetof(shm::SchedulerSnapshot, priority_count), &count, sizeof count);
  if (priority_bytes != 0) std::memcpy(payload + sizeof snapshot, priorities.data(), priority_bytes);
  ring_.commit(shm::coarse_monotonic_ns());
  return Status::kOk;
}

Status Reporter::append_record(shm::RecordType type, std::uint16_t type_version,
                               std::span<const std::uint8_t> first,
                               std::span<const std::uint8_t> second) noexcept {
  if (!is_open()) return Status::kClosed;
  // A record typed as padding would make the consumer skip to the end of the ring and report corruption.
  if (type == shm::RecordType::kPadding) return Status::kInvalidArgument;
  shm::AppendStatus appended = shm::AppendStatus::kOk;
  std::uint8_t* payload =
      ring_.claim(type, type_version, static_cast<std::uint32_t>(first.size() + second.size()), appended);
  if (payload == nullptr) return status_from_append(appended);
  if (!first.empty()) std::memcpy(payload, first.data(), first.size());
  if (!second.empty()) std::memcpy(payload + first.size(), second.data(), second.size());
  ring_.commit(shm::coarse_monotonic_ns());
  return Status::kOk;
}

void Reporter::heartbeat() noexcept {
  if (!is_open()) return;
  shm::shared(file_.header()->heartbeat_ns).store(shm::coarse_monotonic_ns(), std::memory_order_relaxed);
}

Status Reporter::add_series(shm::SeriesKind kind, shm::GaugeMode mode, std::string_view family,
                            const shm::LabelPairs& labels, std::span<const double> bounds,
                            std::uint32_t flags, std::string_view help, std::uint32_t& id) noexcept {
  if (!is_open()) return Status::kClosed;
  std::uint32_t index = 0;
  try {
    const Status status = status_from_register(
        cumulative_.register_series(kind, mode, family, labels, bounds, index, flags, help));
    if (status != Status::kOk) return status;
  } catch (...) {
    return Status::kIo;  // the help-text table could not grow: out of memory
  }
  series_kinds_.push_back(static_cast<std::uint8_t>(kind));
  id = index;
  return Status::kOk;
}

Status Reporter::register_counter(std::string_view family, const shm::LabelPairs& labels, std::uint32_t& id,
                                  std::string_view help) noexcept {
  return add_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, family, labels, {}, 0, help, id);
}

Status Reporter::register_gauge(std::string_view family, shm::GaugeMode mode, const shm::LabelPairs& labels,
                                std::uint32_t& id, std::string_view help) noexcept {
  return add_series(shm::SeriesKind::kGauge, mode, family, labels, {}, 0, help, id);
}

Status Reporter::register_histogram(std::string_view family, const shm::LabelPairs& labels,
                                    std::span<const double> bounds, std::uint32_t& id,
                                    std::string_view help) noexcept {
  return add_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, family, labels, bounds, 0, help, id);
}

Status Reporter::register_series(const SeriesSpec& spec, std::uint32_t& id) noexcept {
  static const shm::LabelPairs kNoLabels;
  return add_series(spec.kind, spec.kind == shm::SeriesKind::kGauge ? spec.mode : shm::GaugeMode::kAll,
                    spec.family, spec.labels != nullptr ? *spec.labels : kNoLabels, spec.bounds, spec.flags,
                    spec.help, id);
}

shm::LabelPairs Reporter::identity_labels() const {
  shm::LabelPairs labels;
  if (!is_open()) return labels;
  const shm::SegmentHeader& header = *file_.header();
  shm::for_each_identity_label(header, [&labels](std::string name, std::string value) {
    labels.emplace_back(std::move(name), std::move(value));
  });
  if (auto extra = shm::decode_label_pairs(header.extra_labels, sizeof header.extra_labels)) {
    labels.insert(labels.end(), std::make_move_iterator(extra->begin()),
                  std::make_move_iterator(extra->end()));
  }
  return labels;
}

Status Reporter::check_series(std::uint32_t id, shm::SeriesKind kind) const noexcept {
  if (!is_open()) return Status::kClosed;
  if (id >= series_kinds_.size() || series_kinds_[id] != static_cast<std::uint8_t>(kind)) {
    return Status::kInvalidArgument;
  }
  return Status::kOk;
}

Status Reporter::check_distribution(std::uint32_t id) const noexcept {
  if (!is_open()) return Status::kClosed;
  if (id >= series_kinds_.size() ||
      (series_kinds_[id] != static_cast<std::uint8_t>(shm::SeriesKind::kHistogram) &&
       series_kinds_[id] != static_cast<std::uint8_t>(shm::SeriesKind::kSummary))) {
    return Status::kInvalidArgument;
  }
  return Status::kOk;
}

Status Reporter::counter_add(std::uint32_t id, double delta) noexcept {
  if (const Status status = check_series(id, shm::SeriesKind::kCounter); status != Status::kOk) return status;
  // Prometheus counters never decrease. NaN is taken, as prometheus_client takes it (NaN < 0 is false):
  // the total is NaN from then on, until Counter.reset().
  if (delta < 0) return Status::kInvalidArgument;
  cumulative_.counter_add(id, delta);
  return Status::kOk;
}

Status Reporter::counter_reset(std::uint32_t id) noexcept {
  if (const Status status = check_series(id, shm::SeriesKind::kCounter); status != Status::kOk) return status;
  cumulative_.counter_reset(id);
  return Status::kOk;
}

namespace {

// The ring copy of a gauge update. Its fate (appended or dropped, counted in the header either way) does
// not change the call's result: the value itself is already in the cumulative block.
void append_gauge_update(shm::RingWriter& ring, std::uint32_t id, double value, std::uint64_t now_ns) {
  shm::AppendStatus appended = shm::AppendStatus::kOk;
  std::uint8_t* payload = ring.claim(shm::RecordType::kSeriesUpdate, shm::kSeriesUpdateVersion,
                                     sizeof(shm::SeriesUpdateRecord), appended);
  if (payload == nullptr) return;
  const shm::SeriesUpdateRecord record{id, static_cast<std::uint32_t>(shm::SeriesUpdateOp::kGaugeSet), value};
  std::memcpy(payload, &record, sizeof record);
  ring.commit(now_ns);
}

}  // namespace

// A gauge set is stamped with the precise clock (shm::monotonic_ns, a vDSO read, no system call): the
// stamp orders mostrecent across processes, and a coarse tick would tie sets microseconds apart. The
// cumulative value and its update record carry the same stamp, so the integrals see the same time.
Status Reporter::gauge_set(std::uint32_t id, double value) noexcept {
  if (const Status status = check_series(id, shm::SeriesKind::kGauge); status != Status::kOk) return status;
  const std::uint64_t now_ns = shm::monotonic_ns();
  cumulative_.gauge_set(id, value, now_ns);
  append_gauge_update(ring_, id, value, now_ns);
  return Status::kOk;
}

Status Reporter::gauge_add(std::uint32_t id, double delta) noexcept {
  if (const Status status = check_series(id, shm::SeriesKind::kGauge); status != Status::kOk) return status;
  const std::uint64_t now_ns = shm::monotonic_ns();  // as gauge_set
  const double value = cumulative_.gauge_add(id, delta, now_ns);
  append_gauge_update(ring_, id, value, now_ns);
  return Status::kOk;
}

Status Reporter::histogram_observe(std::uint32_t id, double value) noexcept {
  return histogram_observe_many(id, value, 1, value);
}

Status Reporter::histogram_observe_many(std::uint32_t id, double value, std::uint64_t count,
                                        double sum_delta) noexcept {
  if (const Status status = check_distribution(id); status != Status::kOk) return status;
  cumulative_.histogram_observe(id, value, count, sum_delta);
  return Status::kOk;
}

Status Reporter::histogram_bucket_add(std::uint32_t id, std::uint32_t bucket, std::uint64_t count) noexcept {
  if (const Status status = check_distribution(id); status != Status::kOk) return status;
  if (bucket > cumulative_.descriptor(id).bucket_count) return Status::kInvalidArgument;
  cumulative_.histogram_bucket_add(id, bucket, count);
  return Status::kOk;
}

Status Reporter::histogram_add_sum(std::uint32_t id, double sum_delta) noexcept {
  if (const Status status = check_distribution(id); status != Status::kOk) return status;
  cumulative_.histogram_add_sum(id, sum_delta);
  return Status::kOk;
}

Status Reporter::series_value(std::uint32_t id, double& value) const noexcept {
  if (!is_open()) return Status::kClosed;
  if (id >= series_kinds_.size()) return Status::kInvalidArgument;
  value = cumulative_.value(id);
  return Status::kOk;
}

Status Reporter::histogram_bucket(std::uint32_t id, std::uint32_t bucket,
                                  std::uint64_t& count) const noexcept {
  if (const Status status = check_distribution(id); status != Status::kOk) return status;
  if (bucket > cumulative_.descriptor(id).bucket_count) return Status::kInvalidArgument;
  count = cumulative_.bucket_count_value(id, bucket);
  return Status::kOk;
}

void Reporter::close() noexcept {
  if (!file_.valid()) return;
  // A forked child holds a copy of this reporter over the parent's mapping. Marking the header closed
  // there would have the daemon retire a parent that is alive and writing (issue 22), and unlinking would
  // remove the parent's name: a close from any process but the opener only lets go of the mapping.
  if (owner_pid_ != ::getpid()) {
    abandon();
    return;
  }
  // close_segment only unlinks if the name still refers to this file, so a successor is never removed.
  shm::close_segment(file_, path_, unlink_on_close_);
  cumulative_ = {};
  series_kinds_.clear();
}

void Reporter::abandon() noexcept {
  // munmap and close(2) act on this process's mapping and descriptor only; nothing in the segment is
  // written, so the owner's header, heartbeat and name are exactly as they were.
  file_.reset();
  ring_ = {};
  cumulative_ = {};
  series_kinds_.clear();
}

}  // namespace rankstat
