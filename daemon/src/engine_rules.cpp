#include "engine_rules.hpp"

#include <cstddef>
#include <iterator>

namespace rankstat {

bool exports_engine_metrics(const shm::SegmentHeader& h) {
  if (h.role != static_cast<std::uint32_t>(shm::Role::kScheduler)) return true;
  // Newer SGLang (the reference article) also requires attn_cp_rank 0; -1 (unset) counts as 0.
  return (h.attn_tp_rank == 0 && h.attn_cp_rank <= 0) || (h.flags & shm::kFlagAllSchedulersMetrics) != 0;
}

namespace {

std::string routing_key_bound_text(std::size_t i) {
  if (i >= std::size(shm::kRoutingKeyBucketBounds)) return {"+Inf"};
  const double b = shm::kRoutingKeyBucketBounds[i];
  return b == static_cast<double>(static_cast<std::int64_t>(b)) ? std::to_string(static_cast<std::int64_t>(b))
                                                                : std::to_string(b);
}

}  // namespace

std::pair<std::string, std::string> routing_key_bin_labels(std::size_t bin) {
  return {bin == 0 ? std::string("0") : routing_key_bound_text(bin - 1), routing_key_bound_text(bin)};
}

void note_seen_priorities(std::span<const shm::PriorityCount> counts, std::set<SeenPriority>& seen) {
  for (const shm::PriorityCount& entry : counts) {
    if (entry.queue >= shm::kQueueIdCount) continue;
    const bool none = (entry.flags & shm::kPriorityIsNone) != 0;
    seen.insert(SeenPriority{entry.queue, none ? 0 : entry.priority, none});
  }
}

std::string priority_label_value(const SeenPriority& p) {
  return p.is_none ? "None" : std::to_string(p.priority);
}

const std::vector<std::string>& default_integrated_families() {
  static const std::vector<std::string> families = {
      // SGLang: the typed snapshot fields and the collectors' gauges of the same names.
      "sglang:num_running_reqs",
      "sglang:num_queue_reqs",
      "sglang:num_grammar_queue_reqs",
      "sglang:num_running_reqs_offline_batch",
      "sglang:num_prefill_bootstrap_queue_reqs",
      "sglang:num_prefill_prealloc_queue_reqs",
      "sglang:num_prefill_inflight_queue_reqs",
      "sglang:num_decode_prealloc_queue_reqs",
      "sglang:num_decode_transfer_queue_reqs",
      "sglang:num_decode_host_receive_queue_reqs",
      // KV: token_usage is already the largest of the full, SWA and mamba pools' usage, and
      // num_used_tokens follows kv_used_tokens; each gauge integrated costs drain time on every report
      // that changes it, so the redundant ones are left to --aggregate.integrate.
      "sglang:token_usage",
      "sglang:kv_used_tokens",
      "sglang:pending_prealloc_token_usage",
      // vLLM's PrometheusStatLogger.
      "vllm:num_requests_running",
      "vllm:num_requests_waiting",
      "vllm:kv_cache_usage_perc",
      "vllm:gpu_cache_usage_perc",
  };
  return families;
}

}  // namespace rankstat
