// Which pages of a segment's cumulative block are backed by the file system, and how a region's backing
// grows: creation (segment.hpp) reserves the first pages, the writer (cumulative_writer.hpp) the rest as
// registrations need them.
#pragma once

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "rankstat/shmproto/layout.hpp"

namespace rankstat::shm {

// The block's four regions, in file order.
enum class CumulativeArea : std::uint8_t { kDescriptors = 0, kBounds = 1, kValues = 2, kText = 3 };
inline constexpr std::size_t kCumulativeAreas = 4;

// Which pages of a segment's cumulative block hold tmpfs pages. The file has its full size from the
// start (ftruncate) and is mapped whole, but only the pages below each region's reserved mark are
// backed (posix_fallocate): the rest is a hole until a registration needs it. A write into a hole of a
// full tmpfs would raise SIGBUS in the engine, so the writer writes only below the marks and reserves
// (cold path, registration only) before it bumps a region's use past its mark. Readers read only below
// the published counts, which are below the marks, so they never fault a hole in either.
struct CumulativeSpace {
  int fd = -1;                     // -1: every page is backed already (heap memory, or reserved whole)
  std::uint64_t block_offset = 0;  // file offset of the cumulative header
  std::uint64_t reserved[kCumulativeAreas] = {};  // bytes reserved from each region's start

  // Growth doubles a region's reservation, by at most this much at a time.
  static constexpr std::uint64_t kMaxStepBytes = std::uint64_t{1} << 20;
};

inline std::uint64_t cumulative_area_offset(const CumulativeGeometry& g, CumulativeArea area) {
  switch (area) {
    case CumulativeArea::kDescriptors:
      return g.descriptors_offset();
    case CumulativeArea::kBounds:
      return g.bounds_offset();
    case CumulativeArea::kValues:
      return g.values_offset();
    case CumulativeArea::kText:
      break;
  }
  return g.text_offset();
}

inline std::uint64_t cumulative_area_bytes(const CumulativeGeometry& g, CumulativeArea area) {
  switch (area) {
    case CumulativeArea::kDescriptors:
      return std::uint64_t{g.series_capacity} * sizeof(SeriesDescriptor);
    case CumulativeArea::kBounds:
      return std::uint64_t{g.bounds_capacity} * 8;
    case CumulativeArea::kValues:
      return std::uint64_t{g.values_capacity} * 8;
    case CumulativeArea::kText:
      break;
  }
  return g.text_bytes();
}

// The reservation after growing region `area` (currently `reserved` bytes) to hold `needed` bytes:
// double, by at most kMaxStepBytes past what is needed, ending on a page boundary of the file
// (block_offset is page aligned), never past the region. From nothing (creation) it is the rest of the
// page the region starts in, or one page when it starts on one.
inline std::uint64_t grown_reservation(const CumulativeGeometry& g, CumulativeArea area,
                                       std::uint64_t reserved, std::uint64_t needed) {
  const std::uint64_t start = cumulative_area_offset(g, area);
  const std::uint64_t size = cumulative_area_bytes(g, area);
  std::uint64_t want = std::max({needed, reserved * 2, std::uint64_t{1}});
  want = std::min(want, needed + CumulativeSpace::kMaxStepBytes);
  const std::uint64_t end = align_up(start + want, 4096) - start;
  return std::min(end, size);
}

// Reserves [from, to) bytes of region `area` in the file; 0 or the errno (EINTR is retried).
inline int reserve_cumulative_pages(const CumulativeSpace& space, const CumulativeGeometry& g,
                                    CumulativeArea area, std::uint64_t from, std::uint64_t to) {
  if (space.fd < 0 || to <= from) return 0;
  const std::uint64_t at = space.block_offset + cumulative_area_offset(g, area) + from;
  int e = 0;
  do {
    e = posix_fallocate(space.fd, static_cast<off_t>(at), static_cast<off_t>(to - from));
  } while (e == EINTR);
  return e;
}

}  // namespace rankstat::shm
