// A whole segment file image (header page, ring, cumulative block) through the daemon's own code:
// shm::open_segment (open, fstat, map, validate_header, the cumulative geometry), then a RankSegment
// (the consumer rankstatd runs per rank) draining the ring and decoding its records, refreshing the
// cumulative series, and reporting producer state, fill and rate, pass after pass.
//
// The bytes are written to a file under /dev/shm (the daemon maps files, not buffers) whose name is a
// valid segment name; each input rewrites it in place.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "rank_segment.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/reader.hpp"

namespace shm = rankstat::shm;

namespace {

// The file every input is written to, removed with its directory at exit.
struct SegmentFile {
  SegmentFile() {
    char dir[] = "/dev/shm/rankstat-fuzz-XXXXXX";
    if (mkdtemp(dir) == nullptr) rankstat::fuzz::broken("mkdtemp in /dev/shm");
    directory = dir;
    path = directory + "/rankstat.fuzz.scheduler.tp0-pp0-ep0-dp0";
  }
  ~SegmentFile() {
    ::unlink(path.c_str());
    ::rmdir(directory.c_str());
  }
  std::string directory;
  std::string path;
};

const std::string& segment_path() {
  static const SegmentFile file;
  return file.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = segment_path();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) rankstat::fuzz::broken("cannot create the segment file");
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) rankstat::fuzz::broken("cannot write the segment file");
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);

  shm::OpenedSegment opened = shm::open_segment(path, /*consumer=*/true);
  if (opened.reason != shm::RejectReason::kNone) {
    RANKSTAT_FUZZ_EXPECT(!opened.message.empty() || opened.reason == shm::RejectReason::kNotReady);
    RANKSTAT_FUZZ_EXPECT(!opened.file.valid());
    return 0;
  }
  RANKSTAT_FUZZ_EXPECT(opened.file.size() == size);
  const std::uint64_t now = shm::monotonic_ns();
  rankstat::RankSegment segment("rankstat.fuzz.scheduler.tp0-pp0-ep0-dp0", path, std::move(opened), now);
  for (int pass = 0; pass < 3; ++pass) {
    segment.drain(now + static_cast<std::uint64_t>(pass));
    segment.refresh_cumulative();
  }
  RANKSTAT_FUZZ_EXPECT(segment.memory_fault() == rankstat::SegmentFault::kNone);  // nothing shrank the file
  const double fill = segment.ring_fill_ratio();
  RANKSTAT_FUZZ_EXPECT(fill >= 0 && fill <= 1);
  (void)segment.producer();
  segment.update_rate(now + 3'000'000'000ull);
  segment.apply_staleness(now + 60'000'000'000ull, 30'000'000'000ull);
  const rankstat::SchedulerView& view = segment.scheduler();
  RANKSTAT_FUZZ_EXPECT(view.priorities.size() <= shm::kMaxPriorityCounts);
  for (const rankstat::SeriesState& s : segment.series()) {
    RANKSTAT_FUZZ_EXPECT(shm::is_valid_metric_name(s.info.family));
    if (s.info.kind == shm::SeriesKind::kHistogram && !s.value.counts.empty()) {
      RANKSTAT_FUZZ_EXPECT(s.value.counts.size() == s.info.bounds.size() + 1);
    }
  }
  if (segment.ring_corrupt()) RANKSTAT_FUZZ_EXPECT(segment.ring_fault() != rankstat::SegmentFault::kNone);
  return 0;
}
