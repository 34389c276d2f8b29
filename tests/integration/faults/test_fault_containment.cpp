// In-process fault tests of the daemon's segment handling: quarantine of segments whose file shrinks
// under the mapping (the SIGBUS guard on its own is tested in tests/unit/shmproto), and the trust checks
// (owner, mode, file type) with their once-per-file, rate-limited logging. The same code runs in
// rankstatd; the real-process tests are in the other files of this directory.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "config.hpp"
#include "fault_support.hpp"
#include "rank_segment.hpp"
#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/bus_guard.hpp"
#include "rankstat/shmproto/process.hpp"
#include "retired_totals.hpp"
#include "segment_registry.hpp"
#include "small_segment.hpp"
#include "source.hpp"
#include "testkit.hpp"

using namespace rankstat;
using namespace rankstat::testkit;

namespace {

constexpr std::size_t untrusted(shm::TrustRefusal refusal) {
  return static_cast<std::size_t>(refusal);
}

ReporterOptions writer_options(const TempDir& dir, int dp) {
  return rankstat::testkit::small_segment_options(dir, "guard", dp);
}

// A live reporter with a counter at `count` and one scheduler snapshot. Its own mapping is in this
// process: a test that truncates its file calls shrink(), which restores the size before the reporter
// closes (close() writes the header, which would otherwise fault outside any guard, as it would in a
// real engine whose segment someone truncated).
struct Writer {
  Writer(const TempDir& dir, int dp, double count) {
    REQUIRE(reporter.open(writer_options(dir, dp)) == Status::kOk);
    bytes = testkit::read_file(reporter.path()).size();
    REQUIRE(reporter.register_counter("sglang:test_events_total", {}, counter) == Status::kOk);
    REQUIRE(reporter.counter_add(counter, count) == Status::kOk);
    shm::SchedulerSnapshot s{};
    s.num_running_reqs = 5;
    REQUIRE(reporter.report_scheduler(s) == Status::kOk);
  }
  ~Writer() {
    if (shrunk) ::truncate(reporter.path().c_str(), static_cast<off_t>(bytes));
  }
  int shrink(off_t size) {
    shrunk = true;
    return ::truncate(reporter.path().c_str(), size);
  }
  Reporter reporter;
  std::uint32_t counter = 0;
  std::size_t bytes = 0;
  bool shrunk = false;
};

std::unique_ptr<RankSegment> attach(const std::string& path) {
  shm::OpenedSegment opened = shm::open_segment(path, /*consumer=*/true);
  REQUIRE(opened.reason == shm::RejectReason::kNone);
  const std::string name = path.substr(path.rfind('/') + 1);
  return std::make_unique<RankSegment>(name, path, std::move(opened), shm::monotonic_ns());
}

double counter_value(const RankSegment& s) {
  for (const SeriesState& series : s.series()) {
    if (series.info.family == "sglang:test_events_total") return series.value.value;
  }
  return -1;
}

// Captures the daemon's log lines for the scope.
struct CapturedLog {
  CapturedLog() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream);
    previous = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
  std::string text() const { return stream.str(); }
  std::ostringstream stream;
  std::shared_ptr<spdlog::logger> previous;
};

RegistryOptions registry_options(const TempDir& dir) {
  RegistryOptions o;
  o.directory = dir.path();
  return o;
}

}  // namespace

TEST_CASE(
    "a segment whose file shrinks under the mapping is quarantined as bus_error and keeps its last values") {
  TempDir dir;
  Writer writer(dir, 0, 42);
  auto segment = attach(writer.reporter.path());
  segment->refresh_cumulative();
  REQUIRE(segment->drain(shm::monotonic_ns()));
  REQUIRE(counter_value(*segment) == Approx(42));
  const shm::ProducerState before = segment->producer();
  REQUIRE(before.records_written == 1);
  REQUIRE(writer.shrink(shm::kHeaderBytes) == 0);  // the header page stays
  segment->refresh_cumulative();                   // the cumulative block is gone: a bus error, absorbed
  CHECK(segment->memory_fault() == SegmentFault::kBusError);
  CHECK(counter_value(*segment) == Approx(42));  // the zeros read were not committed
  CHECK_FALSE(segment->drain(shm::monotonic_ns()));
  CHECK(segment->producer().records_written == before.records_written);
  CHECK(segment->scheduler().fixed.num_running_reqs == 5);
  CHECK(segment->take_unreported_memory_fault());
  CHECK_FALSE(segment->take_unreported_memory_fault());
}

TEST_CASE("a segment truncated to nothing faults on its header and its producer state stays as last read") {
  TempDir dir;
  Writer writer(dir, 0, 7);
  auto segment = attach(writer.reporter.path());
  REQUIRE(segment->drain(shm::monotonic_ns()));
  REQUIRE(segment->producer().records_written == 1);
  REQUIRE(writer.shrink(0) == 0);
  CHECK(segment->producer().records_written == 1);
  CHECK(segment->memory_fault() == SegmentFault::kBusError);
  CHECK(segment->ring_fill_ratio() == Approx(0));
}

TEST_CASE("a shrunk segment is quarantined as truncated by the size check before any read faults") {
  TempDir dir;
  Writer writer(dir, 0, 3);
  auto segment = attach(writer.reporter.path());
  segment->refresh_cumulative();
  const std::uint64_t faults = shm::bus_errors_absorbed();
  REQUIRE(segment->check_file_size());
  REQUIRE(writer.shrink(shm::kHeaderBytes) == 0);
  CHECK_FALSE(segment->check_file_size());
  CHECK(segment->memory_fault() == SegmentFault::kTruncated);
  segment->refresh_cumulative();
  CHECK(counter_value(*segment) == Approx(3));
  CHECK(shm::bus_errors_absorbed() == faults);  // nothing was even touched
}

TEST_CASE("the registry quarantines a shrunk segment once with one log line and keeps serving the others") {
  TempDir dir;
  CapturedLog log;
  Writer healthy(dir, 0, 10);
  Writer victim(dir, 1, 20);
  RetiredTotals retired("");
  SegmentRegistry registry(registry_options(dir), retired);
  REQUIRE(registry.scan(shm::monotonic_ns()) == 2);
  registry.drain_all(shm::monotonic_ns());
  registry.refresh_cumulative();
  REQUIRE(victim.shrink(shm::kHeaderBytes) == 0);
  for (int pass = 0; pass < 5; ++pass) {
    healthy.reporter.counter_add(healthy.counter, 1);
    registry.drain_all(shm::monotonic_ns());
    registry.refresh_cumulative();
    registry.check_liveness(shm::monotonic_ns(), std::chrono::seconds(30));
    registry.scan(shm::monotonic_ns());
  }
  const RegistryCounters& c = registry.counters();
  CHECK(c.quarantined_bus_error == 1);  // refresh_cumulative touched the vanished block first
  CHECK(c.quarantined_truncated == 0);
  CHECK(faults::count_lines(log.text(), "quarantined") == 1);
  const RankSegment* served = registry.find_current("guard.scheduler.tp0-pp0-ep0-dp0");
  REQUIRE(served != nullptr);
  CHECK(counter_value(*served) == Approx(15));
  const RankSegment* kept = registry.find_current("guard.scheduler.tp0-pp0-ep0-dp1");
  REQUIRE(kept != nullptr);
  CHECK(counter_value(*kept) == Approx(20));
}

TEST_CASE("world-writable segments and unexpected owners and symlinks are refused before they are mapped") {
  TempDir dir;
  CapturedLog log;
  Writer healthy(dir, 0, 1);
  Writer open_to_all(dir, 1, 1);
  Writer foreign(dir, 2, 1);
  REQUIRE(::chmod(open_to_all.reporter.path().c_str(), 0666) == 0);
  REQUIRE(::chown(foreign.reporter.path().c_str(), 12345, static_cast<gid_t>(-1)) == 0);
  const std::string link = dir.path() + "/rankstat.guard.scheduler.tp0-pp0-ep0-dp9";
  REQUIRE(::symlink(healthy.reporter.path().c_str(), link.c_str()) == 0);
  const std::string fifo = dir.path() + "/rankstat.guard.scheduler.tp0-pp0-ep0-dp8";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  RetiredTotals retired("");
  SegmentRegistry registry(registry_options(dir), retired);
  for (int pass = 0; pass < 3; ++pass) registry.scan(shm::monotonic_ns());
  const RegistryCounters& c = registry.counters();
  CHECK(c.rejected_untrusted[untrusted(shm::TrustRefusal::kWorldWritable)] == 1);
  CHECK(c.rejected_untrusted[untrusted(shm::TrustRefusal::kUnexpectedOwner)] == 1);
  CHECK(c.rejected_untrusted[untrusted(shm::TrustRefusal::kNotRegularFile)] == 2);
  CHECK(registry.current().size() == 1);
  CHECK(faults::count_lines(log.text(), "rejected segment") == 4);  // once each, over three scans
  CHECK(faults::count_lines(log.text(), "(unexpected_owner): owned by uid 12345") == 1);

  // Fixing the file brings it in at the next scan; allowing the owner brings the other one in.
  REQUIRE(::chmod(open_to_all.reporter.path().c_str(), 0660) == 0);
  registry.set_trust({12345}, false, false);
  registry.scan(shm::monotonic_ns());
  CHECK(registry.current().size() == 3);
  CHECK(c.rejected_untrusted[untrusted(shm::TrustRefusal::kWorldWritable)] == 1);
}

TEST_CASE("world-writable segments and any owner are accepted when configured") {
  TempDir dir;
  Writer open_to_all(dir, 1, 1);
  Writer foreign(dir, 2, 1);
  REQUIRE(::chmod(open_to_all.reporter.path().c_str(), 0666) == 0);
  REQUIRE(::chown(foreign.reporter.path().c_str(), 12345, static_cast<gid_t>(-1)) == 0);
  RetiredTotals retired("");
  RegistryOptions options = registry_options(dir);
  options.trust.any_owner = true;
  options.trust.allow_world_writable = true;
  SegmentRegistry registry(options, retired);
  CHECK(registry.scan(shm::monotonic_ns()) == 2);
}

TEST_CASE("log lines about bad segments are rate-limited and the suppressed ones are counted") {
  TempDir dir;
  CapturedLog log;
  Writer source(dir, 0, 1);
  const std::string original = testkit::read_file(source.reporter.path());
  constexpr int kBadFiles = 80;
  for (int i = 0; i < kBadFiles; ++i) {
    std::string bytes = original;
    bytes[0] = 'X';  // bad magic
    const std::string path = dir.path() + "/rankstat.bad" + std::to_string(i) + ".scheduler.dp0";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  RetiredTotals retired("");
  SegmentRegistry registry(registry_options(dir), retired);
  registry.scan(shm::monotonic_ns());
  const RegistryCounters& c = registry.counters();
  CHECK(c.rejected_by_reason[static_cast<std::size_t>(shm::RejectReason::kBadMagic)] == kBadFiles);
  const std::size_t lines = faults::count_lines(log.text(), "rejected segment");
  CHECK(lines == 50);  // the burst; then one line per second
  CHECK(c.log_lines_suppressed == kBadFiles - lines);
  faults::report_count("bad_inputs_in_process", kBadFiles + 7);
}

TEST_CASE(
    "a consumer attached behind an unaligned garbage head reports corruption without reading past the ring") {
  // Found by tests/fuzz/fuzz_ring: with head = ring_bytes - 5 the record header straddled the ring's end.
  constexpr std::uint64_t kRingBytes = 4096;
  auto header = std::make_unique<shm::SegmentHeader>();
  auto ring = std::make_unique<std::uint8_t[]>(kRingBytes);  // exactly the ring: ASan sees any overread
  for (const std::uint64_t head : {kRingBytes - 5, kRingBytes - 24, std::uint64_t{8}, kRingBytes + 40}) {
    header->head = head;
    header->tail = head + 64;
    shm::RingReader reader(header.get(), ring.get(), kRingBytes, /*publish_head=*/true);
    int delivered = 0;
    const shm::DrainStats stats =
        reader.drain([&](const shm::RecordHeader&, std::span<const std::uint8_t>) { ++delivered; });
    INFO("head " << head);
    CHECK(stats.status == shm::DrainStatus::kCorruptIndex);
    CHECK(delivered == 0);
  }
}

TEST_CASE("an unaligned garbage tail stops the drain before any record is read") {
  constexpr std::uint64_t kRingBytes = 4096;
  auto header = std::make_unique<shm::SegmentHeader>();
  auto ring = std::make_unique<std::uint8_t[]>(kRingBytes);
  // A valid record at 0 (what a reader would deliver before meeting the bad tail), then a tail that no
  // writer publishes: every committed slot ends on a 64-byte boundary.
  shm::RecordHeader record{};
  record.length = 64;
  record.type = static_cast<std::uint16_t>(shm::RecordType::kSchedulerSnapshot);
  std::memcpy(ring.get(), &record, sizeof record);
  for (const std::uint64_t tail : {std::uint64_t{65}, std::uint64_t{100}, std::uint64_t{127}}) {
    header->head = 0;
    header->tail = tail;
    shm::RingReader reader(header.get(), ring.get(), kRingBytes, /*publish_head=*/true);
    int delivered = 0;
    const shm::DrainStats stats =
        reader.drain([&](const shm::RecordHeader&, std::span<const std::uint8_t>) { ++delivered; });
    INFO("tail " << tail);
    CHECK(stats.status == shm::DrainStatus::kCorruptIndex);
    CHECK(delivered == 0);
  }
}

TEST_CASE("the trust and read-timeout flags parse user names and uids and refuse unknown users") {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), "rankstatd");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    return parse_config(static_cast<int>(argv.size()), argv.data());
  };
  const ConfigParse defaults = parse({});
  REQUIRE(defaults.config);
  CHECK(defaults.config->allowed_uids.empty());
  CHECK_FALSE(defaults.config->any_owner);
  CHECK_FALSE(defaults.config->allow_world_writable);
  CHECK(defaults.config->read_timeout == std::chrono::seconds(10));

  const ConfigParse set = parse({"--shm.allowed-uids=root,4242", "--shm.allowed-uids=nobody",
                                 "--shm.allow-world-writable", "--web.read-timeout=1500ms"});
  REQUIRE(set.config);
  CHECK(set.config->allowed_uids == std::vector<std::uint32_t>{0, 4242, 65534});
  CHECK(set.config->allow_world_writable);
  CHECK(set.config->read_timeout == std::chrono::milliseconds(1500));
  const ConfigParse any = parse({"--shm.allowed-uids=any"});
  REQUIRE(any.config);
  CHECK(any.config->any_owner);

  const ConfigParse unknown = parse({"--shm.allowed-uids=no-such-user-rankstat"});
  CHECK_FALSE(unknown.config);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.message.find("no-such-user-rankstat") != std::string::npos);
  CHECK_FALSE(parse({"--web.read-timeout=0"}).config);
}

TEST_CASE("the trust flags are re-read from the config file on reload") {
  TempDir dir;
  const std::string path = dir.path() + "/rankstatd.conf";
  {
    std::ofstream out(path);
    out << "shm.allowed-uids = 4242\n";
  }
  const std::string flag = "--config.file=" + path;
  const char* argv[] = {"rankstatd", flag.c_str()};
  const ConfigParse parsed = parse_config(2, argv);
  REQUIRE(parsed.config);
  CHECK(parsed.config->allowed_uids == std::vector<std::uint32_t>{4242});
  {
    std::ofstream out(path, std::ios::trunc);
    out << "shm.allowed-uids = any\nshm.allow-world-writable = true\n";
  }
  std::string error;
  const auto reloaded = reload_config(*parsed.config, error);
  REQUIRE(reloaded);
  CHECK(reloaded->any_owner);
  CHECK(reloaded->allow_world_writable);
}

TEST_CASE("rankstat --direct refuses every segment the daemon refuses, for the daemon's reason") {
  TempDir dir;
  Writer healthy(dir, 0, 1);
  Writer open_to_all(dir, 1, 1);
  REQUIRE(::chmod(open_to_all.reporter.path().c_str(), 0666) == 0);
  REQUIRE(::symlink(healthy.reporter.path().c_str(),
                    (dir.path() + "/rankstat.guard.scheduler.tp0-pp0-ep0-dp9").c_str()) == 0);
  REQUIRE(::mkfifo((dir.path() + "/rankstat.guard.scheduler.tp0-pp0-ep0-dp8").c_str(), 0600) == 0);
  // A segment renamed into another instance: its header still says "guard".
  const std::string renamed = dir.path() + "/rankstat.other.scheduler.tp0-pp0-ep0-dp0";
  {
    std::ofstream out(renamed, std::ios::binary);
    out << testkit::read_file(healthy.reporter.path());
    REQUIRE(out.good());
  }
  REQUIRE(::chmod(renamed.c_str(), 0640) == 0);
  // Owned by a user the daemon does not trust: the CLI shows it marked instead (docs/api.md).
  const bool root = ::geteuid() == 0;
  std::unique_ptr<Writer> foreign;
  if (root) {
    foreign = std::make_unique<Writer>(dir, 2, 1);
    REQUIRE(::chown(foreign->reporter.path().c_str(), 12345, static_cast<gid_t>(-1)) == 0);
  }

  RetiredTotals retired("");
  SegmentRegistry registry(registry_options(dir), retired);
  registry.scan(shm::monotonic_ns());
  const RegistryCounters& c = registry.counters();
  std::map<std::string, std::uint64_t> daemon_refused;
  for (const auto& [reason, count] :
       {std::pair{"not_regular_file", c.rejected_untrusted[untrusted(shm::TrustRefusal::kNotRegularFile)]},
        std::pair{"world_writable", c.rejected_untrusted[untrusted(shm::TrustRefusal::kWorldWritable)]},
        std::pair{"instance_mismatch",
                  c.rejected_untrusted[untrusted(shm::TrustRefusal::kInstanceMismatch)]}}) {
    if (count != 0) daemon_refused[reason] = count;
  }
  CHECK(daemon_refused == std::map<std::string, std::uint64_t>{
                              {"instance_mismatch", 1}, {"not_regular_file", 2}, {"world_writable", 1}});
  CHECK(c.rejected_untrusted[untrusted(shm::TrustRefusal::kUnexpectedOwner)] == (root ? 1u : 0u));
  std::set<std::string> daemon_served;
  for (const RankSegment* s : registry.current()) daemon_served.insert(s->id());

  cli::DirectOptions options;
  options.shm_dir = dir.path();
  options.rate_window = std::chrono::milliseconds(0);
  const boost::json::object doc = cli::make_direct_source(options)->ranks();
  std::map<std::string, std::uint64_t> cli_refused;
  for (const auto& [reason, count] : doc.at("rejected_segments").as_object())
    cli_refused[std::string(reason)] = count.to_number<std::uint64_t>();
  CHECK(cli_refused == daemon_refused);
  std::set<std::string> cli_trusted;
  std::set<std::string> cli_marked;
  for (const auto& rank : doc.at("ranks").as_array()) {
    const auto& o = rank.as_object();
    (o.contains("untrusted_owner") ? cli_marked : cli_trusted).insert(std::string(o.at("id").as_string()));
  }
  CHECK(cli_trusted == daemon_served);
  CHECK(cli_trusted == std::set<std::string>{"guard.scheduler.tp0-pp0-ep0-dp0"});
  CHECK(cli_marked.size() == (root ? 1u : 0u));
}
