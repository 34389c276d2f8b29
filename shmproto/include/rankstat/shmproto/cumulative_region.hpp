// Where the cumulative block's regions lie in a mapping (layout.hpp's CumulativeGeometry gives the
// offsets), and how a value word holds a double: the addressing the writer and the reader share.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/ring.hpp"

namespace rankstat::shm {

struct CumulativeRegion {
  CumulativeHeader* header = nullptr;
  SeriesDescriptor* descriptors = nullptr;
  double* bounds = nullptr;
  std::uint64_t* values = nullptr;
  char* text = nullptr;
};

inline CumulativeRegion cumulative_region(std::uint8_t* base, const CumulativeGeometry& geometry) {
  CumulativeRegion region;
  region.header = reinterpret_cast<CumulativeHeader*>(base);
  region.descriptors = reinterpret_cast<SeriesDescriptor*>(base + geometry.descriptors_offset());
  region.bounds = reinterpret_cast<double*>(base + geometry.bounds_offset());
  region.values = reinterpret_cast<std::uint64_t*>(base + geometry.values_offset());
  region.text = reinterpret_cast<char*>(base + geometry.text_offset());
  return region;
}

inline void store_f64(std::uint64_t& word, double value,
                      std::memory_order order = std::memory_order_relaxed) {
  shared(word).store(std::bit_cast<std::uint64_t>(value), order);
}
inline double load_f64(std::uint64_t& word, std::memory_order order = std::memory_order_relaxed) {
  return std::bit_cast<double>(shared(word).load(order));
}

}  // namespace rankstat::shm
