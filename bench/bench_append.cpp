// Engine-side cost of publishing one scheduler snapshot, next to the physical limit measured in the
// same run: a bare SPSC ring that only copies the same number of bytes and publishes the tail with a
// release store (what ../shared/reference/ring-limits.md calls the append cost). Both run against a
// daemon-like consumer thread that drains every millisecond, and again with no consumer (ring full:
// the dead-daemon path).
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "rankstat/reporter.hpp"
#include "rankstat/shmproto/reader.hpp"

namespace {

using namespace rankstat;

std::string bench_dir() {
  const std::string dir =
      (std::filesystem::exists("/dev/shm") ? std::string("/dev/shm") : std::string("/tmp")) +
      "/rankstat-bench-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

// Drains a segment every `period` like rankstatd does, until stopped.
class DaemonLikeConsumer {
 public:
  DaemonLikeConsumer(const std::string& path, std::chrono::microseconds period) {
    segment_ = shm::open_segment(path, true);
    thread_ = std::thread([this, period] {
      auto reader = std::make_unique<shm::RingReader>(segment_.file.header(), segment_.ring(),
                                                      segment_.identity.ring_bytes, true);
      while (!stop_.load(std::memory_order_relaxed)) {
        reader->drain([](const shm::RecordHeader&, std::span<const std::uint8_t>) {});
        std::this_thread::sleep_for(period);
      }
    });
  }
  ~DaemonLikeConsumer() {
    stop_.store(true);
    thread_.join();
  }

 private:
  shm::OpenedSegment segment_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

constexpr int kBurst = 8;

// Times bursts of kBurst appends. With a consumer, each burst is followed by a short untimed pause,
// like an engine between steps, so the consumer keeps up and this measures the append rather than a
// full ring (ring-limits.md's "paced_idle" case). Reports the time per append.
template <typename Append>
void run_paced(benchmark::State& state, bool pace, Append&& append) {
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) append();
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
    if (pace) std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  // Seconds per append, shown with an SI prefix (e.g. "55.1n" = 55.1 ns).
  state.counters["per_append"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kBurst),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

shm::SchedulerSnapshot sample_snapshot() {
  shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kDecode);
  s.num_running_reqs = 48;
  s.num_queue_reqs = 7;
  s.token_usage = 0.63;
  s.gen_throughput = 4210.5;
  s.kv_used_tokens = 120000;
  return s;
}

void BM_ReporterAppendSchedulerSnapshot(benchmark::State& state) {
  const bool with_consumer = state.range(0) != 0;
  const std::string dir = bench_dir();
  ReporterOptions options;
  options.shm_dir = dir;
  options.identity.instance = "bench";
  options.geometry.ring_bytes = 1 << 20;
  Reporter reporter;
  if (reporter.open(options) != Status::kOk) {
    state.SkipWithError(reporter.error_message().c_str());
    return;
  }
  std::unique_ptr<DaemonLikeConsumer> consumer;
  if (with_consumer)
    consumer = std::make_unique<DaemonLikeConsumer>(reporter.path(), std::chrono::milliseconds(1));
  const shm::SchedulerSnapshot snapshot = sample_snapshot();
  const shm::PriorityCount priorities[] = {{0, 0, 0, 0, 40}, {1, 0, 0, 0, 8}};
  std::uint64_t dropped_before = reporter.dropped_records();
  run_paced(state, with_consumer,
            [&] { benchmark::DoNotOptimize(reporter.report_scheduler(snapshot, priorities)); });
  state.counters["record_bytes"] =
      static_cast<double>(sizeof(shm::RecordHeader) + sizeof snapshot + sizeof priorities);
  state.counters["dropped"] = static_cast<double>(reporter.dropped_records() - dropped_before);
  consumer.reset();
  reporter.close();
  std::filesystem::remove_all(dir);
}
// Paced runs sleep between bursts, so wall time is far above the timed (manual) time: the caller bounds
// the run with --benchmark_min_time (bench/run_bench.py: 0.05 s of timed appends, about 15 s of wall
// time per repetition on the reference machine; less gives medians that move by tens of percent).
BENCHMARK(BM_ReporterAppendSchedulerSnapshot)->Arg(1)->ArgName("daemon_like_consumer")->UseManualTime();
BENCHMARK(BM_ReporterAppendSchedulerSnapshot)->Arg(0)->ArgName("daemon_like_consumer")->UseManualTime();

// The timing floor: a burst of kBurst empty calls between the two clock reads of run_paced. Every
// per_append figure includes it (about 2 clock reads / kBurst).
void BM_TimerFloor(benchmark::State& state) {
  run_paced(state, false, [] { benchmark::ClobberMemory(); });
}
BENCHMARK(BM_TimerFloor)->UseManualTime();

// The physical limit for the same record size: memcpy into a ring slot plus a release store of the
// tail, with the same consumer pattern. No header, no sequence, no drop accounting.
struct alignas(128) BareRing {
  alignas(128) std::atomic<std::uint64_t> tail{0};
  alignas(128) std::atomic<std::uint64_t> head{0};
  alignas(64) std::uint8_t data[1 << 20];
};

void BM_PhysicalLimitBareRing(benchmark::State& state) {
  const bool with_consumer = state.range(0) != 0;
  constexpr std::uint64_t kSlot = 640;  // sizeof(RecordHeader) + snapshot + 2 priorities, 64-aligned
  constexpr std::uint64_t kCapacity = sizeof(BareRing::data) / kSlot * kSlot;
  auto ring = std::make_unique<BareRing>();
  std::memset(ring->data, 0, sizeof ring->data);
  std::atomic<bool> stop{false};
  std::thread consumer;
  if (with_consumer) {
    consumer = std::thread([&] {
      std::vector<std::uint8_t> copy(kSlot);
      while (!stop.load(std::memory_order_relaxed)) {
        const std::uint64_t t = ring->tail.load(std::memory_order_acquire);
        std::uint64_t h = ring->head.load(std::memory_order_relaxed);
        for (; h < t; h += kSlot) std::memcpy(copy.data(), ring->data + (h % kCapacity), kSlot);
        ring->head.store(h, std::memory_order_release);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  std::uint8_t record[kSlot - 24 + 8];
  std::memset(record, 7, sizeof record);
  std::uint64_t tail = 0;
  std::uint64_t head_cache = 0;
  std::uint64_t dropped = 0;
  run_paced(state, with_consumer, [&] {
    if (tail + kSlot - head_cache > kCapacity) {
      head_cache = ring->head.load(std::memory_order_acquire);
      if (tail + kSlot - head_cache > kCapacity) {
        ++dropped;
        benchmark::DoNotOptimize(dropped);
        return;
      }
    }
    std::memcpy(ring->data + (tail % kCapacity), record, sizeof record);
    tail += kSlot;
    ring->tail.store(tail, std::memory_order_release);
  });
  state.counters["dropped"] = static_cast<double>(dropped);
  stop.store(true);
  if (consumer.joinable()) consumer.join();
}
BENCHMARK(BM_PhysicalLimitBareRing)->Arg(1)->ArgName("daemon_like_consumer")->UseManualTime();
BENCHMARK(BM_PhysicalLimitBareRing)->Arg(0)->ArgName("daemon_like_consumer")->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
