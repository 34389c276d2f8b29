// A segment's footprint grows with use: creation reserves the header, the ring and a first page of each
// cumulative region; registrations reserve the pages they fill; a registration the file system cannot
// back is refused (kNoSpace), counted, and leaves the block as it was, never a SIGBUS.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/segment.hpp"
#include "testkit.hpp"

namespace {

namespace shm = rankstat::shm;
using rankstat::testkit::TempDir;

// Capacities far beyond what the tests register: they cost nothing until used.
shm::SegmentGeometry roomy_geometry() {
  shm::SegmentGeometry g;
  g.ring_bytes = 64 * 1024;
  g.series_capacity = 1u << 16;
  g.bounds_capacity = 1u << 20;
  g.values_capacity = 1u << 21;
  return g;
}

shm::SegmentIdentity identity() {
  shm::SegmentIdentity id;
  id.instance = "space";
  id.role = shm::Role::kOther;
  return id;
}

std::uint64_t allocated_bytes(int fd) {
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

shm::CumulativeWriter writer_of(const shm::CreateResult& created) {
  const shm::SegmentHeader& h = *created.file.header();
  return shm::CumulativeWriter(
      shm::cumulative_region(created.file.bytes() + h.cumulative_offset, roomy_geometry().cumulative()),
      created.space);
}

std::uint32_t header_count(const shm::CreateResult& created, std::uint32_t shm::CumulativeHeader::*field) {
  auto* header = reinterpret_cast<shm::CumulativeHeader*>(created.file.bytes() +
                                                          created.file.header()->cumulative_offset);
  return shm::shared(header->*field).load(std::memory_order_relaxed);
}

const std::vector<double> kBounds = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100};

// One SGLang-like series: a histogram per label value, a counter and a gauge beside it.
shm::RegisterStatus register_trio(shm::CumulativeWriter& writer, int i) {
  const shm::LabelPairs labels = {{"model_name", "meta-llama/Llama-3.1-8B-Instruct"},
                                  {"shard", std::to_string(i)}};
  std::uint32_t id = 0;
  shm::RegisterStatus s =
      writer.register_series(shm::SeriesKind::kHistogram, shm::GaugeMode::kAll, "sglang:latency_seconds",
                             labels, kBounds, id, 0, "Latency of one step, in seconds.");
  if (s != shm::RegisterStatus::kOk) return s;
  s = writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "sglang:tokens_total", labels,
                             {}, id, 0, "Tokens processed.");
  if (s != shm::RegisterStatus::kOk) return s;
  return writer.register_series(shm::SeriesKind::kGauge, shm::GaugeMode::kLiveMostRecent, "sglang:running",
                                labels, {}, id, 0, "Requests running.");
}

}  // namespace

TEST_CASE("A new segment reserves its header, ring and a first page per cumulative region, not its capacity",
          "[segment][space]") {
  TempDir dir;
  shm::CreateOptions options;
  options.directory = dir.path();
  options.geometry = roomy_geometry();
  const shm::CreateResult created = shm::create_segment(identity(), options);
  REQUIRE(created.error == shm::CreateError::kNone);
  struct stat st {};
  REQUIRE(::fstat(created.file.fd(), &st) == 0);
  CHECK(static_cast<std::uint64_t>(st.st_size) == roomy_geometry().total_bytes());  // the layout is unchanged
  const std::uint64_t allocated = allocated_bytes(created.file.fd());
  // Header (4 KiB) + ring (64 KiB) + one page per cumulative region: 84 KiB of a 36 MiB file.
  CHECK(allocated == (1 + 16 + 4) * 4096);
  CHECK(created.space.fd == created.file.fd());
  for (std::size_t area = 0; area < shm::kCumulativeAreas; ++area) CHECK(created.space.reserved[area] > 0);
}

TEST_CASE("Registrations reserve the pages they fill, and everything published lies in reserved pages",
          "[cumulative][space]") {
  TempDir dir;
  shm::CreateOptions options;
  options.directory = dir.path();
  options.geometry = roomy_geometry();
  const shm::CreateResult created = shm::create_segment(identity(), options);
  REQUIRE(created.error == shm::CreateError::kNone);
  shm::CumulativeWriter writer = writer_of(created);
  const std::uint64_t at_start = allocated_bytes(created.file.fd());
  for (int i = 0; i < 1000; ++i) REQUIRE(register_trio(writer, i) == shm::RegisterStatus::kOk);
  const std::uint64_t used_descriptors = 3000 * sizeof(shm::SeriesDescriptor);
  const std::uint64_t used_values = 1000 * (1 + 11 + 1 + 1 + 1 + 3) * 8;
  CHECK(writer.reserved_bytes(shm::CumulativeArea::kDescriptors) >= used_descriptors);
  CHECK(writer.reserved_bytes(shm::CumulativeArea::kValues) >= used_values);
  const auto* header = reinterpret_cast<shm::CumulativeHeader*>(created.file.bytes() +
                                                                created.file.header()->cumulative_offset);
  CHECK(writer.reserved_bytes(shm::CumulativeArea::kText) >= header->text_used);
  CHECK(writer.reserved_bytes(shm::CumulativeArea::kBounds) >= header->bounds_used * 8);
  // Growth by doubling: what is allocated stays within twice what is used, plus a page per region.
  const std::uint64_t grown = allocated_bytes(created.file.fd()) - at_start;
  const std::uint64_t used = used_descriptors + used_values + header->text_used + header->bounds_used * 8;
  CHECK(grown <= 2 * used + 4 * 4096);
  CHECK(allocated_bytes(created.file.fd()) < options.geometry.total_bytes() / 16);

  // A reader of all of it faults no page beyond what the writer reserved.
  const std::uint64_t before_read = allocated_bytes(created.file.fd());
  shm::CumulativeReader reader(
      shm::cumulative_region(created.file.bytes() + created.file.header()->cumulative_offset,
                             roomy_geometry().cumulative()),
      roomy_geometry().cumulative());
  REQUIRE(reader.published_series() == 3000);
  shm::SeriesValue value;
  for (std::uint32_t i = 0; i < reader.published_series(); ++i) {
    const auto info = reader.read_descriptor(i);
    REQUIRE(info.has_value());
    reader.read_value(*info, value);
  }
  CHECK(allocated_bytes(created.file.fd()) == before_read);
}

TEST_CASE("A registration whose pages cannot be reserved is refused, counted and leaves the block as it was",
          "[cumulative][space]") {
  TempDir dir;
  shm::CreateOptions options;
  options.directory = dir.path();
  options.geometry = roomy_geometry();
  const shm::CreateResult created = shm::create_segment(identity(), options);
  REQUIRE(created.error == shm::CreateError::kNone);
  // A read-only descriptor of the same file: posix_fallocate refuses (EBADF) as a full tmpfs would.
  const int read_only = ::open(created.path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(read_only >= 0);
  shm::CumulativeSpace refusing = created.space;
  refusing.fd = read_only;
  const shm::SegmentHeader& h = *created.file.header();
  shm::CumulativeWriter writer(
      shm::cumulative_region(created.file.bytes() + h.cumulative_offset, roomy_geometry().cumulative()),
      refusing);
  // The first page of the block holds its header and (4096 - 128) / 128 = 31 descriptors.
  REQUIRE(created.space.reserved[0] == 4096 - sizeof(shm::CumulativeHeader));
  std::uint32_t id = 0;
  int accepted = 0;
  shm::RegisterStatus status = shm::RegisterStatus::kOk;
  for (; accepted < 100; ++accepted) {
    status = writer.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c_total",
                                    {{"i", std::to_string(accepted)}}, {}, id);
    if (status != shm::RegisterStatus::kOk) break;
  }
  CHECK(status == shm::RegisterStatus::kNoSpace);
  CHECK(accepted == 31);
  CHECK(writer.series_count() == 31);
  CHECK(writer.last_reserve_error() == EBADF);
  CHECK(header_count(created, &shm::CumulativeHeader::series_count) == 31);
  CHECK(header_count(created, &shm::CumulativeHeader::registrations_no_space) == 1);
  CHECK(header_count(created, &shm::CumulativeHeader::registration_failures) == 1);
  CHECK(header_count(created, &shm::CumulativeHeader::registrations_full) == 0);
  ::close(read_only);

  // With room again (a writable descriptor), the next registration takes the next slot.
  shm::CumulativeWriter retry = writer_of(created);
  CHECK(retry.register_series(shm::SeriesKind::kCounter, shm::GaugeMode::kAll, "c_total", {{"i", "31"}}, {},
                              id) == shm::RegisterStatus::kOk);
  CHECK(id == 31);
}

TEST_CASE("On a full tmpfs registrations are refused with kNoSpace, never a SIGBUS", "[cumulative][space]") {
  TempDir dir;
  // A 256 KiB tmpfs of its own (needs CAP_SYS_ADMIN; skipped with a note otherwise).
  if (::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=256k") != 0) {
    WARN("cannot mount a tmpfs here (" << shm::errno_text(errno) << "): test skipped");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{dir.path()};
  shm::CreateOptions options;
  options.directory = dir.path();
  options.geometry = roomy_geometry();  // a 36 MiB file in a 256 KiB file system
  {
    const shm::CreateResult created = shm::create_segment(identity(), options);
    REQUIRE(created.error == shm::CreateError::kNone);
    shm::CumulativeWriter writer = writer_of(created);
    int registered = 0;
    shm::RegisterStatus status = shm::RegisterStatus::kOk;
    while ((status = register_trio(writer, registered)) == shm::RegisterStatus::kOk) ++registered;
    CHECK(status == shm::RegisterStatus::kNoSpace);
    CHECK(registered > 100);  // ~170 KiB of room
    CHECK(header_count(created, &shm::CumulativeHeader::registrations_no_space) == 1);
    // Every series published is whole and readable.
    shm::CumulativeReader reader(
        shm::cumulative_region(created.file.bytes() + created.file.header()->cumulative_offset,
                               roomy_geometry().cumulative()),
        roomy_geometry().cumulative());
    for (std::uint32_t i = 0; i < reader.published_series(); ++i)
      CHECK(reader.read_descriptor(i).has_value());
    ::unlink(created.path.c_str());
  }
}
