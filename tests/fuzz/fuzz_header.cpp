// Header validation over arbitrary bytes: the input is [u64 file size][header bytes...]. Whatever
// validate_header accepts must describe regions inside the file that the readers can use unchecked.
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "rankstat/shmproto/reader.hpp"

namespace shm = rankstat::shm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rankstat::fuzz::Bytes in(data, size);
  const auto file_bytes = in.take<std::uint64_t>();
  shm::SegmentHeader header{};
  std::memcpy(&header, in.data(), in.size() < sizeof header ? in.size() : sizeof header);
  std::string message;
  const shm::RejectReason reason = shm::validate_header(header, file_bytes, message);
  RANKSTAT_FUZZ_EXPECT(!shm::reject_reason_name(reason).empty());
  if (reason != shm::RejectReason::kNone) {
    RANKSTAT_FUZZ_EXPECT(!message.empty());
    return 0;
  }
  RANKSTAT_FUZZ_EXPECT(header.magic == shm::kMagic && header.layout_major == shm::kLayoutMajor);
  RANKSTAT_FUZZ_EXPECT(header.segment_bytes == file_bytes && file_bytes >= shm::kHeaderBytes);
  RANKSTAT_FUZZ_EXPECT(shm::is_power_of_two(header.ring_bytes) && header.ring_bytes >= shm::kMinRingBytes);
  RANKSTAT_FUZZ_EXPECT(header.ring_offset >= shm::kHeaderBytes &&
                       header.ring_offset + header.ring_bytes <= file_bytes);
  RANKSTAT_FUZZ_EXPECT(header.cumulative_offset >= shm::kHeaderBytes &&
                       header.cumulative_offset + header.cumulative_bytes <= file_bytes);
  RANKSTAT_FUZZ_EXPECT(header.cumulative_bytes >= sizeof(shm::CumulativeHeader));
  RANKSTAT_FUZZ_EXPECT(header.max_record_bytes >= sizeof(shm::RecordHeader) &&
                       header.max_record_bytes <= shm::kMaxRecordBytes);
  RANKSTAT_FUZZ_EXPECT(std::memchr(header.instance, 0, sizeof header.instance) != nullptr);
  RANKSTAT_FUZZ_EXPECT(std::memchr(header.rank_key, 0, sizeof header.rank_key) != nullptr);
  const auto labels = shm::decode_label_pairs(header.extra_labels, sizeof header.extra_labels);
  RANKSTAT_FUZZ_EXPECT(labels.has_value());
  for (const auto& [name, value] : *labels) RANKSTAT_FUZZ_EXPECT(shm::is_valid_label_name(name));
  return 0;
}
