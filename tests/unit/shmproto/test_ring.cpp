// The SPSC record ring, on a heap-allocated header and ring so that canaries around the ring show any
// write outside it. The concurrent test runs writer and reader in two threads of one process and only
// uses append/drain, whose release/acquire protocol ThreadSanitizer can check.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/ring.hpp"

namespace {

namespace shm = rankstat::shm;

constexpr std::size_t kCanaryBytes = 4096;
constexpr std::uint8_t kCanary = 0xA5;
constexpr auto kTestType = static_cast<shm::RecordType>(3);

// A header plus a ring surrounded by canary bytes, standing in for a mapped segment.
class RingFixture {
 public:
  explicit RingFixture(std::uint64_t ring_bytes, std::uint32_t max_record_bytes = 2048)
      : header_(std::make_unique<shm::SegmentHeader>()),
        storage_(kCanaryBytes + ring_bytes + kCanaryBytes, kCanary),
        ring_bytes_(ring_bytes),
        max_record_bytes_(max_record_bytes) {
    std::memset(ring(), 0, ring_bytes);
  }

  shm::SegmentHeader* header() { return header_.get(); }
  std::uint8_t* ring() { return storage_.data() + kCanaryBytes; }
  std::uint64_t ring_bytes() const { return ring_bytes_; }

  shm::RingWriter writer() { return shm::RingWriter(header(), ring(), ring_bytes_, max_record_bytes_); }
  // RingReader carries a 16 KiB scratch buffer: keep it off the stack.
  std::unique_ptr<shm::RingReader> reader() {
    return std::make_unique<shm::RingReader>(header(), ring(), ring_bytes_, true);
  }

  bool canaries_intact() const {
    for (std::size_t i = 0; i < kCanaryBytes; ++i) {
      if (storage_[i] != kCanary || storage_[kCanaryBytes + ring_bytes_ + i] != kCanary) return false;
    }
    return true;
  }

 private:
  std::unique_ptr<shm::SegmentHeader> header_;
  std::vector<std::uint8_t> storage_;
  std::uint64_t ring_bytes_;
  std::uint32_t max_record_bytes_;
};

// Payload bytes derived from a key, so the consumer can check a record without the producer's copy.
void fill_payload(std::uint64_t key, std::span<std::uint8_t> out) {
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(key * 131 + i * 7 + (key >> 8));
}

bool payload_matches(std::uint64_t key, std::span<const std::uint8_t> payload) {
  for (std::size_t i = 0; i < payload.size(); ++i) {
    if (payload[i] != static_cast<std::uint8_t>(key * 131 + i * 7 + (key >> 8))) return false;
  }
  return true;
}

struct Delivered {
  shm::RecordHeader header;
  std::vector<std::uint8_t> payload;
};

std::vector<Delivered> drain_all(shm::RingReader& reader, shm::DrainStats* stats_out = nullptr) {
  std::vector<Delivered> out;
  const shm::DrainStats stats =
      reader.drain([&](const shm::RecordHeader& h, std::span<const std::uint8_t> payload) {
        out.push_back({h, std::vector<std::uint8_t>(payload.begin(), payload.end())});
      });
  if (stats_out != nullptr) *stats_out = stats;
  return out;
}

shm::AppendStatus append_sized(shm::RingWriter& writer, std::uint64_t key, std::size_t payload_bytes) {
  std::vector<std::uint8_t> payload(payload_bytes);
  fill_payload(key, payload);
  return writer.append(kTestType, 1, payload.data(), static_cast<std::uint32_t>(payload.size()), key);
}

std::uint64_t load(std::uint64_t& field) {
  return shm::shared(field).load(std::memory_order_acquire);
}

}  // namespace

TEST_CASE("The ring delivers every record across wrap-arounds in order with dense sequence numbers",
          "[ring]") {
  RingFixture fixture(4096);
  shm::RingWriter writer = fixture.writer();
  auto reader = fixture.reader();
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<std::size_t> size_of(0, 1200);

  struct Expected {
    std::uint64_t key;
    std::size_t size;
  };
  std::deque<Expected> in_flight;
  std::uint64_t next_sequence = 0;
  std::uint64_t delivered = 0;
  std::uint64_t full_results = 0;
  std::uint64_t mismatches = 0;
  auto consume = [&] {
    shm::DrainStats stats;
    for (const Delivered& d : drain_all(*reader, &stats)) {
      REQUIRE_FALSE(in_flight.empty());
      const Expected e = in_flight.front();
      in_flight.pop_front();
      if (d.header.sequence != next_sequence || d.header.timestamp_ns != e.key ||
          d.payload.size() != e.size || d.header.length != sizeof(shm::RecordHeader) + e.size ||
          d.header.type != 3 || d.header.type_version != 1 || !payload_matches(e.key, d.payload)) {
        ++mismatches;
      }
      ++next_sequence;
      ++delivered;
    }
    CHECK(stats.status == shm::DrainStatus::kOk);
    CHECK(stats.sequence_gaps == 0);
  };

  constexpr std::uint64_t kRecords = 5000;
  std::vector<std::uint8_t> payload;
  for (std::uint64_t key = 0; key < kRecords;) {
    const std::size_t size = size_of(rng);
    payload.resize(size);
    fill_payload(key, payload);
    // Every third record goes in as two pieces, the way report_scheduler writes fixed part + entries.
    const std::size_t split = key % 3 == 0 ? size / 2 : size;
    shm::AppendStatus status;
    do {
      status = writer.append(kTestType, 1, std::span<const std::uint8_t>(payload.data(), split),
                             std::span<const std::uint8_t>(payload.data() + split, size - split), key);
      if (status == shm::AppendStatus::kFull) {
        ++full_results;
        consume();
      }
    } while (status == shm::AppendStatus::kFull);
    REQUIRE(status == shm::AppendStatus::kOk);
    in_flight.push_back({key, size});
    ++key;
  }
  consume();

  CHECK(mismatches == 0);
  CHECK(delivered == kRecords);
  CHECK(in_flight.empty());
  CHECK(writer.records_written() == kRecords);
  CHECK(writer.dropped_records() == full_results);
  CHECK(load(fixture.header()->records_written) == kRecords);
  CHECK(load(fixture.header()->tail) == reader->head());
  CHECK(load(fixture.header()->head) == reader->head());
  // Thousands of records of up to 1.2 KiB through 4 KiB: the ring wrapped many times.
  CHECK(reader->head() > 100 * fixture.ring_bytes());
  CHECK(fixture.canaries_intact());
}

TEST_CASE("A full ring drops the newest records and counts every drop exactly", "[ring]") {
  RingFixture fixture(4096);
  shm::RingWriter writer = fixture.writer();
  auto reader = fixture.reader();
  // 24 + 104 = 128 bytes per record: exactly 32 fill the ring.
  constexpr std::size_t kPayload = 104;
  for (std::uint64_t key = 0; key < 32; ++key)
    REQUIRE(append_sized(writer, key, kPayload) == shm::AppendStatus::kOk);

  constexpr std::uint64_t kExtra = 17;
  for (std::uint64_t key = 32; key < 32 + kExtra; ++key) {
    CHECK(append_sized(writer, key, kPayload) == shm::AppendStatus::kFull);
  }
  CHECK(writer.dropped_records() == kExtra);
  CHECK(load(fixture.header()->dropped_records) == kExtra);
  CHECK(writer.records_written() == 32);

  const auto first = drain_all(*reader);
  REQUIRE(first.size() == 32);
  for (std::uint64_t i = 0; i < 32; ++i) {
    CHECK(first[i].header.sequence == i);
    CHECK(first[i].header.timestamp_ns == i);  // the oldest survive, the newest were dropped
  }

  REQUIRE(append_sized(writer, 1000, kPayload) == shm::AppendStatus::kOk);
  shm::DrainStats stats;
  const auto second = drain_all(*reader, &stats);
  REQUIRE(second.size() == 1);
  CHECK(second[0].header.sequence == 32);  // drops do not consume sequence numbers
  CHECK(second[0].header.timestamp_ns == 1000);
  CHECK(stats.sequence_gaps == 0);
  CHECK(writer.dropped_records() == kExtra);
  CHECK(fixture.canaries_intact());
}

TEST_CASE("A record larger than the segment allows is refused and counted as oversize", "[ring]") {
  RingFixture fixture(4096, 512);
  shm::RingWriter writer = fixture.writer();
  CHECK(append_sized(writer, 1, 512 - sizeof(shm::RecordHeader)) == shm::AppendStatus::kOk);
  CHECK(append_sized(writer, 2, 512 - sizeof(shm::RecordHeader) + 1) == shm::AppendStatus::kOversize);
  CHECK(load(fixture.header()->oversize_records) == 1);
  CHECK(writer.dropped_records() == 0);
  CHECK(writer.records_written() == 1);
}

TEST_CASE("A record whose tail was never published stays invisible to the reader", "[ring]") {
  RingFixture fixture(4096);
  auto reader = fixture.reader();
  {
    shm::RingWriter writer = fixture.writer();
    for (std::uint64_t key = 0; key < 3; ++key)
      REQUIRE(append_sized(writer, key, 40) == shm::AppendStatus::kOk);
  }
  REQUIRE(drain_all(*reader).size() == 3);

  // A writer killed mid-record: header and payload bytes are in the ring, the tail store never happened.
  const std::uint64_t tail = load(fixture.header()->tail);
  shm::RecordHeader torn{};
  torn.length = sizeof(shm::RecordHeader) + 40;
  torn.type = 3;
  torn.sequence = 3;
  torn.timestamp_ns = 999;
  std::uint8_t* at = fixture.ring() + (tail & (fixture.ring_bytes() - 1));
  std::memcpy(at, &torn, sizeof torn);
  std::memset(at + sizeof torn, 0xEE, 40);

  shm::DrainStats stats;
  CHECK(drain_all(*reader, &stats).empty());
  CHECK(stats.status == shm::DrainStatus::kOk);
  CHECK(reader->head() == tail);

  // The restarted writer resumes from the published state and overwrites the torn bytes.
  shm::RingWriter restarted = fixture.writer();
  REQUIRE(append_sized(restarted, 7, 40) == shm::AppendStatus::kOk);
  const auto records = drain_all(*reader, &stats);
  REQUIRE(records.size() == 1);
  CHECK(records[0].header.sequence == 3);
  CHECK(records[0].header.timestamp_ns == 7);
  CHECK(payload_matches(7, records[0].payload));
  CHECK(stats.status == shm::DrainStatus::kOk);
}

TEST_CASE("A garbage head makes the writer drop records and never write outside the ring", "[ring]") {
  RingFixture fixture(4096);
  shm::RingWriter writer = fixture.writer();
  auto reader = fixture.reader();
  // Several laps first, so that "far behind" garbage is representable.
  for (std::uint64_t key = 0; key < 200; ++key) {
    if (append_sized(writer, key, 200) == shm::AppendStatus::kFull) drain_all(*reader);
  }
  drain_all(*reader);
  const std::uint64_t tail = load(fixture.header()->tail);
  REQUIRE(tail > 3 * fixture.ring_bytes());

  const std::uint64_t garbage = GENERATE_COPY(values<std::uint64_t>({
      tail + 64,          // ahead of the tail
      tail + 10 * 4096,   // far ahead
      ~std::uint64_t{0},  // all ones
      tail - 2 * 4096,    // more than a ring behind
      0,                  // from the first lap
  }));
  INFO("head = " << garbage << ", tail = " << tail);
  shm::shared(fixture.header()->head).store(garbage, std::memory_order_release);
  const std::uint64_t dropped_before = writer.dropped_records();

  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size_of(0, 1500);
  std::uint64_t ok = 0;
  std::uint64_t full = 0;
  for (std::uint64_t key = 0; key < 500; ++key) {
    const shm::AppendStatus status = append_sized(writer, key, size_of(rng));
    if (status == shm::AppendStatus::kOk) ++ok;
    if (status == shm::AppendStatus::kFull) ++full;
  }
  CHECK(ok + full == 500);
  // The cached head lets a few records into the space the last valid head freed; after that it drops.
  CHECK(full > 490);
  CHECK(writer.dropped_records() - dropped_before == full);
  CHECK(fixture.canaries_intact());
}

TEST_CASE("A garbage tail or record length makes the reader report corruption without crashing", "[ring]") {
  RingFixture fixture(4096);
  shm::RingWriter writer = fixture.writer();
  auto reader = fixture.reader();
  for (std::uint64_t key = 0; key < 5; ++key)
    REQUIRE(append_sized(writer, key, 40) == shm::AppendStatus::kOk);
  REQUIRE(drain_all(*reader).size() == 5);  // head = tail = 320
  REQUIRE(append_sized(writer, 5, 40) == shm::AppendStatus::kOk);
  const std::uint64_t head = reader->head();
  const std::uint64_t tail = load(fixture.header()->tail);
  std::uint8_t* record = fixture.ring() + (head & (fixture.ring_bytes() - 1));
  std::uint8_t* length_field = record + offsetof(shm::RecordHeader, length);
  std::uint32_t length = 0;
  std::memcpy(&length, length_field, sizeof length);

  SECTION("tail behind head") {
    shm::shared(fixture.header()->tail).store(head - 64, std::memory_order_release);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(stats.status == shm::DrainStatus::kCorruptIndex);
  }
  SECTION("tail more than a ring ahead") {
    shm::shared(fixture.header()->tail).store(head + fixture.ring_bytes() + 64, std::memory_order_release);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(stats.status == shm::DrainStatus::kCorruptIndex);
  }
  SECTION("tail not on a record boundary: refused as an index, before any record is read") {
    shm::shared(fixture.header()->tail).store(head + 8, std::memory_order_release);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(stats.status == shm::DrainStatus::kCorruptIndex);
  }
  SECTION("a record length shorter than its header") {
    const std::uint32_t bad = GENERATE(0u, 1u, 23u);
    std::memcpy(length_field, &bad, sizeof bad);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(stats.status == shm::DrainStatus::kCorruptRecord);
  }
  SECTION("a record length past the end of the ring") {
    const auto bad =
        static_cast<std::uint32_t>(fixture.ring_bytes() - (head & (fixture.ring_bytes() - 1)) + 64);
    std::memcpy(length_field, &bad, sizeof bad);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(stats.status == shm::DrainStatus::kCorruptRecord);
  }
  SECTION("a record length beyond the committed bytes") {
    const std::uint32_t bad = length + 64;
    std::memcpy(length_field, &bad, sizeof bad);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(stats.status == shm::DrainStatus::kCorruptRecord);
  }
  SECTION("a padding record that does not reach the end of the ring") {
    const auto padding = static_cast<std::uint16_t>(shm::RecordType::kPadding);
    std::memcpy(record + offsetof(shm::RecordHeader, type), &padding, sizeof padding);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(stats.status == shm::DrainStatus::kCorruptRecord);
  }
  SECTION("a stopped reader resumes once the record is repaired") {
    const std::uint32_t bad = 0;
    std::memcpy(length_field, &bad, sizeof bad);
    shm::DrainStats stats;
    CHECK(drain_all(*reader, &stats).empty());
    CHECK(reader->head() == head);
    std::memcpy(length_field, &length, sizeof length);
    CHECK(drain_all(*reader, &stats).size() == 1);
    CHECK(reader->head() == tail);
  }
  CHECK(fixture.canaries_intact());
}

TEST_CASE("A record longer than the reader's buffer is reported as corrupt", "[ring]") {
  RingFixture fixture(64 * 1024);
  auto reader = fixture.reader();
  shm::RecordHeader huge{};
  huge.length = shm::kMaxRecordBytes + 1024;
  huge.type = 3;
  std::memcpy(fixture.ring(), &huge, sizeof huge);
  shm::shared(fixture.header()->tail)
      .store(shm::align_up(huge.length, shm::kRecordAlignment), std::memory_order_release);
  shm::DrainStats stats;
  CHECK(drain_all(*reader, &stats).empty());
  CHECK(stats.status == shm::DrainStatus::kCorruptRecord);
}

TEST_CASE("A producer thread and a consumer thread pass 100000 records with exact accounting",
          "[ring][threads]") {
  constexpr std::uint64_t kRecords = 100'000;
  struct Mode {
    std::uint64_t ring_bytes;
    std::size_t max_payload;
  };
  // Big enough: 100000 slots of 64 bytes fit in 8 MiB, so nothing may be lost however slow the consumer.
  // Small: a 4 KiB ring with records up to 300 bytes drops; every drop must be accounted for.
  const Mode mode = GENERATE(Mode{8u << 20, 40}, Mode{4096, 300});
  INFO("ring " << mode.ring_bytes << " bytes");
  RingFixture fixture(mode.ring_bytes);
  shm::RingWriter writer = fixture.writer();
  auto reader = fixture.reader();

  std::atomic<bool> producer_done{false};
  std::uint64_t producer_ok = 0;
  std::uint64_t producer_full = 0;
  std::thread producer([&] {
    std::vector<std::uint8_t> payload(8 + mode.max_payload);
    for (std::uint64_t attempt = 0; attempt < kRecords; ++attempt) {
      // The first 8 bytes carry the attempt number; the rest is derived from it.
      const std::size_t size = 8 + attempt % (mode.max_payload - 7);
      std::memcpy(payload.data(), &attempt, 8);
      fill_payload(attempt, std::span<std::uint8_t>(payload.data() + 8, size - 8));
      const shm::AppendStatus status =
          writer.append(kTestType, 1, payload.data(), static_cast<std::uint32_t>(size), attempt);
      if (status == shm::AppendStatus::kOk) ++producer_ok;
      if (status == shm::AppendStatus::kFull) ++producer_full;
    }
    producer_done.store(true, std::memory_order_release);
  });

  // Assertions stay on this thread: Catch2 v2 is not thread-safe.
  std::uint64_t delivered = 0;
  std::uint64_t next_sequence = 0;
  std::uint64_t last_attempt = 0;
  std::uint64_t bad_records = 0;
  std::uint64_t corrupt_drains = 0;
  auto on_record = [&](const shm::RecordHeader& h, std::span<const std::uint8_t> payload) {
    std::uint64_t attempt = ~std::uint64_t{0};
    if (payload.size() >= 8) std::memcpy(&attempt, payload.data(), 8);
    const bool ok = payload.size() == 8 + attempt % (mode.max_payload - 7) && h.sequence == next_sequence &&
                    h.timestamp_ns == attempt && (delivered == 0 || attempt > last_attempt) &&
                    payload_matches(attempt, payload.subspan(8));
    if (!ok) ++bad_records;
    last_attempt = attempt;
    ++next_sequence;
    ++delivered;
  };
  for (;;) {
    const bool done = producer_done.load(std::memory_order_acquire);
    const shm::DrainStats stats = reader->drain(on_record);
    if (stats.status != shm::DrainStatus::kOk) ++corrupt_drains;
    if (done && stats.records == 0) break;
    if (stats.records == 0) std::this_thread::yield();
  }
  producer.join();

  CHECK(bad_records == 0);
  CHECK(corrupt_drains == 0);
  CHECK(producer_ok + producer_full == kRecords);
  CHECK(delivered == producer_ok);
  CHECK(delivered + writer.dropped_records() == kRecords);
  CHECK(writer.dropped_records() == producer_full);
  CHECK(load(fixture.header()->dropped_records) == producer_full);
  CHECK(load(fixture.header()->records_written) == delivered);
  if (mode.ring_bytes == (8u << 20)) CHECK(producer_full == 0);
  CHECK(fixture.canaries_intact());
}

TEST_CASE("peek_latest_record returns the newest record of a type without consuming it", "[ring]") {
  // peek only trusts a record at least two maximum-size records behind the tail: use a roomy ring.
  RingFixture fixture(64 * 1024);
  shm::RingWriter writer = fixture.writer();
  auto reader = fixture.reader();
  std::vector<std::uint8_t> small(32);
  for (std::uint64_t key = 0; key < 4; ++key) {
    fill_payload(key, small);
    REQUIRE(writer.append(shm::RecordType::kSchedulerSnapshot, 1, small.data(), 32, key) ==
            shm::AppendStatus::kOk);
  }
  fill_payload(100, small);
  REQUIRE(writer.append(static_cast<shm::RecordType>(2), 1, small.data(), 16, 100) == shm::AppendStatus::kOk);

  shm::RecordHeader header{};
  std::vector<std::uint8_t> out(shm::kMaxRecordBytes);
  CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                shm::RecordType::kSchedulerSnapshot, header, out) == 32);
  CHECK(header.timestamp_ns == 3);
  CHECK(header.sequence == 3);
  CHECK(payload_matches(3, std::span<const std::uint8_t>(out.data(), 32)));

  CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                static_cast<shm::RecordType>(2), header, out) == 16);
  CHECK(header.timestamp_ns == 100);

  SECTION("nothing was consumed") {
    CHECK(drain_all(*reader).size() == 5);
  }
  SECTION("a type never written, an out-of-range type and padding give nothing") {
    CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                  static_cast<shm::RecordType>(5), header, out) == -1);
    CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                  static_cast<shm::RecordType>(shm::kMaxRecordTypes), header, out) == -1);
    CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                  shm::RecordType::kPadding, header, out) == -1);
  }
  SECTION("a garbage position gives nothing") {
    auto& slot = fixture.header()
                     ->latest_record_position[static_cast<std::size_t>(shm::RecordType::kSchedulerSnapshot)];
    const std::uint64_t garbage =
        GENERATE(std::uint64_t{65 + 1}, std::uint64_t{64 * 4 + 1}, (std::uint64_t{1} << 40) + 1);
    INFO("position + 1 = " << garbage);
    shm::shared(slot).store(garbage,
                            std::memory_order_release);  // misaligned, another type's record, far ahead
    CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                  shm::RecordType::kSchedulerSnapshot, header, out) == -1);
  }
  SECTION("an output buffer too small gives nothing") {
    std::vector<std::uint8_t> tiny(8);
    CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                  shm::RecordType::kSchedulerSnapshot, header, tiny) == -1);
  }
  SECTION("a record the writer may have overwritten gives nothing") {
    std::vector<std::uint8_t> big(1000);
    for (std::uint64_t key = 10; key < 200; ++key) {
      fill_payload(key, big);
      if (writer.append(shm::RecordType::kSchedulerSnapshot, 1, big.data(), 1000, key) ==
          shm::AppendStatus::kFull) {
        drain_all(*reader);
        REQUIRE(writer.append(shm::RecordType::kSchedulerSnapshot, 1, big.data(), 1000, key) ==
                shm::AppendStatus::kOk);
      }
    }
    CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                  static_cast<shm::RecordType>(2), header, out) == -1);
    // The newest record of the busy type is still readable.
    CHECK(shm::peek_latest_record(fixture.header(), fixture.ring(), fixture.ring_bytes(),
                                  shm::RecordType::kSchedulerSnapshot, header, out) == 1000);
    CHECK(header.timestamp_ns == 199);
    CHECK(payload_matches(199, std::span<const std::uint8_t>(out.data(), 1000)));
  }
}

TEST_CASE("A reader that does not publish its head leaves the producer's view untouched", "[ring]") {
  RingFixture fixture(4096);
  shm::RingWriter writer = fixture.writer();
  REQUIRE(append_sized(writer, 1, 40) == shm::AppendStatus::kOk);
  auto observer =
      std::make_unique<shm::RingReader>(fixture.header(), fixture.ring(), fixture.ring_bytes(), false);
  CHECK(drain_all(*observer).size() == 1);
  CHECK(load(fixture.header()->head) == 0);
}
