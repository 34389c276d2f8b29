// Opening a segment as a reader: the consumer (rankstatd, which also publishes `head`) or a read-only
// observer (the CLI's --direct mode). Everything in the file is treated as untrusted: the header is
// copied out after the magic is seen, and every offset and size is checked against the real file size
// before anything behind it is touched.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/schema.hpp"
#include "rankstat/shmproto/segment.hpp"

namespace rankstat::shm {

// Why a reader refused a segment file. X(enumerator, name): the name is what the daemon's API and
// self-metrics call the reason.
// clang-format off
#define RANKSTAT_REJECT_REASONS(X)                                                                        \
  X(kNone, "none")                                                                                        \
  X(kNotReady, "not_ready")             /* magic not yet written: retry later; not an error */            \
  X(kOpenFailed, "open_failed")         /* open/fstat/mmap failed (permissions, vanished) */              \
  X(kTooSmall, "too_small")             /* smaller than a header page */                                  \
  X(kBadMagic, "bad_magic")                                                                               \
  X(kMajorMismatch, "major_mismatch")   /* incompatible layout major */                                   \
  X(kLayoutMismatch, "layout_mismatch") /* same major and minor, different layout hash: a broken build */ \
  X(kBadSize, "bad_size")               /* segment_bytes disagrees with the file size */                  \
  X(kBadGeometry, "bad_geometry")       /* ring or cumulative regions out of bounds or malformed */       \
  X(kBadIdentity, "bad_identity")       /* strings not terminated, unknown role, bad labels */
// clang-format on

RANKSTAT_DEFINE_ENUM_WITH_TEXTS(RejectReason, kRejectReasonNames, RANKSTAT_REJECT_REASONS)
inline constexpr int kRejectReasonCount = static_cast<int>(std::size(kRejectReasonNames));

inline std::string_view reject_reason_name(RejectReason reason) {
  const auto index = static_cast<std::size_t>(reason);
  return index < std::size(kRejectReasonNames) ? kRejectReasonNames[index] : std::string_view("unknown");
}

inline std::string format_version(std::uint16_t major, std::uint16_t minor, std::uint64_t hash) {
  char text[64];
  std::snprintf(text, sizeof text, "%u.%u (layout hash %016llx)", major, minor,
                static_cast<unsigned long long>(hash));
  return text;
}

inline bool is_terminated(const char* text, std::size_t capacity) {
  return std::memchr(text, '\0', capacity) != nullptr;
}

// Checks a copied header against the file size. Returns kNone and leaves `message` empty if usable.
inline RejectReason validate_header(const SegmentHeader& h, std::uint64_t file_bytes, std::string& message) {
  if (h.magic != kMagic) {
    message = "bad magic " + std::to_string(h.magic);
    return RejectReason::kBadMagic;
  }
  if (h.layout_major != kLayoutMajor) {
    message = "segment layout " + format_version(h.layout_major, h.layout_minor, h.layout_hash) +
              " is incompatible with this reader's " +
              format_version(kLayoutMajor, kLayoutMinor, kLayoutHash) + ": the layout major must match";
    return RejectReason::kMajorMismatch;
  }
  if (h.layout_minor == kLayoutMinor && h.layout_hash != kLayoutHash) {
    message = "segment layout " + format_version(h.layout_major, h.layout_minor, h.layout_hash) +
              " has the same version as this reader's " +
              format_version(kLayoutMajor, kLayoutMinor, kLayoutHash) +
              " but a different layout hash: writer and reader were built from incompatible sources";
    return RejectReason::kLayoutMismatch;
  }
  if (h.header_bytes != kHeaderBytes || h.segment_bytes != file_bytes) {
    message =
        "header says " + std::to_string(h.segment_bytes) + " bytes, file has " + std::to_string(file_bytes);
    return RejectReason::kBadSize;
  }
  const bool ring_ok = is_power_of_two(h.ring_bytes) && h.ring_bytes >= kMinRingBytes &&
                       h.ring_bytes <= kMaxRingBytes && h.ring_offset >= kHeaderBytes &&
                       h.ring_offset % kRecordAlignment == 0 && h.ring_offset <= file_bytes &&
                       h.ring_bytes <= file_bytes - h.ring_offset;
  const bool records_ok = h.max_record_bytes >= sizeof(RecordHeader) && h.max_record_bytes <= kMaxRecordBytes;
  bool cumulative_ok = h.cumulative_offset >= kHeaderBytes && h.cumulative_offset % 8 == 0 &&
                       h.cumulative_offset <= file_bytes && h.cumulative_bytes >= sizeof(CumulativeHeader) &&
                       h.cumulative_bytes <= file_bytes - h.cumulative_offset;
  if (ring_ok && cumulative_ok) {
    const bool disjoint = h.ring_offset + h.ring_bytes <= h.cumulative_offset ||
                          h.cumulative_offset + h.cumulative_bytes <= h.ring_offset;
    cumulative_ok = disjoint;
  }
  if (!ring_ok || !records_ok || !cumulative_ok) {
    message = "ring or cumulative block outside the file (ring " + std::to_string(h.ring_offset) + "+" +
              std::to_string(h.ring_bytes) + ", cumulative " + std::to_string(h.cumulative_offset) + "+" +
              std::to_string(h.cumulative_bytes) + ", file " + std::to_string(file_bytes) + ")";
    return RejectReason::kBadGeometry;
  }
  const bool role_ok = h.role >= static_cast<std::uint32_t>(Role::kScheduler) &&
                       h.role <= static_cast<std::uint32_t>(Role::kOther);
  if (!role_ok || !is_terminated(h.instance, sizeof h.instance) ||
      !is_terminated(h.model_name, sizeof h.model_name) ||
      !is_terminated(h.engine_type, sizeof h.engine_type) || !is_terminated(h.rank_key, sizeof h.rank_key) ||
      !decode_label_pairs(h.extra_labels, sizeof h.extra_labels)) {
    message = "identity fields are malformed (role " + std::to_string(h.role) + ")";
    return RejectReason::kBadIdentity;
  }
  return RejectReason::kNone;
}

// The cumulative block's own geometry, validated against the bytes the header gives it.
inline bool read_cumulative_geometry(const std::uint8_t* block, std::uint64_t block_bytes,
                                     CumulativeGeometry& out) {
  CumulativeHeader header{};
  std::memcpy(&header, block, sizeof header);
  out = CumulativeGeometry{header.series_capacity, header.bounds_capacity, header.values_capacity,
                           header.text_capacity};
  if (header.series_capacity > kMaxSeriesCapacity || header.bounds_capacity > kMaxBoundsCapacity ||
      header.values_capacity > kMaxValuesCapacity || header.text_capacity == 0 ||
      header.text_capacity > kMaxTextCapacity) {
    return false;
  }
  return out.text_offset() + std::uint64_t{out.text_capacity} <= block_bytes;
}

struct OpenedSegment {
  RejectReason reason = RejectReason::kNone;
  std::string message;
  MappedFile file;
  SegmentHeader identity{};  // group A as copied at open time (groups B and C zeroed)
  CumulativeGeometry cumulative_geometry{};
  std::uint64_t inode = 0;
  std::uint64_t device = 0;
  std::uint32_t owner_uid = 0;  // of the descriptor actually opened (fstat), for trust checks
  std::uint32_t mode = 0;
  // errno of a kOpenFailed open or mmap: EMFILE, ENFILE and ENOMEM are transient (retry later), not
  // a verdict on the file.
  int error = 0;

  const std::uint8_t* ring() const { return file.bytes() + identity.ring_offset; }
  CumulativeRegion cumulative() const {
    return cumulative_region(file.bytes() + identity.cumulative_offset, cumulative_geometry);
  }
};

// True for an open/mmap failure that says nothing about the file: out of descriptors or memory.
inline bool is_transient_open_error(int error) {
  return error == EMFILE || error == ENFILE || error == ENOMEM;
}

// Opens and validates a segment. `consumer` maps it writable so the reader can publish `head`;
// observers map it read-only and never write. O_NONBLOCK and O_NOFOLLOW: a FIFO or symlink swapped in
// after the caller's lstat can neither block the open nor redirect it; the fstat below then refuses
// anything but a regular file.
inline OpenedSegment open_segment(const std::string& path, bool consumer) {
  OpenedSegment out;
  const int fd = ::open(path.c_str(), (consumer ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    out.error = errno;
    out.reason = RejectReason::kOpenFailed;
    out.message = "cannot open " + path + ": " + errno_text(out.error);
    return out;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    out.reason = RejectReason::kOpenFailed;
    out.message = "not a regular file: " + path;
    return out;
  }
  out.owner_uid = st.st_uid;
  out.mode = st.st_mode;
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes < kHeaderBytes) {
    ::close(fd);
    out.reason = RejectReason::kTooSmall;
    out.message = path + " has " + std::to_string(file_bytes) + " bytes, less than a header page";
    return out;
  }
  void* address = mmap(nullptr, file_bytes, consumer ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    out.error = e;
    out.reason = RejectReason::kOpenFailed;
    out.message = "cannot map " + path + ": " + errno_text(e);
    return out;
  }
  out.file = MappedFile(fd, address, file_bytes);
  out.inode = st.st_ino;
  out.device = st.st_dev;
  SegmentHeader& live = *out.file.header();
  if (shared(live.magic).load(std::memory_order_acquire) == 0) {
    out.reason = RejectReason::kNotReady;
    out.message = path + " is not initialised yet";
    out.file.reset();
    return out;
  }
  // Group A is immutable once the magic is visible; copy it and never read it from the mapping again.
  std::memcpy(&out.identity, &live, kProducerGroupOffset);
  out.reason = validate_header(out.identity, file_bytes, out.message);
  if (out.reason == RejectReason::kNone &&
      !read_cumulative_geometry(out.file.bytes() + out.identity.cumulative_offset,
                                out.identity.cumulative_bytes, out.cumulative_geometry)) {
    out.reason = RejectReason::kBadGeometry;
    out.message =
        "cumulative block capacities exceed its " + std::to_string(out.identity.cumulative_bytes) + " bytes";
  }
  if (out.reason != RejectReason::kNone) {
    out.message = path + ": " + out.message;
    out.file.reset();
  }
  return out;
}

// Producer-group fields, read atomically from the live mapping.
struct ProducerState {
  std::uint64_t tail = 0;
  std::uint64_t records_written = 0;
  std::uint64_t dropped_records = 0;
  std::uint64_t oversize_records = 0;
  std::uint64_t heartbeat_ns = 0;
  bool closed = false;
  std::uint64_t head = 0;
  // The writer has reported a typed scheduler snapshot: it steps on a clock (every scheduler step, a
  // heartbeat when idle), so a stale heartbeat means it is stuck. A writer that has only ever sent metric
  // updates (the prometheus_client-compatible classes) reports on events: silence means idle.
  bool reports_steps = false;
};

inline ProducerState read_producer_state(SegmentHeader& live) {
  ProducerState s;
  s.closed = shared(live.closed).load(std::memory_order_acquire) != 0;
  s.tail = shared(live.tail).load(std::memory_order_acquire);
  s.records_written = shared(live.records_written).load(std::memory_order_relaxed);
  s.dropped_records = shared(live.dropped_records).load(std::memory_order_relaxed);
  s.oversize_records = shared(live.oversize_records).load(std::memory_order_relaxed);
  s.heartbeat_ns = shared(live.heartbeat_ns).load(std::memory_order_relaxed);
  s.head = shared(live.head).load(std::memory_order_relaxed);
  constexpr auto kSnapshotSlot = static_cast<std::size_t>(RecordType::kSchedulerSnapshot);
  s.reports_steps = shared(live.latest_record_position[kSnapshotSlot]).load(std::memory_order_relaxed) != 0;
  return s;
}

}  // namespace rankstat::shm
