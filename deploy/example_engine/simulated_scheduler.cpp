#include "simulated_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <string_view>

namespace rankstat::example {
namespace {

// SGLang's queue_time_seconds buckets.
std::vector<double> queue_time_buckets() {
  std::vector<double> b = {0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20};
  for (double v = 30; v <= 100; v += 10) b.push_back(v);
  for (double v = 200; v <= 1000; v += 100) b.push_back(v);
  for (double v : {1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0}) b.push_back(v);
  return b;
}

}  // namespace

namespace {

// A series with its HELP text (the daemon serves what the writer declares) and the segment's identity
// labels (model_name, engine_type, ranks) added to its own.
void declare(Reporter& reporter, shm::SeriesKind kind, std::string_view family, std::string_view help,
             const shm::LabelPairs& labels, std::span<const double> bounds, std::uint32_t& id) {
  Reporter::SeriesSpec spec;
  spec.kind = kind;
  spec.family = family;
  spec.help = help;
  spec.labels = &labels;
  spec.bounds = bounds;
  reporter.register_series(spec, id);
}

}  // namespace

SimulatedScheduler::SimulatedScheduler(Reporter& reporter, SimulationOptions options)
    : reporter_(reporter), options_(options), random_(options.seed) {
  constexpr auto kCounter = shm::SeriesKind::kCounter;
  constexpr std::string_view kRealtimeHelp =
      "Tokens processed, by mode: prefill compute, prefill cache, decode.";
  declare(reporter_, kCounter, "sglang:realtime_tokens_total", kRealtimeHelp, {{"mode", "prefill_compute"}},
          {}, realtime_prefill_compute_);
  declare(reporter_, kCounter, "sglang:realtime_tokens_total", kRealtimeHelp, {{"mode", "prefill_cache"}}, {},
          realtime_prefill_cache_);
  declare(reporter_, kCounter, "sglang:realtime_tokens_total", kRealtimeHelp, {{"mode", "decode"}}, {},
          realtime_decode_);
  declare(reporter_, kCounter, "sglang:num_retracted_requests_total",
          "Requests retracted to the waiting queue.", {}, {}, retracted_requests_);
  declare(reporter_, kCounter, "sglang:num_requests_finished_total", "Requests the scheduler finished.", {},
          {}, requests_finished_);
  const std::vector<double> buckets = queue_time_buckets();
  declare(reporter_, shm::SeriesKind::kHistogram, "sglang:queue_time_seconds",
          "Time requests waited in the scheduler queue, in seconds.", {}, buckets, queue_time_);
}

std::int64_t SimulatedScheduler::used_tokens() const {
  std::int64_t used = 0;
  for (const Request& r : running_) used += r.input_tokens + r.generated;
  return used;
}

void SimulatedScheduler::admit_arrivals(double now_seconds) {
  // Load swings slowly so the queue and KV numbers move on a dashboard.
  const double rate =
      options_.arrival_rate_per_s * (1.0 + 0.8 * std::sin(now_seconds / 20.0 + options_.seed));
  std::poisson_distribution<int> arrivals(std::max(0.0, rate * options_.step_seconds));
  std::uniform_int_distribution<std::int64_t> input(200, 4000);
  std::uniform_int_distribution<std::int64_t> output(50, 800);
  std::uniform_int_distribution<std::int32_t> priority(0, 2);
  for (int n = arrivals(random_); n > 0; --n) {
    waiting_.push_back(Request{input(random_), output(random_), 0,
                               options_.priorities ? priority(random_) : 0, now_seconds});
  }
}

bool SimulatedScheduler::run_prefill(double now_seconds) {
  constexpr std::int64_t kChunkTokens = 8192;
  std::int64_t budget = kChunkTokens;
  std::int64_t compute = 0;
  std::int64_t cached = 0;
  std::uniform_real_distribution<double> hit(0.1, 0.7);
  while (!waiting_.empty() && static_cast<std::int32_t>(running_.size()) < options_.max_running_requests) {
    Request& r = waiting_.front();
    if (r.input_tokens > budget || used_tokens() + r.input_tokens > options_.max_total_tokens) break;
    const auto hit_tokens = static_cast<std::int64_t>(static_cast<double>(r.input_tokens) * hit(random_));
    cached += hit_tokens;
    compute += r.input_tokens - hit_tokens;
    budget -= r.input_tokens;
    reporter_.histogram_observe(queue_time_, now_seconds - r.arrival_seconds);
    running_.push_back(r);
    waiting_.pop_front();
  }
  if (compute + cached == 0) return false;
  cache_hit_rate_ = static_cast<double>(cached) / static_cast<double>(compute + cached);
  reporter_.counter_add(realtime_prefill_compute_, static_cast<double>(compute));
  reporter_.counter_add(realtime_prefill_cache_, static_cast<double>(cached));
  report(shm::ReportKind::kPrefill, now_seconds);
  return true;
}

void SimulatedScheduler::run_decode(double now_seconds) {
  if (running_.empty()) return;
  std::uniform_real_distribution<double> accept(1.0, 3.5);
  std::int64_t generated = 0;
  for (Request& r : running_) {
    const double accepted = options_.speculative ? accept(random_) : 1.0;
    const auto tokens =
        std::min<std::int64_t>(static_cast<std::int64_t>(accepted), r.output_tokens - r.generated);
    r.generated += std::max<std::int64_t>(1, tokens);
    generated += std::max<std::int64_t>(1, tokens);
    spec_accept_tokens_ += accepted;
    spec_verify_steps_ += 1;
  }
  // Out of KV: retract the newest request back to the queue, as SGLang does.
  while (used_tokens() > options_.max_total_tokens && !running_.empty()) {
    Request r = running_.back();
    running_.pop_back();
    r.generated = 0;
    waiting_.push_front(r);
    ++retracted_since_report_;
    reporter_.counter_add(retracted_requests_, 1);
  }
  const auto finished = std::remove_if(running_.begin(), running_.end(),
                                       [](const Request& r) { return r.generated >= r.output_tokens; });
  reporter_.counter_add(requests_finished_, static_cast<double>(std::distance(finished, running_.end())));
  running_.erase(finished, running_.end());
  generated_since_log_ += generated;
  reporter_.counter_add(realtime_decode_, static_cast<double>(generated));
  if (++decode_steps_ % options_.decode_log_interval == 0) report(shm::ReportKind::kDecode, now_seconds);
}

void SimulatedScheduler::step(double now_seconds) {
  admit_arrivals(now_seconds);
  if (!run_prefill(now_seconds)) run_decode(now_seconds);
  reporter_.heartbeat();
}

void SimulatedScheduler::report(shm::ReportKind kind, double now_seconds) {
  shm::SchedulerSnapshot s{};
  s.report_kind = static_cast<std::uint32_t>(kind);
  s.groups = options_.speculative ? shm::kGroupSpeculative : 0;
  s.num_running_reqs = static_cast<std::int64_t>(running_.size());
  s.num_queue_reqs = static_cast<std::int64_t>(waiting_.size());
  const std::int64_t used = used_tokens();
  const std::int64_t evictable = std::min<std::int64_t>(options_.max_total_tokens - used, 20'000);
  s.kv_used_tokens = used;
  s.kv_evictable_tokens = evictable;
  s.kv_available_tokens = options_.max_total_tokens - used - evictable;
  s.num_used_tokens = used;
  s.full_token_usage = static_cast<double>(used) / static_cast<double>(options_.max_total_tokens);
  s.token_usage = std::round(s.full_token_usage * 100) / 100;
  s.cache_hit_rate = cache_hit_rate_;
  for (const Request& r : running_) s.decode_sum_seq_lens += r.input_tokens + r.generated;
  if (kind == shm::ReportKind::kDecode) {
    const double elapsed = now_seconds - last_decode_log_seconds_;
    s.gen_throughput = elapsed > 0 ? static_cast<double>(generated_since_log_) / elapsed : 0;
    last_decode_log_seconds_ = now_seconds;
    generated_since_log_ = 0;
  }
  if (options_.speculative && spec_verify_steps_ > 0) {
    s.spec_accept_length = spec_accept_tokens_ / spec_verify_steps_;
    s.spec_num_steps = 3;
    s.spec_num_draft_tokens = 4;
    s.spec_accept_rate = (s.spec_accept_length - 1) / 3;
    s.spec_cap_length = 4;
  }
  s.num_retracted_reqs = retracted_since_report_;
  retracted_since_report_ = 0;
  s.new_token_ratio = 0.4 + 0.3 * s.full_token_usage;
  s.utilization =
      std::max(static_cast<double>(running_.size()) / options_.max_running_requests, s.token_usage / 0.9);
  s.fwd_occupancy = running_.empty() ? 0 : 60 + 35 * s.full_token_usage;
  s.is_cuda_graph = kind == shm::ReportKind::kDecode ? 1 : 0;

  shm::PriorityCount entries[2 * 3];
  std::uint32_t n = 0;
  if (options_.priorities) {
    for (std::int32_t p = 0; p < 3; ++p) {
      std::int64_t running = 0;
      std::int64_t waiting = 0;
      for (const Request& r : running_) running += r.priority == p ? 1 : 0;
      for (const Request& r : waiting_) waiting += r.priority == p ? 1 : 0;
      if (running > 0)
        entries[n++] =
            shm::PriorityCount{p, static_cast<std::uint8_t>(shm::QueueId::kRunning), 0, 0, running};
      if (waiting > 0)
        entries[n++] =
            shm::PriorityCount{p, static_cast<std::uint8_t>(shm::QueueId::kWaiting), 0, 0, waiting};
    }
  }
  reporter_.report_scheduler(s, std::span<const shm::PriorityCount>(entries, n));
}

}  // namespace rankstat::example
