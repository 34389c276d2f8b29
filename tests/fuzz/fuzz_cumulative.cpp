// The cumulative block over arbitrary bytes, as the daemon reads it: its geometry, every published
// descriptor, every value. The block is a heap buffer of exactly the input's size, so AddressSanitizer
// sees any read outside it.
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz_common.hpp"
#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/reader.hpp"

namespace shm = rankstat::shm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Label lists straight from the bytes: the decoder must stay inside them.
  if (size != 0) {
    std::vector<char> raw(data, data + size);
    (void)shm::decode_label_pairs(raw.data(), raw.size());
    if (const auto labels = shm::decode_series_labels(raw.data(), raw.size())) {
      // What decodes re-encodes to the same bytes: the lengths leave nothing out.
      std::vector<char> again(shm::encoded_series_label_bytes(*labels));
      shm::encode_series_labels(*labels, again.data());
      RANKSTAT_FUZZ_EXPECT(again == raw);
    }
  }
  if (size < sizeof(shm::CumulativeHeader)) return 0;
  // 8-byte aligned, exactly `size` bytes long (rounded up to whole words, the rest poisoned).
  auto words = std::make_unique<std::uint64_t[]>((size + 7) / 8);
  auto* block = reinterpret_cast<std::uint8_t*>(words.get());
  std::memcpy(block, data, size);
  shm::CumulativeGeometry geometry{};
  if (!shm::read_cumulative_geometry(block, size, geometry)) return 0;
  RANKSTAT_FUZZ_EXPECT(geometry.text_offset() + std::uint64_t{geometry.text_bytes()} <= size);
  shm::CumulativeReader reader(shm::cumulative_region(block, geometry), geometry);
  const std::uint32_t published = reader.published_series();
  RANKSTAT_FUZZ_EXPECT(published <= geometry.series_capacity);
  shm::SeriesValue value;
  for (std::uint32_t i = 0; i < published && i < 4096; ++i) {
    const auto info = reader.read_descriptor(i);
    if (!info) continue;
    RANKSTAT_FUZZ_EXPECT(shm::is_valid_metric_name(info->family));
    // Everything the exposition writes from a descriptor can be written correctly.
    RANKSTAT_FUZZ_EXPECT(shm::is_valid_utf8(info->help) && info->help.size() <= geometry.text_bytes());
    RANKSTAT_FUZZ_EXPECT(info->family.size() <= geometry.text_bytes());
    RANKSTAT_FUZZ_EXPECT(shm::labels_allowed(info->kind, info->labels));
    RANKSTAT_FUZZ_EXPECT(
        std::uint64_t{info->values_offset} +
            shm::series_value_words(info->kind, static_cast<std::uint16_t>(info->bounds.size())) <=
        geometry.values_capacity);
    for (std::size_t b = 1; b < info->bounds.size(); ++b)
      RANKSTAT_FUZZ_EXPECT(info->bounds[b] > info->bounds[b - 1]);
    reader.read_value(*info, value);
    if ((info->kind == shm::SeriesKind::kHistogram || info->kind == shm::SeriesKind::kSummary) &&
        value.consistent) {
      RANKSTAT_FUZZ_EXPECT(value.counts.size() == info->bounds.size() + 1);
    }
  }
  return 0;
}
