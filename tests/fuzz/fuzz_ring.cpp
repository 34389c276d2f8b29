// The record ring alone, with arbitrary head, tail, record lengths and latest-record positions:
//   input = [u8 ring size: 4 KiB << (n % 5)][u8 max records per drain][u16 unused][u32 append sizes seed]
//           [u64 head][u64 tail][u64 latest position + 1][ring bytes...]
// The consumer drains it twice (as the daemon does, pass after pass) and peeks the newest snapshot the
// way the CLI does; then a writer appends into the same ring behind that garbage head. The ring is a
// heap buffer of exactly ring_bytes, so AddressSanitizer sees any access outside it from either side.
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz_common.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace shm = rankstat::shm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rankstat::fuzz::Bytes in(data, size);
  const std::uint64_t ring_bytes = std::uint64_t{4096} << (in.take<std::uint8_t>() % 5);
  const std::uint8_t max_records = in.take<std::uint8_t>();
  (void)in.take<std::uint16_t>();
  std::uint32_t sizes = in.take<std::uint32_t>();
  const auto head = in.take<std::uint64_t>();
  const auto tail = in.take<std::uint64_t>();
  const auto latest = in.take<std::uint64_t>();

  auto header = std::make_unique<shm::SegmentHeader>();
  header->head = head;
  header->tail = tail;
  header->latest_record_position[static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot)] = latest;
  auto ring_words = std::make_unique<std::uint64_t[]>(ring_bytes / 8);
  auto* ring = reinterpret_cast<std::uint8_t*>(ring_words.get());
  std::memcpy(ring, in.data(), in.size() < ring_bytes ? in.size() : ring_bytes);

  shm::RingReader reader(header.get(), ring, ring_bytes, /*publish_head=*/true);
  std::uint64_t delivered = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const std::uint64_t before = reader.head();
    const shm::DrainStats stats = reader.drain(
        [&](const shm::RecordHeader& record, std::span<const std::uint8_t> payload) {
          RANKSTAT_FUZZ_EXPECT(record.length >= sizeof(shm::RecordHeader));
          RANKSTAT_FUZZ_EXPECT(payload.size() == record.length - sizeof(shm::RecordHeader));
          RANKSTAT_FUZZ_EXPECT(record.type != static_cast<std::uint16_t>(shm::RecordType::kPadding));
          ++delivered;
        },
        max_records == 0 ? ~0ull : std::uint64_t{max_records} * 64);
    RANKSTAT_FUZZ_EXPECT(reader.head() == before + stats.bytes);
    RANKSTAT_FUZZ_EXPECT(stats.status != shm::DrainStatus::kOk || reader.head() <= tail || stats.bytes == 0);
    if (stats.status == shm::DrainStatus::kOk)
      RANKSTAT_FUZZ_EXPECT(shm::shared(header->head).load() == reader.head());
  }
  std::vector<std::uint8_t> payload(shm::kMaxRecordBytes);
  shm::RecordHeader record{};
  const std::int64_t peeked = shm::peek_latest_record(header.get(), ring, ring_bytes,
                                                      shm::RecordType::kSchedulerSnapshot, record, payload);
  if (peeked >= 0) {
    RANKSTAT_FUZZ_EXPECT(static_cast<std::uint64_t>(peeked) + sizeof(shm::RecordHeader) == record.length);
    RANKSTAT_FUZZ_EXPECT(record.length <= ring_bytes);
  }

  // The writer behind a garbage head (its own tail is its own: start from an aligned one). It may
  // drop everything, but must never write outside the ring.
  header->tail = tail & ~std::uint64_t{63};
  header->records_written = 0;
  shm::RingWriter writer(header.get(), ring, ring_bytes, shm::kSchedulerRecordMaxBytes);
  std::vector<std::uint8_t> body(shm::kMaxRecordBytes, 0x5A);
  for (int i = 0; i < 16; ++i) {
    const std::uint32_t bytes = sizes % (shm::kSchedulerRecordMaxBytes + 64);
    sizes = sizes * 1664525u + 1013904223u;
    const auto status = writer.append(shm::RecordType::kSchedulerSnapshot, 1, body.data(), bytes, 1);
    if (status == shm::AppendStatus::kOk) {
      const std::uint64_t published = shm::shared(header->tail).load();
      RANKSTAT_FUZZ_EXPECT(published % 64 == 0);
    }
  }
  (void)delivered;
  return 0;
}
