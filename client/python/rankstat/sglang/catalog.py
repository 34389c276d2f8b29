"""Every SGLang metric family rankstat serves: name, type, gauge mode, labels, default buckets and the
field or call that feeds it. The collectors take their buckets from here; docs/metrics.md is this table
(tests/python checks that they agree).

Label shorthands: S = SGLang's scheduler labels (model_name, engine_type, tp_rank, pp_rank, moe_ep_rank,
priority when priority scheduling is on, dp_rank when set, then extra_metric_labels); T = the
tokenizer's (model_name, engine_type, priority when on, allowed custom labels, extra_metric_labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..buckets import exponential_buckets

S = "S"
T = "T"
NONE = ""  # the family's own labels only

# --- default buckets ------------------------------------------------------------------------------------

QUEUE_TIME = [0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90,
              100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000]
PER_STAGE_REQ_LATENCY = exponential_buckets(0.001, 1.62, 30)
KV_TRANSFER_SPEED_GB_S = [0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400]
KV_TRANSFER_LATENCY_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]
KV_TRANSFER_BOOTSTRAP_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500]
KV_TRANSFER_ALLOC_MS = KV_TRANSFER_BOOTSTRAP_MS
KV_TRANSFER_TOTAL_MB = [1, 5, 10, 50, 100, 500, 1000, 5000, 10000]
GRAMMAR_COMPILATION_TIME = [0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 90, 120, 240]
GRAMMAR_SCHEMA_COUNT = [0, 1, 2, 5, 10, 20, 30, 40, 60, 80, 100, 120, 140, 160, 180, 200, 300, 400, 500, 700, 1000]
GRAMMAR_EBNF_SIZE = [0, 50, 100, 200, 300, 500, 1000, 2000, 3000, 5000, 10000, 20000, 30000, 50000, 100000]
GRAMMAR_TREE_TRAVERSAL_TIME = [0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 90, 120, 240]
PREFILL_DELAYER_FORWARD_PASSES_DEFAULT = [5, 20, 50, 100, 200]
PREFILL_DELAYER_WAIT_SECONDS_DEFAULT = [1, 2, 5, 10, 20, 50, 100, 200, 500]
DP_ATTENTION_SYNC_WAIT_SECONDS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                  1.0]
# Not given by SGLang's sources or the article; ours: max/mean runs from 1 (balanced) to num_ranks.
DP_ATTENTION_TOKEN_IMBALANCE_RATIO = [1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0,
                                      64.0]
PROMPT_TOKENS = [100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500, 15000,
                 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000, 300000,
                 400000, 600000, 800000, 1000000, 1100000]
GET_LOADS_DURATION = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0]
TIME_TO_FIRST_TOKEN = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_REQUEST_LATENCY = TIME_TO_FIRST_TOKEN + [600, 1200, 1800, 2400]
INTER_TOKEN_LATENCY = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                       0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0]
# Not given by the article; ours: TPOT is a per-token interval like ITL, so it shares ITL's buckets.
TIME_PER_OUTPUT_TOKEN = INTER_TOKEN_LATENCY
# The article's eviction buckets (kept under a 1.0 s ceiling on purpose); older SGLang went on to 60 s.
EVICTION_DURATION = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04, 0.05,
                     0.1, 0.2, 0.5, 1.0]
LOAD_BACK_DURATION = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04, 0.05,
                      0.1, 0.2, 0.5, 1.0]
HICACHE_BACKUP_DURATION = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0]
STORAGE_PAGES = [1, 5, 10, 50, 100]
STORAGE_BANDWIDTH = [0.1, 0.5, 1, 5, 10, 50, 100]
FUNC_LATENCY = exponential_buckets(0.05, 1.5, 18)
ROUTING_KEY_REQ_COUNT = [1, 2, 3, 5, 7, 10, 20, 50, 100, 200]

ENV_BUCKET_EVICTION_DURATION = "SGLANG_BUCKET_EVICTION_DURATION"
ENV_BUCKET_LOAD_BACK_DURATION = "SGLANG_BUCKET_LOAD_BACK_DURATION"


def prefill_delayer_forward_passes_buckets(max_delay_passes: int,
                                           configured: Optional[Sequence[int]] = None) -> List[float]:
    """The configured (or default) bounds below max_delay_passes, plus 0 (no delay) and max_delay - 1
    (to tell a timed-out wait apart)."""
    chosen = configured or PREFILL_DELAYER_FORWARD_PASSES_DEFAULT
    return sorted({float(x) for x in chosen if x < max_delay_passes} | {0.0, float(max_delay_passes - 1)})


def prefill_delayer_wait_seconds_buckets(configured: Optional[Sequence[float]] = None) -> List[float]:
    return sorted({float(x) for x in (configured or PREFILL_DELAYER_WAIT_SECONDS_DEFAULT)} | {0.0})


def eplb_gpu_physical_count_buckets(ep_size: int) -> List[float]:
    return [float(i) for i in range(ep_size)]


# --- the table -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    type: str            # gauge, counter, histogram, summary, gaugehistogram
    mode: str            # gauge multiprocess mode ("" for other types)
    base: str            # S, T or "" (own labels only)
    labels: Tuple[str, ...]  # the family's own labels, after the base ones
    buckets: str         # as documented
    source: str          # the SchedulerStats field or collector call that feeds it
    group: str           # catalog role
    note: str = ""       # where SGLang versions differ, or rankstat's choice

    @property
    def label_names(self) -> List[str]:
        return list(self.labels)


def _fmt(bounds: Sequence[float]) -> str:
    return ",".join(f"{b:g}" for b in bounds)


def _g(name, field, group="scheduler", mode="mostrecent", note=""):
    return Family(f"sglang:{name}", "gauge", mode, S, (), "", f"SchedulerStats.{field}", group, note)


_SNAPSHOT = [
    _g("num_running_reqs", "num_running_reqs (QueueCount)", note='priority="" total plus priority="<p>" series'),
    _g("num_queue_reqs", "num_queue_reqs (QueueCount)", note='priority="" total plus priority="<p>" series'),
    _g("num_grammar_queue_reqs", "num_grammar_queue_reqs"),
    _g("gen_throughput", "gen_throughput", note="decode-owned; 0 after 30 s without a decode report"),
    _g("cache_hit_rate", "cache_hit_rate", note="prefill-owned; a decode report never resets it"),
    _g("decode_sum_seq_lens", "decode_sum_seq_lens"),
    _g("token_usage", "token_usage", "pool"),
    _g("full_token_usage", "full_token_usage", "pool"),
    _g("swa_token_usage", "swa_token_usage", "pool"),
    _g("mamba_usage", "mamba_usage", "pool"),
    _g("num_used_tokens", "num_used_tokens", "pool"),
    _g("kv_available_tokens", "kv_available_tokens", "pool"),
    _g("kv_evictable_tokens", "kv_evictable_tokens", "pool"),
    _g("kv_used_tokens", "kv_used_tokens", "pool"),
    _g("swa_available_tokens", "swa_available_tokens", "pool"),
    _g("swa_evictable_tokens", "swa_evictable_tokens", "pool"),
    _g("swa_used_tokens", "swa_used_tokens", "pool"),
    _g("mamba_available_tokens", "mamba_available_tokens", "pool"),
    _g("mamba_evictable_tokens", "mamba_evictable_tokens", "pool"),
    _g("mamba_used_tokens", "mamba_used_tokens", "pool"),
    _g("spec_accept_length", "spec_accept_length", "spec"),
    _g("spec_accept_rate", "spec_accept_rate", "spec"),
    _g("spec_cap_length", "spec_cap_length", "spec"),
    _g("spec_block_accept_length", "spec_block_accept_length", "spec"),
    _g("spec_num_steps", "spec_num_steps", "spec"),
    _g("spec_num_draft_tokens", "spec_num_draft_tokens", "spec"),
    _g("num_retracted_reqs", "num_retracted_reqs", "retract", mode="all",
       note="no multiprocess_mode in SGLang: one series per process with a pid label"),
    _g("num_paused_reqs", "num_paused_reqs", "retract", mode="all",
       note="no multiprocess_mode in SGLang: one series per process with a pid label"),
    _g("num_prefill_bootstrap_queue_reqs", "num_prefill_bootstrap_queue_reqs (QueueCount)", "pd"),
    _g("num_prefill_inflight_queue_reqs", "num_prefill_inflight_queue_reqs (QueueCount)", "pd"),
    _g("num_decode_prealloc_queue_reqs", "num_decode_prealloc_queue_reqs (QueueCount)", "pd"),
    _g("num_decode_transfer_queue_reqs", "num_decode_transfer_queue_reqs (QueueCount)", "pd"),
    _g("pending_prealloc_token_usage", "pending_prealloc_token_usage", "pd"),
    _g("num_decode_deferred_kv_release_reqs", "num_decode_deferred_kv_release_reqs", "pd", note="article addition"),
    _g("utilization", "utilization", note="-1 on a PD prefill node"),
    _g("fwd_occupancy", "fwd_occupancy", note="NaN unless the device timer is on"),
    _g("new_token_ratio", "new_token_ratio"),
    _g("is_cuda_graph", "is_cuda_graph"),
    _g("lora_pool_slots_used", "lora_pool_slots_used", "lora", note="only with enable_lora"),
    _g("lora_pool_slots_total", "lora_pool_slots_total", "lora", note="only with enable_lora"),
    _g("lora_pool_utilization", "lora_pool_utilization", "lora", note="only with enable_lora"),
    _g("hicache_host_used_tokens", "hicache_host_used_tokens", "hicache", note="only with hierarchical cache"),
    _g("hicache_host_total_tokens", "hicache_host_total_tokens", "hicache", note="only with hierarchical cache"),
    _g("num_streaming_sessions", "num_streaming_sessions", "session", note="only with streaming sessions"),
    _g("streaming_session_held_tokens", "streaming_session_held_tokens", "session",
       note="only with streaming sessions"),
    _g("num_unique_running_routing_keys", "num_unique_running_routing_keys", "routing"),
    Family("sglang:routing_key_running_req_count", "gaugehistogram", "mostrecent", S, ("gt", "le"),
           _fmt(ROUTING_KEY_REQ_COUNT), "SchedulerStats.routing_key_running_req_counts", "routing",
           "SGLang's GaugeHistogram: a gauge per bin, gt < count <= le"),
    Family("sglang:routing_key_all_req_count", "gaugehistogram", "mostrecent", S, ("gt", "le"),
           _fmt(ROUTING_KEY_REQ_COUNT), "SchedulerStats.routing_key_all_req_counts", "routing",
           "SGLang's GaugeHistogram: a gauge per bin, gt < count <= le"),
]


def _c(name, labels, source, group="scheduler", base=S, note=""):
    return Family(f"sglang:{name}", "counter", "", base, tuple(labels), "", source, group, note)


def _h(name, labels, buckets, source, group="scheduler", base=S, note=""):
    text = buckets if isinstance(buckets, str) else _fmt(buckets)
    return Family(f"sglang:{name}", "histogram", "", base, tuple(labels), text, source, group, note)


def _sg(name, labels, source, group="scheduler", base=S, mode="mostrecent", note=""):
    return Family(f"sglang:{name}", "gauge", mode, base, tuple(labels), "", source, group, note)


_SCHEDULER_SERIES = [
    _sg("weight_load_duration_seconds", ["source"], "observe_weight_load(duration_seconds, source)"),
    _c("num_retracted_reqs_total", [], "increment_retracted_reqs(num_retracted_reqs, ...)", "retract",
       note="the article's name; older SGLang: num_retracted_requests_total"),
    _c("num_retracted_input_tokens_total", [], "increment_retracted_reqs(..., num_retracted_input_tokens, ...)",
       "retract"),
    _c("num_retracted_output_tokens_total", [], "increment_retracted_reqs(..., num_retracted_output_tokens)",
       "retract"),
    _h("kv_transfer_speed_gb_s", [], KV_TRANSFER_SPEED_GB_S, "observe_kv_transfer_metrics(speed_gb_s=)", "pd",
       note="a histogram now; older SGLang: a mostrecent gauge"),
    _h("kv_transfer_latency_ms", [], KV_TRANSFER_LATENCY_MS, "observe_kv_transfer_metrics(latency_ms=)", "pd",
       note="a histogram now; older SGLang: a mostrecent gauge"),
    _h("kv_transfer_bootstrap_ms", [], KV_TRANSFER_BOOTSTRAP_MS, "observe_kv_transfer_bootstrap(bootstrap_ms=)", "pd"),
    _h("kv_transfer_alloc_ms", [], KV_TRANSFER_ALLOC_MS, "observe_kv_transfer_bootstrap(alloc_ms=)", "pd"),
    _h("kv_transfer_total_mb", [], KV_TRANSFER_TOTAL_MB, "observe_kv_transfer_metrics(total_mb=)", "pd"),
    _c("num_bootstrap_failed_reqs_total", [], "increment_bootstrap_failed_reqs()", "pd"),
    _c("num_transfer_failed_reqs_total", [], "increment_transfer_failed_reqs()", "pd"),
    _c("num_prefill_retries_total", [], "increment_prefill_retries(count)", "pd"),
    _c("kv_transfer_timeouts_total", ["stage"], "increment_kv_transfer_timeouts(stage); bootstrap and transfer "
       "pre-seeded at 0", "pd", base=NONE),
    _c("cuda_graph_passes_total", ["mode"], "increment_{decode,prefill}_cuda_graph_pass(value)"),
    _h("queue_time_seconds", [], QUEUE_TIME, "observe_queue_time(latency)"),
    _h("per_stage_req_latency_seconds", ["stage"], "exponential_buckets(0.001, 1.62, 30)",
       "observe_per_stage_req_latency(stage, latency)"),
    _h("grammar_compilation_time_seconds", [], GRAMMAR_COMPILATION_TIME, "log_grammar_stats: compilation_time",
       "grammar"),
    _c("num_grammar_cache_hit_total", [], "log_grammar_stats: is_cache_hit", "grammar"),
    _c("num_grammar_aborted_total", [], "log_grammar_stats: is_grammar_aborted", "grammar"),
    _c("num_grammar_timeout_total", [], "log_grammar_stats: num_timeout", "grammar"),
    _c("num_grammar_total", [], "log_grammar_stats: one per call", "grammar"),
    _h("grammar_schema_count", [], GRAMMAR_SCHEMA_COUNT, "log_grammar_stats: schema_count", "grammar"),
    _h("grammar_ebnf_size", [], GRAMMAR_EBNF_SIZE, "log_grammar_stats: ebnf_size", "grammar"),
    _h("grammar_tree_traversal_time_avg", [], GRAMMAR_TREE_TRAVERSAL_TIME,
       "log_grammar_stats: mean of tree_traversal_time", "grammar"),
    _h("grammar_tree_traversal_time_max", [], GRAMMAR_TREE_TRAVERSAL_TIME,
       "log_grammar_stats: max of tree_traversal_time", "grammar"),
    Family("sglang:eplb_balancedness", "summary", "", S, ("forward_mode",), "",
           "increment_eplb_balancedness(forward_mode, balancedness)", "eplb",
           "only where moe_ep_rank is 0 and the balancedness export is on; count and sum, as multiprocess"),
    _h("eplb_gpu_physical_count", ["layer"], "range(ep_size)", "ExpertDispatchCollector.eplb_gpu_physical_count",
       "eplb", base=NONE),
    _c("realtime_tokens_total", ["mode"], "increment_realtime_tokens(...): prefill_compute, prefill_cache, decode"),
    _c("prefill_effective_tokens_total", ["mode"], "increment_effective_prefill_tokens(...); input, device_hit, "
       "host_hit, storage_hit pre-seeded at 0"),
    _c("forward_execution_seconds_total", ["category"], "increment_forward_execution_seconds(category, t)"),
    _c("estimated_flops_per_gpu_total", [], "increment_estimated_perf(num_flops_per_gpu=)", "mfu"),
    _c("estimated_read_bytes_per_gpu_total", [], "increment_estimated_perf(num_read_bytes_per_gpu=)", "mfu"),
    _c("estimated_write_bytes_per_gpu_total", [], "increment_estimated_perf(num_write_bytes_per_gpu=)", "mfu"),
    _c("dp_cooperation_realtime_tokens_total", ["mode", "num_prefill_ranks"],
       "increment_realtime_tokens(dp_cooperation_info, ...)", "dp"),
    _c("dp_cooperation_forward_execution_seconds_total", ["category", "num_prefill_ranks"],
       "increment_forward_execution_seconds(category, t, dp_cooperation_info)", "dp"),
    _c("dp_attention_tokens_total", ["kind"], "observe_dp_balance(DPBalanceStats): scheduled, imbalance", "dp",
       note="article addition"),
    _c("dp_attention_pairs_total", ["kind"], "observe_dp_balance(DPBalanceStats): scheduled, imbalance", "dp",
       note="article addition"),
    _c("dp_attention_steps_total", ["rank_state"], "observe_dp_balance(DPBalanceStats): active, idle", "dp",
       note="article addition"),
    _h("dp_attention_token_imbalance_ratio", [], DP_ATTENTION_TOKEN_IMBALANCE_RATIO,
       "observe_dp_balance: max_over_mean", "dp",
       note="article addition; only attn_dp 0 / attn_tp 0 / attn_cp 0 observes; buckets are ours"),
    _h("dp_attention_sync_wait_seconds", [], DP_ATTENTION_SYNC_WAIT_SECONDS, "observe_dp_balance: sync_wait_seconds",
       "dp", note="article addition"),
    _c("scheduler_idle_seconds_total", [], "increment_scheduler_idle_seconds(seconds)", "loop",
       note="article addition"),
    _c("scheduler_stage_seconds_total", ["category"], "increment_scheduler_stage_seconds(category, seconds)", "loop",
       note="article addition"),
    _c("scheduler_iterations_total", [], "increment_scheduler_iterations()", "loop",
       note="article addition; the article names the call, the family name is ours"),
    _h("prefill_delayer_wait_forward_passes", [], "configured or 5,20,50,100,200 below max_delay, plus 0 and "
       "max_delay-1", "observe_prefill_delayer_outcome(forward_passes) when allowed and executed",
       "prefill_delayer"),
    _h("prefill_delayer_wait_seconds", [], "configured or 1,2,5,10,20,50,100,200,500, plus 0",
       "observe_prefill_delayer_outcome(wait_seconds) when allowed and executed", "prefill_delayer"),
    _c("prefill_delayer_outcomes_total", ["input_estimation", "output_allow", "output_reason", "actual_execution"],
       "observe_prefill_delayer_outcome(...); booleans as true/false", "prefill_delayer"),
    _sg("max_total_num_tokens", [], "emit_constants(max_total_num_tokens)", "constant"),
    _sg("max_total_num_tokens_swa", [], "emit_constants(max_total_num_tokens_swa) when not None", "constant"),
    _sg("weight_memory_usage_gb", [], "emit_constants(weight_memory_usage_gb)", "constant"),
    _sg("kv_cache_memory_usage_gb", [], "emit_constants(kv_cache_memory_usage_gb)", "constant"),
    _sg("graph_memory_usage_gb", ["phase"], "emit_constants(graph_memory_usage_gb={phase: GB})", "constant"),
    _sg("max_running_requests_under_SLO", [], "emit_constants(max_running_requests_under_SLO) when not None",
        "constant"),
    _sg("page_size", [], "emit_constants(page_size)", "constant"),
    _sg("num_pages", [], "emit_constants(num_pages)", "constant"),
    _sg("context_len", [], "emit_constants(context_len)", "constant"),
    _sg("startup_available_gpu_memory_gb", [], "emit_constants(startup_available_gpu_memory_gb)", "constant"),
]

_RADIX = [
    _h("eviction_duration_seconds", [], EVICTION_DURATION, "observe_eviction_duration(duration_seconds)", "radix",
       note="the article's buckets (1.0 s ceiling); env SGLANG_BUCKET_EVICTION_DURATION overrides"),
    _c("evicted_tokens_total", [], "increment_eviction_num_tokens(num_tokens)", "radix"),
    _h("load_back_duration_seconds", [], LOAD_BACK_DURATION, "observe_load_back_duration(duration_seconds)", "radix",
       note="env SGLANG_BUCKET_LOAD_BACK_DURATION overrides"),
    _c("load_back_tokens_total", ["pool"], "increment_load_back_num_tokens(num_tokens, pool)", "radix"),
    _h("hicache_backup_duration_seconds", [], HICACHE_BACKUP_DURATION, "observe_backup_duration(duration_seconds)",
       "radix"),
    _c("hicache_backup_bytes_total", [], "increment_backup_num_bytes(num_bytes)", "radix"),
    _c("load_back_bytes_total", [], "increment_load_back_num_bytes(num_bytes)", "radix"),
    _c("hicache_backup_tokens_total", ["pool"], "increment_backup_num_tokens(num_tokens, pool)", "radix"),
    _c("hicache_dropped_tokens_total", ["reason", "pool"], "increment_dropped_tokens(num_tokens, reason, pool)",
       "radix"),
]

_STORAGE = [
    _c("hicache_prefetch_outcomes_total", ["outcome"], "log_prefetch_outcomes(prefetch_stats): cumulative snapshots "
       "become increments, a lower snapshot starts a new epoch", "hicache_storage"),
    _c("prefetched_tokens_total", [], "log_prefetched_tokens(n)", "hicache_storage"),
    _c("backuped_tokens_total", [], "log_backuped_tokens(n)", "hicache_storage"),
    _c("hicache_backup_dropped_tokens_total", [], "log_backup_dropped_tokens(n)", "hicache_storage"),
    _c("hicache_prefetch_aux_alloc_failed_tokens_total", [], "log_prefetch_aux_alloc_failed_tokens(n)",
       "hicache_storage"),
    _c("storage_prefetch_hit_tokens_total", [], "log_prefetch_hit_tokens(n)", "hicache_storage",
       note="article addition"),
    _c("storage_prefetch_unfulfilled_tokens_total", [], "log_prefetch_unfulfilled_tokens(n)", "hicache_storage",
       note="article addition"),
    _c("storage_prefetch_deferred_tokens_total", [], "log_prefetch_deferred_tokens(n)", "hicache_storage",
       note="article addition"),
    _h("prefetch_pgs", [], STORAGE_PAGES, "log_storage_metrics(StorageMetrics.prefetch_pgs)", "hicache_storage"),
    _h("backup_pgs", [], STORAGE_PAGES, "log_storage_metrics(StorageMetrics.backup_pgs)", "hicache_storage"),
    _h("prefetch_bandwidth", [], STORAGE_BANDWIDTH, "log_storage_metrics(StorageMetrics.prefetch_bandwidth)",
       "hicache_storage"),
    _h("backup_bandwidth", [], STORAGE_BANDWIDTH, "log_storage_metrics(StorageMetrics.backup_bandwidth)",
       "hicache_storage"),
]

_TOKENIZER = [
    _sg("startup_time_seconds", ["phase"], "emit_startup_time: load_weight, kv_cache_allocation, scheduler_e2e, "
        "tokenizer_e2e", "tokenizer", base=T),
    _sg("startup_cuda_graph_time_seconds", ["phase"], "emit_startup_time: startup_time['cuda_graph']", "tokenizer",
        base=T),
    _c("prompt_tokens_total", ["is_streaming"], "observe_one_finished_request(prompt_tokens)", "tokenizer", base=T),
    _c("generation_tokens_total", ["is_streaming"], "observe_one_finished_request(generation_tokens)", "tokenizer",
       base=T),
    _c("spec_verify_calls_total", [], "observe_one_finished_request(spec_verify_ct) when > 0", "tokenizer", base=T),
    _h("prompt_tokens_histogram", [], "generate_buckets(prompt_tokens_buckets, " + _fmt(PROMPT_TOKENS) + ")",
       "observe_one_finished_request(prompt_tokens)", "tokenizer", base=T),
    _h("uncached_prompt_tokens_histogram", [], "generate_buckets(prompt_tokens_buckets, default as above)",
       "observe_one_finished_request(prompt_tokens - cached_tokens)", "tokenizer", base=T),
    _h("generation_tokens_histogram", [], "generate_buckets(generation_tokens_buckets, default as above)",
       "observe_one_finished_request(generation_tokens)", "tokenizer", base=T),
    _c("cached_tokens_total", ["cache_source"], "observe_one_finished_request: device, host, storage_<backend> "
       "when > 0; total without details", "tokenizer", base=T),
    _c("num_requests_total", ["is_streaming"], "observe_one_finished_request", "tokenizer", base=T),
    _h("get_loads_duration_seconds", [], GET_LOADS_DURATION, "observe_get_loads_duration(seconds)", "tokenizer",
       base=T),
    _c("num_so_requests_total", [], "observe_one_finished_request(has_grammar)", "tokenizer", base=T),
    _c("num_aborted_requests_total", [], "observe_one_aborted_request", "tokenizer", base=T),
    _h("time_to_first_token_seconds", ["is_streaming"], TIME_TO_FIRST_TOKEN,
       "observe_time_to_first_token(value, stream=); never for aborts or on a PD prefill node", "tokenizer", base=T,
       note="bucket_time_to_first_token overrides"),
    _h("inter_token_latency_seconds", [], INTER_TOKEN_LATENCY,
       "observe_inter_token_latency(interval, n): n samples of interval/n, sum += interval", "tokenizer", base=T,
       note="bucket_inter_token_latency overrides"),
    _h("e2e_request_latency_seconds", ["is_streaming"], E2E_REQUEST_LATENCY,
       "observe_one_finished_request(e2e_latency)", "tokenizer", base=T, note="bucket_e2e_request_latency overrides"),
    _h("request_time_per_output_token_seconds", [], TIME_PER_OUTPUT_TOKEN,
       "observe_time_per_output_token(value): decode latency / (completion_tokens - 1); none for 0 or 1 token "
       "or aborts", "tokenizer", base=T, note="article addition; buckets are ours (ITL's)"),
]

_FRONTEND = [
    _c("http_requests_total", ["endpoint", "method"], "HttpMetrics.request_started", "http", base=NONE,
       note="article addition"),
    _c("http_responses_total", ["endpoint", "status_code", "method"], "HttpMetrics.request_finished", "http",
       base=NONE),
    _sg("http_requests_active", ["endpoint", "method"], "HttpMetrics: in progress", "http", base=NONE, mode="livesum",
        note="article addition; summed over live front-end processes"),
    _sg("routing_keys_active", [], "HttpMetrics: keys with a request in progress (reference counted)", "http",
        base=NONE, mode="livesum", note="article addition"),
    _h("func_latency_seconds", ["name"], "exponential_buckets(0.05, 1.5, 18)", "time_func_latency decorator", "http",
       base=NONE, note="article addition"),
]

FAMILIES: Tuple[Family, ...] = tuple(_SNAPSHOT + _SCHEDULER_SERIES + _RADIX + _STORAGE + _TOKENIZER + _FRONTEND)
BY_NAME = {f.name: f for f in FAMILIES}


def base_label_names(base: str, *, priority: bool, dp_rank: bool, extra: Sequence[str] = ()) -> List[str]:
    if base == S:
        names = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        if priority:
            names.append("priority")
        if dp_rank:
            names.append("dp_rank")
        return names + list(extra)
    if base == T:
        return ["model_name", "engine_type"] + (["priority"] if priority else []) + list(extra)
    return []


def markdown_table() -> str:
    """docs/metrics.md's table, one row per family."""
    rows = ["| name | type | mode | labels | buckets | source | notes |", "|---|---|---|---|---|---|---|"]
    for f in FAMILIES:
        labels = ", ".join(([f.base] if f.base else []) + list(f.labels)) or "(none)"
        rows.append(f"| `{f.name}` | {f.type} | {f.mode or '-'} | {labels} | {f.buckets or '-'} | {f.source} | "
                    f"{f.note or '-'} |")
    return "\n".join(rows) + "\n"
