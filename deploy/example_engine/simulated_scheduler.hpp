// A toy SGLang scheduler: requests arrive, are prefilled into a KV pool, decode token by token (with
// speculative decoding), and leave; when the pool runs out, requests are retracted. It reports through
// rankstat the way SGLang's scheduler does: a snapshot after every prefill batch, one every
// `decode_log_interval` decode steps, and counters and histograms as events happen.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "rankstat/reporter.hpp"

namespace rankstat::example {

struct SimulationOptions {
  double arrival_rate_per_s = 20;  // mean request arrivals per second (varies over time)
  double step_seconds = 0.02;      // wall time per scheduler step
  std::int64_t max_total_tokens = 200'000;
  std::int32_t max_running_requests = 64;
  int decode_log_interval = 10;
  bool priorities = true;
  bool speculative = true;
  std::uint32_t seed = 1;
};

class SimulatedScheduler {
 public:
  SimulatedScheduler(Reporter& reporter, SimulationOptions options);
  // Advances one scheduler step of `options.step_seconds` simulated (and wall) time.
  void step(double now_seconds);

 private:
  struct Request {
    std::int64_t input_tokens;
    std::int64_t output_tokens;
    std::int64_t generated = 0;
    std::int32_t priority;
    double arrival_seconds;
  };

  void admit_arrivals(double now_seconds);
  bool run_prefill(double now_seconds);
  void run_decode(double now_seconds);
  void report(shm::ReportKind kind, double now_seconds);
  std::int64_t used_tokens() const;

  Reporter& reporter_;
  SimulationOptions options_;
  std::mt19937_64 random_;
  std::deque<Request> waiting_;
  std::vector<Request> running_;
  double last_decode_log_seconds_ = 0;
  std::int64_t generated_since_log_ = 0;
  int decode_steps_ = 0;
  double cache_hit_rate_ = 0;
  std::int64_t retracted_since_report_ = 0;
  double spec_accept_tokens_ = 0;
  double spec_verify_steps_ = 0;
  std::uint32_t realtime_prefill_compute_ = 0;
  std::uint32_t realtime_prefill_cache_ = 0;
  std::uint32_t realtime_decode_ = 0;
  std::uint32_t retracted_requests_ = 0;
  std::uint32_t queue_time_ = 0;
  std::uint32_t requests_finished_ = 0;
};

}  // namespace rankstat::example
