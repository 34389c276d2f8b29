// rankstat_fuzz_seeds <out dir>: the seed corpus, cut from real segments that the real Reporter writes.
//
// Five segments (fresh; with records, priorities and every series kind; a ring that wrapped with a
// padding record behind a consumer; a closed one; a full ring with drops) are created in a private
// directory, then written out per fuzz target:
//   segment/<name>     the whole file
//   header/<name>      u64 file size + the header page
//   ring/<name>        the fuzz_ring prefix (size, head, tail, latest position) + the ring bytes
//   cumulative/<name>  the cumulative block
// Small geometries keep the seeds around 12 KiB, so nothing binary is committed to the repository.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/reader.hpp"

namespace shm = rankstat::shm;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

rankstat::ReporterOptions small(const std::string& dir, const std::string& key) {
  rankstat::ReporterOptions o;
  o.shm_dir = dir;
  o.identity.instance = "seed";
  o.identity.rank_key = key;
  o.identity.model_name = "seed-model";
  o.identity.extra_labels = {{"cluster", "a"}};
  o.identity.flags = shm::kFlagPriorityScheduling;
  o.geometry.ring_bytes = 4096;
  o.geometry.series_capacity = 8;
  o.geometry.bounds_capacity = 32;
  o.geometry.values_capacity = 128;
  return o;
}

void report(rankstat::Reporter& r, int i) {
  shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(1 + i % 3);
  s.num_running_reqs = i;
  s.num_queue_reqs = 3 * i + 1;
  s.token_usage = 0.25;
  s.gen_throughput = 100.0 + i;
  s.groups = shm::kGroupSpeculative | shm::kGroupRoutingKeys;
  const shm::PriorityCount entries[] = {
      {0, 0, shm::kPriorityIsNone, 0, i}, {5, 1, 0, 0, 2 * i}, {-1, 2, 0, 0, 7}};
  r.report_scheduler(
      s, std::span<const shm::PriorityCount>(entries, static_cast<std::size_t>(i % 4 == 0 ? 0 : 3)));
}

void register_series(rankstat::Reporter& r) {
  std::uint32_t counter = 0;
  std::uint32_t gauge = 0;
  std::uint32_t histogram = 0;
  const double bounds[] = {0.1, 1, 10};
  r.register_counter("sglang:seed_total", {{"kind", "a"}}, counter, "Seed events.");
  r.register_gauge("sglang:seed_gauge", shm::GaugeMode::kMostRecent, {}, gauge);
  r.register_histogram("sglang:seed_seconds", {{"stage", "b"}}, bounds, histogram,
                       "Seed latency,\nin seconds.");
  r.counter_add(counter, 42);
  r.gauge_set(gauge, 3.5);
  r.histogram_observe(histogram, 0.5);
  r.histogram_observe_many(histogram, 20, 3, 60);
  // A declared summary with its own labels only, as the prometheus_client-compatible classes write.
  const shm::LabelPairs own = {{"model_name", "caf\xC3\xA9"}, {"forward_mode", "decode"}};
  rankstat::Reporter::SeriesSpec spec;
  spec.kind = shm::SeriesKind::kSummary;
  spec.flags = shm::kSeriesWithoutIdentityLabels;
  spec.family = "sglang:seed_balancedness";
  spec.help = "Seed summary.";
  spec.labels = &own;
  std::uint32_t summary = 0;
  r.register_series(spec, summary);
  r.histogram_observe(summary, 0.9);
  r.gauge_add(gauge, 1.0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <out dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  for (const char* target : {"segment", "header", "ring", "cumulative"})
    std::filesystem::create_directories(out / target);
  std::string base = "/dev/shm";
  if (::access(base.c_str(), W_OK) != 0) base = std::filesystem::temp_directory_path();
  std::string pattern = base + "/rankstat-seeds-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return 1;
  const std::string dir = pattern;

  std::vector<std::pair<std::string, std::string>> files;  // name, path
  {
    rankstat::Reporter fresh;
    if (fresh.open(small(dir, "fresh")) != rankstat::Status::kOk) return 1;
    files.emplace_back("fresh", fresh.path());

    rankstat::Reporter records;
    records.open(small(dir, "records"));
    register_series(records);
    for (int i = 0; i < 4; ++i) report(records, i);
    files.emplace_back("records", records.path());

    // A consumer drains between appends, so the ring wraps with a padding record and keeps some undrained.
    rankstat::Reporter wrapped;
    wrapped.open(small(dir, "wrapped"));
    register_series(wrapped);
    shm::OpenedSegment consumer = shm::open_segment(wrapped.path(), true);
    if (consumer.reason != shm::RejectReason::kNone) return 1;
    shm::RingReader reader(consumer.file.header(), consumer.ring(), consumer.identity.ring_bytes, true);
    for (int i = 0; i < 9; ++i) {
      report(wrapped, i);
      if (i < 7) reader.drain([](const shm::RecordHeader&, std::span<const std::uint8_t>) {});
    }
    files.emplace_back("wrapped", wrapped.path());

    rankstat::Reporter closed;
    closed.open(small(dir, "closed"));
    register_series(closed);
    report(closed, 1);
    files.emplace_back("closed", closed.path());
    closed.close();

    rankstat::Reporter full;
    full.open(small(dir, "full"));
    for (int i = 0; i < 12; ++i) report(full, i);  // no consumer: the last ones are dropped
    files.emplace_back("full", full.path());

    for (const auto& [name, path] : files) {
      const std::string bytes = read_all(path);
      shm::SegmentHeader h{};
      std::memcpy(&h, bytes.data(), sizeof h);
      write_all(out / "segment" / name, bytes);
      std::string header;
      append<std::uint64_t>(header, bytes.size());
      header.append(bytes, 0, shm::kHeaderBytes);
      write_all(out / "header" / name, header);
      std::string ring;
      append<std::uint8_t>(ring, 0);  // 4 KiB
      append<std::uint8_t>(ring, 0);
      append<std::uint16_t>(ring, 0);
      append<std::uint32_t>(ring, 0x9E3779B9u);
      append<std::uint64_t>(ring, h.head);
      append<std::uint64_t>(ring, h.tail);
      append<std::uint64_t>(
          ring, h.latest_record_position[static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot)]);
      ring.append(bytes, h.ring_offset, h.ring_bytes);
      write_all(out / "ring" / name, ring);
      write_all(out / "cumulative" / name, bytes.substr(h.cumulative_offset, h.cumulative_bytes));
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("wrote %zu seeds per target to %s\n", files.size(), out.c_str());
  return 0;
}
