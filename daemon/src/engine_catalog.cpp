#include "engine_catalog.hpp"

#include <unordered_map>

namespace rankstat {

// One entry per SGLang family that rankstat serves (docs/metrics.md has the full table: type, mode,
// labels, buckets, source). The texts are ours; they never contain a backslash or a newline.
std::string_view engine_help(std::string_view family) {
  static const std::unordered_map<std::string_view, std::string_view> kHelp = {
      // --- scheduler snapshot: basics ---
      {"sglang:num_running_reqs", "Requests in the running batch (priority=\"\" is the total)."},
      {"sglang:num_queue_reqs", "Requests waiting in the scheduler queue (priority=\"\" is the total)."},
      {"sglang:num_grammar_queue_reqs", "Requests waiting for grammar compilation."},
      {"sglang:gen_throughput",
       "Decode throughput in generated tokens per second; 0 after 30 s without decode."},
      {"sglang:cache_hit_rate", "Prefix cache hit rate of the last prefill batch."},
      {"sglang:decode_sum_seq_lens", "Sum of sequence lengths in the decode batch."},
      // --- pools ---
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
      // --- speculative decoding ---
      {"sglang:spec_accept_length",
       "Average tokens produced per speculative verify step, bonus token included."},
      {"sglang:spec_accept_rate", "Fraction of proposed draft tokens that were accepted."},
      {"sglang:spec_cap_length", "Average capped verify window per verify step."},
      {"sglang:spec_block_accept_length", "Average uncapped block accept length per verify step."},
      {"sglang:spec_num_steps", "Speculative steps per verify in the active configuration."},
      {"sglang:spec_num_draft_tokens", "Draft tokens per verify in the active configuration."},
      // --- retraction ---
      {"sglang:num_retracted_reqs", "Requests retracted since the previous report, per process."},
      {"sglang:num_paused_reqs", "Requests paused since the previous report, per process."},
      {"sglang:num_retracted_reqs_total", "Requests retracted to the waiting queue."},
      {"sglang:num_retracted_input_tokens_total", "Input tokens of retracted requests."},
      {"sglang:num_retracted_output_tokens_total", "Output tokens discarded by retraction."},
      // --- PD disaggregation ---
      {"sglang:num_prefill_bootstrap_queue_reqs", "PD prefill requests waiting for bootstrap."},
      {"sglang:num_prefill_inflight_queue_reqs", "PD prefill requests whose KV transfer is in flight."},
      {"sglang:num_decode_prealloc_queue_reqs", "PD decode requests waiting for KV preallocation."},
      {"sglang:num_decode_transfer_queue_reqs", "PD decode requests waiting for KV transfer."},
      {"sglang:pending_prealloc_token_usage", "KV usage reserved by pending preallocations."},
      {"sglang:num_decode_deferred_kv_release_reqs", "PD decode requests whose KV release is deferred."},
      {"sglang:kv_transfer_speed_gb_s", "KV transfer speed per request in GB/s."},
      {"sglang:kv_transfer_latency_ms", "KV transfer latency per request in milliseconds."},
      {"sglang:kv_transfer_bootstrap_ms", "KV transfer bootstrap time per request in milliseconds."},
      {"sglang:kv_transfer_alloc_ms", "Wait for a KV allocation per request in milliseconds."},
      {"sglang:kv_transfer_total_mb", "KV data moved per request in megabytes."},
      {"sglang:num_bootstrap_failed_reqs_total", "Requests whose PD bootstrap failed."},
      {"sglang:num_transfer_failed_reqs_total", "Requests whose KV transfer failed."},
      {"sglang:num_prefill_retries_total", "Prefill retries."},
      {"sglang:kv_transfer_timeouts_total", "KV transfer timeouts by stage."},
      // --- forward and policy ---
      {"sglang:utilization", "Scheduler utilization against its SLO limits; -1 on a PD prefill node."},
      {"sglang:fwd_occupancy", "Percent of wall time the device spent in forward passes."},
      {"sglang:new_token_ratio", "Estimated ratio of new tokens used for admission control."},
      {"sglang:is_cuda_graph", "1 if the last decode batch ran in a CUDA graph."},
      {"sglang:cuda_graph_passes_total", "Forward passes by phase and whether a CUDA graph ran them."},
      // --- optional groups ---
      {"sglang:lora_pool_slots_used", "LoRA adapter slots in use."},
      {"sglang:lora_pool_slots_total", "LoRA adapter slots in the pool."},
      {"sglang:lora_pool_utilization", "Fraction of LoRA adapter slots in use."},
      {"sglang:hicache_host_used_tokens", "Tokens held in the HiCache host pool."},
      {"sglang:hicache_host_total_tokens", "Capacity of the HiCache host pool in tokens."},
      {"sglang:num_streaming_sessions", "Open streaming sessions."},
      {"sglang:streaming_session_held_tokens", "KV tokens held by streaming sessions."},
      // --- routing keys ---
      {"sglang:num_unique_running_routing_keys", "Distinct routing keys among running requests."},
      {"sglang:routing_key_running_req_count",
       "Routing keys by their running request count (gt < count <= le)."},
      {"sglang:routing_key_all_req_count",
       "Routing keys by their running plus waiting request count (gt < count <= le)."},
      // --- request latency (scheduler side) ---
      {"sglang:queue_time_seconds", "Time requests spent waiting in the scheduler queue, in seconds."},
      {"sglang:per_stage_req_latency_seconds", "Time requests spent in each stage, in seconds."},
      {"sglang:weight_load_duration_seconds", "Duration of the last weight update by source, in seconds."},
      // --- grammar ---
      {"sglang:grammar_compilation_time_seconds", "Grammar compilation time in seconds."},
      {"sglang:num_grammar_cache_hit_total", "Grammar cache hits."},
      {"sglang:num_grammar_aborted_total", "Grammar requests aborted."},
      {"sglang:num_grammar_timeout_total", "Grammar compilation timeouts."},
      {"sglang:num_grammar_total", "Grammar requests."},
      {"sglang:grammar_schema_count", "Schemas per grammar request."},
      {"sglang:grammar_ebnf_size", "EBNF size per grammar request."},
      {"sglang:grammar_tree_traversal_time_avg", "Mean grammar tree traversal time per request, in seconds."},
      {"sglang:grammar_tree_traversal_time_max",
       "Longest grammar tree traversal time per request, in seconds."},
      // --- execution ---
      {"sglang:eplb_balancedness", "Expert-parallel load balancedness per forward."},
      {"sglang:eplb_gpu_physical_count", "Physical experts selected per layer and GPU rank."},
      {"sglang:realtime_tokens_total", "Tokens processed by mode: prefill compute, prefill cache, decode."},
      {"sglang:prefill_effective_tokens_total",
       "Effective prefill tokens by mode, retracted re-counts excluded."},
      {"sglang:forward_execution_seconds_total",
       "Device time spent in forward passes by category, in seconds."},
      {"sglang:estimated_flops_per_gpu_total", "Estimated floating point operations per GPU."},
      {"sglang:estimated_read_bytes_per_gpu_total", "Estimated bytes read from memory per GPU."},
      {"sglang:estimated_write_bytes_per_gpu_total", "Estimated bytes written to memory per GPU."},
      {"sglang:dp_cooperation_realtime_tokens_total",
       "Tokens processed by mode and number of DP ranks in prefill."},
      {"sglang:dp_cooperation_forward_execution_seconds_total",
       "Forward device time by category and number of DP ranks in prefill, in seconds."},
      // --- DP attention balance ---
      {"sglang:dp_attention_tokens_total",
       "DP attention tokens: scheduled on this rank, or padding to the busiest rank."},
      {"sglang:dp_attention_pairs_total",
       "DP attention query-key pairs: scheduled, or short of the busiest rank."},
      {"sglang:dp_attention_steps_total", "DP attention synchronized steps by whether this rank had tokens."},
      {"sglang:dp_attention_token_imbalance_ratio",
       "Busiest DP rank tokens over the mean, one sample per step."},
      {"sglang:dp_attention_sync_wait_seconds",
       "Wall time this rank waited in the DP attention gather, in seconds."},
      // --- scheduler loop ---
      {"sglang:scheduler_idle_seconds_total", "Scheduler loop time spent idle, in seconds."},
      {"sglang:scheduler_stage_seconds_total", "Scheduler loop time by stage, in seconds."},
      {"sglang:scheduler_iterations_total", "Scheduler loop iterations."},
      // --- prefill delayer ---
      {"sglang:prefill_delayer_wait_forward_passes",
       "Forward passes a prefill waited in the prefill delayer."},
      {"sglang:prefill_delayer_wait_seconds", "Time a prefill waited in the prefill delayer, in seconds."},
      {"sglang:prefill_delayer_outcomes_total",
       "Prefill delayer decisions by estimation, outcome and execution."},
      // --- constants ---
      {"sglang:max_total_num_tokens", "Capacity of the KV pool in tokens."},
      {"sglang:max_total_num_tokens_swa", "Capacity of the sliding-window KV pool in tokens."},
      {"sglang:weight_memory_usage_gb", "Device memory used by the weights, in GB."},
      {"sglang:kv_cache_memory_usage_gb", "Device memory used by the KV pools, in GB."},
      {"sglang:graph_memory_usage_gb", "Device memory used by captured graphs per phase, in GB."},
      {"sglang:max_running_requests_under_SLO", "Most running requests allowed under the SLO."},
      {"sglang:page_size", "KV cache page size in tokens."},
      {"sglang:num_pages", "KV cache pages."},
      {"sglang:context_len", "Maximum context length in tokens."},
      {"sglang:startup_available_gpu_memory_gb", "Free device memory at startup, in GB."},
      // --- radix cache and HiCache ---
      {"sglang:eviction_duration_seconds", "Duration of a device eviction pass, in seconds."},
      {"sglang:evicted_tokens_total", "Device KV slots freed by eviction."},
      {"sglang:load_back_duration_seconds", "Duration of a host to device load-back, in seconds."},
      {"sglang:load_back_tokens_total", "Tokens loaded back from host memory by pool."},
      {"sglang:hicache_backup_duration_seconds", "Duration of a device to host backup, in seconds."},
      {"sglang:hicache_backup_bytes_total", "Bytes backed up from device to host memory."},
      {"sglang:load_back_bytes_total", "Bytes loaded back from host to device memory."},
      {"sglang:hicache_backup_tokens_total", "Tokens backed up from device to host memory by pool."},
      {"sglang:hicache_dropped_tokens_total",
       "Device KV tokens dropped without a host backup, by reason and pool."},
      // --- HiCache storage (L3) ---
      {"sglang:hicache_prefetch_outcomes_total", "Storage prefetch outcomes."},
      {"sglang:prefetched_tokens_total", "Tokens prefetched from storage."},
      {"sglang:backuped_tokens_total", "Tokens backed up to storage."},
      {"sglang:hicache_backup_dropped_tokens_total",
       "Storage backup tokens dropped by write-path rate limiting."},
      {"sglang:hicache_prefetch_aux_alloc_failed_tokens_total",
       "Prefetch tokens abandoned because an auxiliary pool could not allocate."},
      {"sglang:storage_prefetch_hit_tokens_total", "Prefetch tokens found in storage."},
      {"sglang:storage_prefetch_unfulfilled_tokens_total", "Prefetch tokens requested but not delivered."},
      {"sglang:storage_prefetch_deferred_tokens_total", "Prefetch tokens deferred to a later step."},
      {"sglang:prefetch_pgs", "Pages per storage prefetch batch."},
      {"sglang:backup_pgs", "Pages per storage backup batch."},
      {"sglang:prefetch_bandwidth", "Storage prefetch bandwidth in GB/s."},
      {"sglang:backup_bandwidth", "Storage backup bandwidth in GB/s."},
      // --- tokenizer / front end ---
      {"sglang:startup_time_seconds", "Engine startup time by phase, in seconds."},
      {"sglang:startup_cuda_graph_time_seconds", "CUDA graph capture time by phase, in seconds."},
      {"sglang:prompt_tokens_total", "Prompt tokens of finished requests."},
      {"sglang:generation_tokens_total", "Generated tokens of finished requests."},
      {"sglang:spec_verify_calls_total", "Speculative verify calls of finished requests."},
      {"sglang:prompt_tokens_histogram", "Prompt length per finished request, in tokens."},
      {"sglang:uncached_prompt_tokens_histogram",
       "Prompt tokens not served from cache per finished request."},
      {"sglang:generation_tokens_histogram", "Generated length per finished request, in tokens."},
      {"sglang:cached_tokens_total", "Cached prompt tokens by cache tier."},
      {"sglang:num_requests_total", "Finished requests."},
      {"sglang:get_loads_duration_seconds", "Time to serve a load query, in seconds."},
      {"sglang:num_so_requests_total", "Finished structured-output requests."},
      {"sglang:num_aborted_requests_total", "Aborted requests."},
      {"sglang:time_to_first_token_seconds", "Time from arrival to the first output token, in seconds."},
      {"sglang:inter_token_latency_seconds", "Time between output tokens, in seconds."},
      {"sglang:e2e_request_latency_seconds", "Time from arrival to the last output token, in seconds."},
      {"sglang:request_time_per_output_token_seconds",
       "Decode time per output token after the first, per finished request, in seconds."},
      // --- HTTP front end ---
      {"sglang:http_requests_total", "HTTP requests by endpoint and method."},
      {"sglang:http_responses_total", "HTTP responses by endpoint, status code and method."},
      {"sglang:http_requests_active", "HTTP requests in progress, summed over live front-end processes."},
      {"sglang:routing_keys_active", "Routing keys with at least one request in progress."},
      {"sglang:func_latency_seconds", "Latency of instrumented front-end functions, in seconds."},
  };
  auto it = kHelp.find(family);
  return it == kHelp.end() ? std::string_view("Reported by the engine through rankstat.") : it->second;
}

bool engine_family_is_summary(std::string_view family) {
  return family == "sglang:eplb_balancedness";
}

bool engine_family_without_identity_labels(std::string_view family) {
  return family == "sglang:kv_transfer_timeouts_total" || family == "sglang:eplb_gpu_physical_count" ||
         family == "sglang:http_requests_total" || family == "sglang:http_responses_total" ||
         family == "sglang:http_requests_active" || family == "sglang:routing_keys_active" ||
         family == "sglang:func_latency_seconds";
}

}  // namespace rankstat
