#include "engine_catalog.hpp"

#include <unordered_map>

namespace rankstat {

std::string_view engine_help(std::string_view family) {
  static const std::unordered_map<std::string_view, std::string_view> kHelp = {
      {"sglang:num_running_reqs", "Requests in the running batch."},
      {"sglang:num_queue_reqs", "Requests waiting in the scheduler queue."},
      {"sglang:num_grammar_queue_reqs", "Requests waiting for grammar compilation."},
      {"sglang:gen_throughput", "Decode throughput in generated tokens per second."},
      {"sglang:cache_hit_rate", "Prefix cache hit rate of the last prefill batch."},
      {"sglang:decode_sum_seq_lens", "Sum of sequence lengths in the decode batch."},
      {"sglang:token_usage", "KV pool usage, the largest of the full, SWA and mamba pools."},
      {"sglang:full_token_usage", "Usage of the full-attention KV pool."},
      {"sglang:swa_token_usage", "Usage of the sliding-window KV pool."},
      {"sglang:mamba_usage", "Usage of the mamba state pool."},
      {"sglang:num_used_tokens", "KV tokens in use."},
      {"sglang:kv_available_tokens", "Free tokens in the full KV pool."},
      {"sglang:kv_evictable_tokens", "Evictable cached tokens in the full KV pool."},
      {"sglang:kv_used_tokens", "Tokens held by requests in the full KV pool."},
      {"sglang:swa_available_tokens", "Free tokens in the sliding-window pool."},
      {"sglang:swa_evictable_tokens", "Evictable tokens in the sliding-window pool."},
      {"sglang:swa_used_tokens", "Tokens held by requests in the sliding-window pool."},
      {"sglang:mamba_available_tokens", "Free slots in the mamba state pool."},
      {"sglang:mamba_evictable_tokens", "Evictable slots in the mamba state pool."},
      {"sglang:mamba_used_tokens", "Slots held by requests in the mamba state pool."},
      {"sglang:spec_accept_length", "Average accepted tokens per speculative verify step."},
      {"sglang:spec_accept_rate", "Fraction of drafted tokens accepted."},
      {"sglang:spec_cap_length", "Cap on the speculative draft length."},
      {"sglang:spec_block_accept_length", "Average accepted length per speculative block."},
      {"sglang:spec_num_steps", "Speculative decoding steps per verify."},
      {"sglang:spec_num_draft_tokens", "Draft tokens per speculative verify."},
      {"sglang:num_retracted_reqs", "Requests retracted since the last report."},
      {"sglang:num_paused_reqs", "Requests paused since the last report."},
      {"sglang:num_prefill_bootstrap_queue_reqs", "PD prefill requests waiting for bootstrap."},
      {"sglang:num_prefill_inflight_queue_reqs", "PD prefill requests whose KV transfer is in flight."},
      {"sglang:num_decode_prealloc_queue_reqs", "PD decode requests waiting for KV preallocation."},
      {"sglang:num_decode_transfer_queue_reqs", "PD decode requests waiting for KV transfer."},
      {"sglang:pending_prealloc_token_usage", "KV usage reserved by pending preallocations."},
      {"sglang:num_decode_deferred_kv_release_reqs", "PD decode requests whose KV release is deferred."},
      {"sglang:utilization", "Scheduler utilization against its SLO limits; -1 on a PD prefill node."},
      {"sglang:fwd_occupancy", "Percent of wall time the device spent in forward passes."},
      {"sglang:new_token_ratio", "Estimated ratio of new tokens used for admission control."},
      {"sglang:is_cuda_graph", "1 if the last decode batch ran in a CUDA graph."},
      {"sglang:lora_pool_slots_used", "LoRA adapter slots in use."},
      {"sglang:lora_pool_slots_total", "LoRA adapter slots in the pool."},
      {"sglang:lora_pool_utilization", "Fraction of LoRA adapter slots in use."},
      {"sglang:hicache_host_used_tokens", "Tokens held in the HiCache host pool."},
      {"sglang:hicache_host_total_tokens", "Capacity of the HiCache host pool in tokens."},
      {"sglang:num_streaming_sessions", "Open streaming sessions."},
      {"sglang:streaming_session_held_tokens", "KV tokens held by streaming sessions."},
      {"sglang:num_unique_running_routing_keys", "Distinct routing keys among running requests."},
  };
  auto it = kHelp.find(family);
  return it == kHelp.end() ? std::string_view("Reported by the engine through rankstat.") : it->second;
}

}  // namespace rankstat
