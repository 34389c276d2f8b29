// The SPSC record ring: one writer (the rank thread that owns the segment), one consumer (rankstatd).
//
// Memory-ordering protocol (docs/shm-layout.md, "Ordering"):
//   writer:   copy record bytes into [tail, tail+slot)  ->  tail.store(release)
//   consumer: t = tail.load(acquire)  ->  copy out [head, t)  ->  head.store(release)
//   writer, only when the ring looks full: head.load(acquire) before reusing bytes.
// The writer never waits: when the record does not fit it drops the record (the newest) and counts it.
// Neither side trusts the other's index: a garbage head makes the writer drop, never write out of
// bounds; a garbage tail or record length makes the consumer stop and report the segment as corrupt.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "rankstat/shmproto/layout.hpp"

namespace rankstat::shm {

enum class AppendStatus : std::uint8_t { kOk = 0, kFull = 1, kOversize = 2 };

template <typename T>
inline std::atomic_ref<T> shared(T& field) {
  return std::atomic_ref<T>(field);
}

// Writer half. Not thread-safe: exactly one thread of the owning process calls append().
class RingWriter {
 public:
  RingWriter() = default;
  RingWriter(SegmentHeader* header, std::uint8_t* ring, std::uint64_t ring_bytes,
             std::uint32_t max_record_bytes)
      : header_(header),
        ring_(ring),
        ring_bytes_(ring_bytes),
        mask_(ring_bytes - 1),
        max_record_bytes_(max_record_bytes) {
    // A reopened writer would resume from the published state; a fresh segment starts at zero.
    tail_ = shared(header_->tail).load(std::memory_order_relaxed);
    sequence_ = shared(header_->records_written).load(std::memory_order_relaxed);
    dropped_ = shared(header_->dropped_records).load(std::memory_order_relaxed);
    oversize_ = shared(header_->oversize_records).load(std::memory_order_relaxed);
    head_cache_ = tail_;
  }

  // Zero-copy append, first half: reserves room for a record with `payload_bytes` of payload and returns
  // where the payload goes, or nullptr when the record does not fit (counted as a drop) or is too large
  // (counted as oversize); `status` says which. Nothing is visible to the consumer until commit(). The
  // caller must call commit() before the next claim().
  std::uint8_t* claim(RecordType type, std::uint16_t type_version, std::uint32_t payload_bytes,
                      AppendStatus& status) {
    const std::uint64_t length = sizeof(RecordHeader) + std::uint64_t{payload_bytes};
    if (length > max_record_bytes_) {
      shared(header_->oversize_records).store(++oversize_, std::memory_order_relaxed);
      status = AppendStatus::kOversize;
      return nullptr;
    }
    const std::uint64_t slot = align_up(length, kRecordAlignment);
    std::uint64_t index = tail_ & mask_;
    const std::uint64_t to_end = ring_bytes_ - index;
    const std::uint64_t padding = slot > to_end ? to_end : 0;
    const std::uint64_t required = slot + padding;
    if (tail_ + required - head_cache_ > ring_bytes_) {
      head_cache_ = shared(header_->head).load(std::memory_order_acquire);
      // head beyond tail, or more than a ring behind, can only be garbage: treat as full.
      if (head_cache_ > tail_ || tail_ - head_cache_ > ring_bytes_ ||
          tail_ + required - head_cache_ > ring_bytes_) {
        shared(header_->dropped_records).store(++dropped_, std::memory_order_relaxed);
        status = AppendStatus::kFull;
        return nullptr;
      }
    }
    if (padding != 0) {
      // Unpublished until commit() moves tail past it together with the record.
      RecordHeader pad{};
      pad.length = static_cast<std::uint32_t>(to_end);
      pad.type = static_cast<std::uint16_t>(RecordType::kPadding);
      std::memcpy(ring_ + index, &pad, sizeof pad);
      pending_position_ = tail_ + to_end;
      index = 0;
    } else {
      pending_position_ = tail_;
    }
    pending_index_ = index;
    pending_header_ = RecordHeader{};
    pending_header_.length = static_cast<std::uint32_t>(length);
    pending_header_.type = static_cast<std::uint16_t>(type);
    pending_header_.type_version = type_version;
    pending_slot_ = slot;
    status = AppendStatus::kOk;
    return ring_ + index + sizeof(RecordHeader);
  }

  // Zero-copy append, second half: stamps the claimed record with its sequence number and
  // `timestamp_ns` and publishes it (release store of tail).
  void commit(std::uint64_t timestamp_ns) {
    pending_header_.sequence = sequence_;
    pending_header_.timestamp_ns = timestamp_ns;
    std::memcpy(ring_ + pending_index_, &pending_header_, sizeof pending_header_);
    tail_ = pending_position_ + pending_slot_;
    ++sequence_;
    if (pending_header_.type < kMaxRecordTypes) {
      shared(header_->latest_record_position[pending_header_.type])
          .store(pending_position_ + 1, std::memory_order_release);
    }
    shared(header_->tail).store(tail_, std::memory_order_release);
    shared(header_->records_written).store(sequence_, std::memory_order_relaxed);
    shared(header_->heartbeat_ns).store(timestamp_ns, std::memory_order_relaxed);
  }

  // Appends one record whose payload is `first` followed by `second` (either may be empty), behind a
  // RecordHeader stamped with `timestamp_ns`.
  AppendStatus append(RecordType type, std::uint16_t type_version, std::span<const std::uint8_t> first,
                      std::span<const std::uint8_t> second, std::uint64_t timestamp_ns) {
    AppendStatus status = AppendStatus::kOk;
    std::uint8_t* payload =
        claim(type, type_version, static_cast<std::uint32_t>(first.size() + second.size()), status);
    if (payload == nullptr) return status;
    if (!first.empty()) std::memcpy(payload, first.data(), first.size());
    if (!second.empty()) std::memcpy(payload + first.size(), second.data(), second.size());
    commit(timestamp_ns);
    return AppendStatus::kOk;
  }

  AppendStatus append(RecordType type, std::uint16_t type_version, const void* payload,
                      std::uint32_t payload_bytes, std::uint64_t timestamp_ns) {
    return append(type, type_version, std::span(static_cast<const std::uint8_t*>(payload), payload_bytes), {},
                  timestamp_ns);
  }

  std::uint64_t dropped_records() const { return dropped_; }
  std::uint64_t records_written() const { return sequence_; }

 private:
  SegmentHeader* header_ = nullptr;
  std::uint8_t* ring_ = nullptr;
  std::uint64_t ring_bytes_ = 0;
  std::uint64_t mask_ = 0;
  std::uint32_t max_record_bytes_ = 0;
  std::uint64_t tail_ = 0;
  std::uint64_t head_cache_ = 0;
  std::uint64_t sequence_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t oversize_ = 0;
  // The record between claim() and commit().
  RecordHeader pending_header_{};
  std::uint64_t pending_index_ = 0;
  std::uint64_t pending_position_ = 0;
  std::uint64_t pending_slot_ = 0;
};

enum class DrainStatus : std::uint8_t {
  kOk = 0,
  kCorruptIndex = 1,   // tail behind head, more than a ring ahead, or either not 64-byte aligned
  kCorruptRecord = 2,  // a record length or padding that cannot be right
};

struct DrainStats {
  std::uint64_t records = 0;        // delivered to the callback
  std::uint64_t bytes = 0;          // ring bytes consumed, padding included
  std::uint64_t sequence_gaps = 0;  // records missing between two delivered ones
  DrainStatus status = DrainStatus::kOk;
};

// Consumer half. Not thread-safe: one consumer thread per segment. It copies each record into its own
// buffer before the callback sees it, so the callback may parse it without racing the writer.
class RingReader {
 public:
  RingReader() = default;
  RingReader(SegmentHeader* header, const std::uint8_t* ring, std::uint64_t ring_bytes, bool publish_head)
      : header_(header),
        ring_(ring),
        ring_bytes_(ring_bytes),
        mask_(ring_bytes - 1),
        publish_head_(publish_head) {
    head_ = shared(header_->head).load(std::memory_order_acquire);
  }

  std::uint64_t head() const { return head_; }

  // Delivers up to max_bytes worth of committed records to `on_record(const RecordHeader&,
  // std::span<const std::uint8_t> payload)`; stops at the first inconsistency and reports it.
  template <typename OnRecord>
  DrainStats drain(OnRecord&& on_record, std::uint64_t max_bytes = ~0ull) {
    DrainStats stats;
    const std::uint64_t tail = shared(header_->tail).load(std::memory_order_acquire);
    // Records start on 64-byte boundaries and padding runs exactly to the ring's end, so a consumed
    // position is always aligned, and so is every tail the writer publishes (the end of a whole slot). An
    // unaligned head (garbage read at attach) would put a record header across the end of the ring, and
    // the copy below past the ring (found by tests/fuzz/fuzz_ring); an unaligned tail is garbage too, and
    // is refused before any record is read, not found later by a record's length.
    if (tail < head_ || tail - head_ > ring_bytes_ || head_ % kRecordAlignment != 0 ||
        tail % kRecordAlignment != 0) {
      stats.status = DrainStatus::kCorruptIndex;
      return stats;
    }
    std::uint64_t head = head_;
    while (head < tail && stats.bytes < max_bytes) {
      const std::uint64_t index = head & mask_;
      const std::uint64_t to_end = ring_bytes_ - index;
      RecordHeader record{};
      std::memcpy(&record, ring_ + index, sizeof record);
      const std::uint64_t available = tail - head;
      if (record.length < sizeof(RecordHeader) || record.length > to_end ||
          align_up(record.length, kRecordAlignment) > available) {
        stats.status = DrainStatus::kCorruptRecord;
        break;
      }
      if (record.type == static_cast<std::uint16_t>(RecordType::kPadding)) {
        if (record.length != to_end) {
          stats.status = DrainStatus::kCorruptRecord;
          break;
        }
        head += to_end;
        stats.bytes += to_end;
        continue;
      }
      const std::uint32_t payload_bytes = record.length - static_cast<std::uint32_t>(sizeof(RecordHeader));
      if (payload_bytes > sizeof(scratch_)) {
        stats.status = DrainStatus::kCorruptRecord;
        break;
      }
      std::memcpy(scratch_, ring_ + index + sizeof(RecordHeader), payload_bytes);
      if (have_sequence_ && record.sequence > next_sequence_)
        stats.sequence_gaps += record.sequence - next_sequence_;
      have_sequence_ = true;
      next_sequence_ = record.sequence + 1;
      const std::uint64_t slot = align_up(record.length, kRecordAlignment);
      head += slot;
      stats.bytes += slot;
      ++stats.records;
      on_record(record, std::span<const std::uint8_t>(scratch_, payload_bytes));
    }
    head_ = head;
    if (publish_head_) shared(header_->head).store(head_, std::memory_order_release);
    return stats;
  }

 private:
  SegmentHeader* header_ = nullptr;
  const std::uint8_t* ring_ = nullptr;
  std::uint64_t ring_bytes_ = 0;
  std::uint64_t mask_ = 0;
  bool publish_head_ = true;
  std::uint64_t head_ = 0;
  bool have_sequence_ = false;
  std::uint64_t next_sequence_ = 0;
  alignas(8) std::uint8_t scratch_[kMaxRecordBytes]{};
};

// Copies `bytes` out of the ring with acquire loads of whole 8-byte words. `source` must be 8-byte
// aligned and the copy may read up to 7 bytes past `bytes` (still inside the record's 64-byte slot).
// Each acquire load keeps any later load, such as peek_latest_record's tail re-read, from being
// satisfied before it: the seqlock-style validation without a standalone fence, which ThreadSanitizer
// cannot model (GCC 12 rejects atomic_thread_fence under -fsanitize=thread).
inline void copy_words_acquire(const std::uint8_t* source, void* out, std::size_t bytes) {
  auto* destination = static_cast<std::uint8_t*>(out);
  for (std::size_t done = 0; done < bytes; done += 8) {
    auto& word = *reinterpret_cast<std::uint64_t*>(const_cast<std::uint8_t*>(source + done));
    const std::uint64_t value = shared(word).load(std::memory_order_acquire);
    std::memcpy(destination + done, &value, bytes - done < 8 ? bytes - done : 8);
  }
}

// Copies the newest committed record of `type` without consuming anything, for read-only observers
// (the CLI's --direct mode). The bytes are read while the writer may be reusing them, so the copy is
// validated afterwards: it is accepted only if the writer cannot have reached that position again,
// judged by a tail re-read after the copy. Returns the payload size, or -1 when there is no such record
// or it was overwritten. Cross-process use only: it races the writer by design (seqlock-style).
inline std::int64_t peek_latest_record(const SegmentHeader* header, const std::uint8_t* ring,
                                       std::uint64_t ring_bytes, RecordType type, RecordHeader& out_header,
                                       std::span<std::uint8_t> out_payload) {
  const auto type_slot = static_cast<std::uint16_t>(type);
  if (type_slot >= kMaxRecordTypes) return -1;
  auto& mutable_header = const_cast<SegmentHeader&>(*header);
  const std::uint64_t position_plus_one =
      shared(mutable_header.latest_record_position[type_slot]).load(std::memory_order_acquire);
  if (position_plus_one == 0) return -1;
  const std::uint64_t position = position_plus_one - 1;
  const std::uint64_t index = position & (ring_bytes - 1);
  // Records start on 64-byte boundaries; anything else is a garbage position (and would misalign the
  // word loads below).
  if (index % kRecordAlignment != 0 || index + sizeof(RecordHeader) > ring_bytes) return -1;
  copy_words_acquire(ring + index, &out_header, sizeof out_header);
  if (out_header.length < sizeof(RecordHeader) || out_header.length > ring_bytes - index ||
      out_header.type != type_slot) {
    return -1;
  }
  const std::uint32_t payload_bytes = out_header.length - static_cast<std::uint32_t>(sizeof(RecordHeader));
  if (payload_bytes > out_payload.size()) return -1;
  copy_words_acquire(ring + index + sizeof(RecordHeader), out_payload.data(), payload_bytes);
  // Relaxed is enough: the acquire loads of the copy already keep this load after them.
  const std::uint64_t tail = shared(mutable_header.tail).load(std::memory_order_relaxed);
  // A write in flight covers at most [tail, tail + 2 * largest slot) (a padding header, then the record at
  // the start of the ring); it reaches `position` again only once that span passes position + ring_bytes.
  constexpr std::uint64_t kInFlightBytes = std::uint64_t{2} * (kMaxRecordBytes + kRecordAlignment);
  if (tail < position || tail - position + kInFlightBytes > ring_bytes) return -1;
  return payload_bytes;
}

}  // namespace rankstat::shm
