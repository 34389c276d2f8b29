// Pins the exposition format: two scheduler ranks with known values, rendered the way /metrics renders
// them, must match tests/golden/engine_metrics.prom byte for byte (pids normalised). Regenerate with
// RANKSTAT_UPDATE_GOLDEN=1 after an intended format change, and review the diff.
#include <prometheus/text_serializer.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "engine_collect.hpp"
#include "rankstat/reporter.hpp"
#include "segment_registry.hpp"
#include "testkit.hpp"

using namespace rankstat;

namespace {

void open_rank(Reporter& reporter, const std::string& dir, int dp_rank) {
  ReporterOptions options;
  options.shm_dir = dir;
  options.identity.instance = "golden";
  options.identity.model_name = "Qwen/Qwen3-8B";
  options.identity.dp_rank = dp_rank;
  options.identity.flags = shm::kFlagPriorityScheduling;
  options.identity.extra_labels = {{"cluster", "eu \"west\""}};
  options.geometry.ring_bytes = 64 * 1024;
  REQUIRE(reporter.open(options) == Status::kOk);
}

void report(Reporter& reporter, int dp_rank) {
  shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kDecode);
  s.groups = shm::kGroupSpeculative;
  s.num_running_reqs = 10 + dp_rank;
  s.num_queue_reqs = 2;
  s.gen_throughput = 1234.5;
  s.cache_hit_rate = 0.375;
  s.token_usage = 0.5;
  s.full_token_usage = 0.5;
  s.kv_available_tokens = 1000;
  s.kv_evictable_tokens = 200;
  s.kv_used_tokens = 1200;
  s.num_used_tokens = 1200;
  s.spec_accept_length = 2.25;
  s.utilization = 0.6;
  s.fwd_occupancy = 87.5;
  s.num_retracted_reqs = dp_rank;
  const shm::PriorityCount priorities[] = {{0, 0, 0, 0, 6}, {5, 0, 0, 0, 4 + dp_rank}, {0, 1, 0, 0, 2}};
  // A prefill report owns cache_hit_rate, the decode report after it owns gen_throughput: the
  // exposition shows both (SGLang's decode log would otherwise reset the hit rate to 0).
  shm::SchedulerSnapshot prefill = s;
  prefill.report_kind = static_cast<std::uint32_t>(shm::ReportKind::kPrefill);
  prefill.gen_throughput = 0;
  REQUIRE(reporter.report_scheduler(prefill, priorities) == Status::kOk);
  s.cache_hit_rate = 0;
  REQUIRE(reporter.report_scheduler(s, priorities) == Status::kOk);
  std::uint32_t tokens = 0;
  REQUIRE(reporter.register_counter("sglang:realtime_tokens_total", {{"mode", "decode"}}, tokens,
                                    "Tokens processed by mode.") == Status::kOk);
  REQUIRE(reporter.counter_add(tokens, 100.0 * (dp_rank + 1)) == Status::kOk);
  std::uint32_t latency = 0;
  const double bounds[] = {0.1, 0.5, 1};
  REQUIRE(reporter.register_histogram("sglang:queue_time_seconds", {}, bounds, latency,
                                      "Queue time in seconds,\nwith a newline and a \\ to escape.") ==
          Status::kOk);
  REQUIRE(reporter.histogram_observe(latency, 0.05) == Status::kOk);
  REQUIRE(reporter.histogram_observe(latency, 0.7) == Status::kOk);
  std::uint32_t timeouts = 0;
  REQUIRE(reporter.register_counter("sglang:num_retracted_requests_total", {}, timeouts) ==
          Status::kOk);  // no help
  REQUIRE(reporter.counter_add(timeouts, 1) == Status::kOk);
}

// pid="12345" -> pid="PID": the writer's pid differs on every run.
std::string normalise_pids(const std::string& text) {
  std::string out;
  std::size_t pos = 0;
  const std::string key = "pid=\"";
  for (std::size_t hit; (hit = text.find(key, pos)) != std::string::npos;) {
    const std::size_t end = text.find('"', hit + key.size());
    out.append(text, pos, hit - pos).append("pid=\"PID\"");
    pos = end + 1;
  }
  return out.append(text, pos);
}

}  // namespace

TEST_CASE("the engine exposition matches the golden file") {
  testkit::TempDir dir;
  Reporter rank0;
  Reporter rank1;
  open_rank(rank0, dir.path(), 0);
  open_rank(rank1, dir.path(), 1);
  report(rank0, 0);
  report(rank1, 1);

  RetiredTotals retired("");
  RegistryOptions options;
  options.directory = dir.path();
  SegmentRegistry registry(options, retired);
  REQUIRE(registry.scan(1) == 2);
  registry.drain_all(2);
  registry.refresh_cumulative();
  FamilySet set;
  collect_engine_metrics(registry.generations(), CollectOptions{}, set);
  // What /metrics serves for the engine families: the render path, in prometheus_client's spelling.
  std::string text;
  set.render(text);
  text = normalise_pids(text);

  const std::string golden_path = testkit::source_path("tests/golden/engine_metrics.prom");
  if (const char* update = std::getenv("RANKSTAT_UPDATE_GOLDEN");
      update != nullptr && std::string(update) == "1") {
    std::ofstream(golden_path) << text;
  }
  const std::string golden = testkit::read_file(golden_path);
  REQUIRE_FALSE(golden.empty());
  CHECK(text == golden);
  rank0.close();
  rank1.close();
}
