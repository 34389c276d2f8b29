"""Drop-in replacements for SGLang's metric collectors, writing to rankstat segments instead of
prometheus_client multiprocess files. Same class roles, method names and arguments; they accept
SGLang's stats objects or plain objects with the same attribute names (rankstat.sglang.stats).

Inject them through SGLang's ServerArgs.stat_loggers (see docs/sglang.md):

    from rankstat.sglang import stat_loggers
    server_args.stat_loggers = stat_loggers()

Semantics kept from SGLang: the priority="" total plus sticky per-priority series; series appear on
first use (a counter that never moved is absent, a mostrecent gauge that was never set is absent);
num_retracted_reqs / num_paused_reqs per process with a pid label; ITL bulk observe; bucket rules and
the env overrides. Ownership rules (cache_hit_rate prefill-owned, gen_throughput decode-owned with the
30 s decay) are applied by rankstatd from the report kind: log_prefill_stats / log_decode_stats /
log_idle_stats say it, as does a `report_kind` argument or attribute; otherwise log_stats takes it from
the name of its caller (SGLang's report_prefill_stats, report_decode_stats, _maybe_log_idle_metrics), and
a call from anywhere else is taken as given.
"""

from __future__ import annotations

import bisect
import operator
import sys
import threading
import time
from collections import namedtuple
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import _native as n
from ..buckets import buckets_or_rule, generate_buckets, histogram_conf_from_env
from ..reporter import Reporter
from . import catalog as cat
from .segments import current_scheduler_segment, scheduler_segment, tokenizer_segment
from .stats import DPBalanceStats, DPCooperationInfo

_QUEUES = {
    "num_running_reqs": n.QUEUE_RUNNING,
    "num_queue_reqs": n.QUEUE_WAITING,
    "num_prefill_bootstrap_queue_reqs": n.QUEUE_PREFILL_BOOTSTRAP,
    "num_prefill_inflight_queue_reqs": n.QUEUE_PREFILL_INFLIGHT,
    "num_decode_prealloc_queue_reqs": n.QUEUE_DECODE_PREALLOC,
    "num_decode_transfer_queue_reqs": n.QUEUE_DECODE_TRANSFER,
}

_KINDS = {
    None: n.REPORT_UNSPECIFIED, "": n.REPORT_UNSPECIFIED, "unspecified": n.REPORT_UNSPECIFIED,
    "prefill": n.REPORT_PREFILL, "decode": n.REPORT_DECODE, "idle": n.REPORT_IDLE,
    n.REPORT_UNSPECIFIED: n.REPORT_UNSPECIFIED, n.REPORT_PREFILL: n.REPORT_PREFILL,
    n.REPORT_DECODE: n.REPORT_DECODE, n.REPORT_IDLE: n.REPORT_IDLE,
}

SchedulerMetricsCollectorContext = namedtuple(
    "SchedulerMetricsCollectorContext",
    "enable_metrics is_stats_logging_rank current_scheduler_metrics_enabled enable_kv_cache_events collector")


def _kind_from_caller(function_name: str) -> Optional[str]:
    """SGLang's reporter calls log_stats from report_prefill_stats, report_decode_stats and the idle
    refresh (_maybe_log_idle_metrics): the caller's name says which report this is."""
    if "idle" in function_name:
        return "idle"
    if "prefill" in function_name:
        return "prefill"
    if "decode" in function_name:
        return "decode"
    return None


def _engine_type(disaggregation_mode: Any) -> str:
    text = str(getattr(disaggregation_mode, "value", disaggregation_mode) or "null").lower()
    return {"null": "unified", "none": "unified", "prefill": "prefill", "decode": "decode"}.get(text, text)


def _str(value: Any) -> str:
    return str(value)


class _Batches(threading.local):
    """One UpdateBatch per thread (SGLang's overlap scheduler reports from more than one thread)."""

    def __init__(self, reporter: Reporter):
        self.batch = reporter.batch()


class _Series:
    """Lazily registered series of one collector, keyed by family and own labels."""

    __slots__ = ("_r", "_ids")

    def __init__(self, reporter: Reporter):
        self._r = reporter
        self._ids: Dict[Tuple, int] = {}

    def id(self, kind: str, family: str, labels: Tuple[Tuple[str, str], ...] = (), buckets: Sequence[float] = (),
           mode: str = "mostrecent", identity: bool = True) -> int:
        key = (family, labels)
        found = self._ids.get(key)
        if found is None:
            found = self._r.register(kind, family, labels, buckets=buckets, mode=mode, identity_labels=identity)
            self._ids[key] = found
        return found


class SchedulerMetricsCollector:
    """Stands in for sglang.srt.observability.metrics_collector.SchedulerMetricsCollector."""

    def __init__(self, labels: Mapping[str, Any], server_args: Any = None, enable_lora: bool = False,
                 enable_hierarchical_cache: bool = False, enable_streaming_session: bool = False, *,
                 reporter: Optional[Reporter] = None, enable_expert_balancedness: Optional[bool] = None,
                 prefill_delayer_max_delay_passes: Optional[int] = None,
                 prefill_delayer_forward_passes_buckets: Optional[Sequence[int]] = None,
                 prefill_delayer_wait_seconds_buckets: Optional[Sequence[float]] = None,
                 **rankstat_options: Any):
        self.labels = dict(labels)
        self.server_args = server_args
        self.enable_lora = enable_lora
        self.enable_hierarchical_cache = enable_hierarchical_cache
        self.enable_streaming_session = enable_streaming_session
        self.last_log_time = time.perf_counter()
        self._known_priorities: set = set()
        self.reporter = reporter or scheduler_segment(self.labels, server_args, **rankstat_options)
        self._series = _Series(self.reporter)
        self._packer = self.reporter.snapshot_packer()
        self._batches = _Batches(self.reporter)
        self._getters: Dict[type, Tuple[Callable[[Any], Tuple], Tuple[int, ...]]] = {}
        self._groups = (n.GROUP_SPECULATIVE | n.GROUP_ROUTING_KEYS | n.GROUP_DISAGGREGATION
                        | (n.GROUP_LORA if enable_lora else 0)
                        | (n.GROUP_HICACHE if enable_hierarchical_cache else 0)
                        | (n.GROUP_STREAMING_SESSIONS if enable_streaming_session else 0))
        names = self._packer.field_names
        self._queue_positions = tuple((i, _QUEUES[name]) for i, name in enumerate(names) if name in _QUEUES)
        attn = getattr(self.reporter, "attention", (0, 0, 0))
        # SGLang: only attn_dp 0 / attn_tp 0 / attn_cp 0 observes the engine-wide imbalance ratio.
        self.reports_dp_token_imbalance_ratio = attn == (0, 0, 0)
        if enable_expert_balancedness is None:
            should = getattr(server_args, "should_export_expert_balancedness_to_prometheus", None)
            enable_expert_balancedness = bool(should()) if callable(should) else False
        self._eplb = str(self.labels.get("moe_ep_rank", 0)) == "0" and enable_expert_balancedness
        max_delay = (prefill_delayer_max_delay_passes
                     or getattr(server_args, "prefill_delayer_max_delay_passes", None) or 30)
        self._delayer_passes_buckets = cat.prefill_delayer_forward_passes_buckets(
            int(max_delay), prefill_delayer_forward_passes_buckets
            or getattr(server_args, "prefill_delayer_forward_passes_buckets", None))
        self._delayer_seconds_buckets = cat.prefill_delayer_wait_seconds_buckets(
            prefill_delayer_wait_seconds_buckets or getattr(server_args, "prefill_delayer_wait_seconds_buckets", None))
        # Pre-seeded at 0 as in SGLang, so ratio panels have every operand from the start.
        for mode in ("input", "device_hit", "host_hit", "storage_hit"):
            self._series.id("counter", "sglang:prefill_effective_tokens_total", (("mode", mode),))
        if str(self.labels.get("engine_type", "unified")) in ("prefill", "decode"):
            for stage in ("bootstrap", "transfer"):
                self._series.id("counter", "sglang:kv_transfer_timeouts_total", (("stage", stage),), identity=False)

    @classmethod
    def init_new(cls, *, server_args: Any, ps: Any, tp_rank: int, pp_rank: int, dp_rank: Optional[int],
                 enable_priority_scheduling: bool, enable_lora: bool, enable_hierarchical_cache: bool,
                 enable_metrics: Optional[bool] = None, **rankstat_options: Any) -> SchedulerMetricsCollectorContext:
        """SGLang's init_new: the labels and the stats-logging-rank decision, from server_args and the
        parallel state `ps` (attn_tp_rank, attn_cp_rank, moe_ep_rank, pp_rank)."""
        enable = bool(getattr(server_args, "enable_metrics", True) if enable_metrics is None else enable_metrics)
        attn_tp = getattr(ps, "attn_tp_rank", tp_rank)
        attn_cp = getattr(ps, "attn_cp_rank", 0) or 0
        is_logging = attn_tp == 0 and attn_cp == 0
        all_schedulers = bool(getattr(server_args, "enable_metrics_for_all_schedulers", False))
        collector = None
        if enable:
            labels: Dict[str, Any] = {
                "model_name": getattr(server_args, "served_model_name", ""),
                "engine_type": _engine_type(getattr(server_args, "disaggregation_mode", None)),
                "tp_rank": tp_rank,
                "pp_rank": pp_rank,
                "moe_ep_rank": getattr(ps, "moe_ep_rank", 0),
            }
            if enable_priority_scheduling:
                labels["priority"] = ""
            if dp_rank is not None:
                labels["dp_rank"] = dp_rank
            labels.update(getattr(server_args, "extra_metric_labels", None) or {})
            rankstat_options.setdefault("attn_tp_rank", attn_tp)
            rankstat_options.setdefault("attn_cp_rank", attn_cp)
            if getattr(ps, "attn_dp_rank", None) is not None:
                rankstat_options.setdefault("attn_dp_rank", ps.attn_dp_rank)
            collector = cls(labels, server_args=server_args, enable_lora=enable_lora,
                            enable_hierarchical_cache=enable_hierarchical_cache,
                            enable_streaming_session=bool(getattr(server_args, "enable_streaming_session", False)),
                            **rankstat_options)
        kv_events = bool(getattr(server_args, "kv_events_config", None)) and pp_rank == 0 and is_logging
        return SchedulerMetricsCollectorContext(enable, is_logging, enable and (is_logging or all_schedulers),
                                                kv_events, collector)

    # --- the snapshot ----------------------------------------------------------------------------------

    def _getter(self, stats: Any):
        cls = type(stats)
        found = self._getters.get(cls)
        if found is None:
            names = self._packer.field_names
            present = tuple(i for i, name in enumerate(names) if hasattr(stats, name))
            fetch = operator.attrgetter(*(names[i] for i in present)) if present else (lambda s: ())
            if len(present) == 1:
                single = fetch
                fetch = lambda s: (single(s),)  # noqa: E731
            found = (fetch, present, len(present) == len(names))
            self._getters[cls] = found
        return found

    def log_stats(self, stats: Any, report_kind: Any = None) -> None:
        """Publishes one SchedulerStats as one record (one C call)."""
        packer = self._packer
        fetch, present, complete = self._getter(stats)
        if complete:
            values: List[Any] = list(fetch(stats))
        else:  # an older or partial stats object: missing fields report 0
            values = [0] * len(packer.field_names)
            for pos, value in zip(present, fetch(stats)):
                values[pos] = value
        known = self._known_priorities
        for pos, queue in self._queue_positions:
            value = values[pos]
            if value.__class__ is int or value.__class__ is float:
                continue
            total = getattr(value, "total", value)
            by_priority = getattr(value, "by_priority", None)
            values[pos] = total
            if by_priority is not None:
                # SGLang's sticky set, shared by every queue: a priority once seen is exported (as 0 when
                # absent) from then on.
                known.update(by_priority.keys())
                for priority in known:
                    packer.add_entry(queue, priority, by_priority.get(priority, 0))
        if report_kind is None:
            report_kind = getattr(stats, "report_kind", None)
            if report_kind is None:
                report_kind = _kind_from_caller(sys._getframe(1).f_code.co_name)
        running = getattr(stats, "routing_key_running_req_counts", None)
        every = getattr(stats, "routing_key_all_req_counts", None)
        packer.send(values, kind=_KINDS.get(report_kind, n.REPORT_UNSPECIFIED), groups=self._groups,
                    running_bins=packer.bins(running) if running else None,
                    all_bins=packer.bins(every) if every else None)
        self.last_log_time = time.perf_counter()

    def log_prefill_stats(self, stats: Any) -> None:
        """A report after a prefill batch: it owns cache_hit_rate."""
        self.log_stats(stats, "prefill")

    def log_decode_stats(self, stats: Any) -> None:
        """A report every decode_log_interval decode steps: it owns gen_throughput."""
        self.log_stats(stats, "decode")

    def log_idle_stats(self, stats: Any) -> None:
        """The idle refresh (no batch for 30 s): gen_throughput falls to 0."""
        self.log_stats(stats, "idle")

    # --- helpers ---------------------------------------------------------------------------------------

    def _inc(self, family: str, amount: float, labels: Tuple = ()) -> None:
        self.reporter.add(self._series.id("counter", family, labels), amount)

    def _observe(self, family: str, value: float, buckets: Sequence[float], labels: Tuple = ()) -> None:
        self.reporter.observe(self._series.id("histogram", family, labels, buckets), value)

    def _set(self, family: str, value: float, labels: Tuple = ()) -> None:
        self.reporter.set(self._series.id("gauge", family, labels), value)

    # --- SGLang's entry points -------------------------------------------------------------------------

    def increment_bootstrap_failed_reqs(self) -> None:
        self._inc("sglang:num_bootstrap_failed_reqs_total", 1)

    def increment_transfer_failed_reqs(self) -> None:
        self._inc("sglang:num_transfer_failed_reqs_total", 1)

    def increment_prefill_retries(self, count: int) -> None:
        if count > 0:
            self._inc("sglang:num_prefill_retries_total", count)

    def increment_kv_transfer_timeouts(self, stage: str, count: int = 1) -> None:
        """kv_transfer_timeouts_total{stage}: the family carries no rank labels (SGLang's process-local
        counter)."""
        self.reporter.add(self._series.id("counter", "sglang:kv_transfer_timeouts_total", (("stage", stage),),
                                          identity=False), count)

    def observe_kv_transfer_metrics(self, latency_ms: float, total_mb: float, speed_gb_s: float) -> None:
        s, b = self._series, self._batches.batch
        b.observe(s.id("histogram", "sglang:kv_transfer_latency_ms", (), cat.KV_TRANSFER_LATENCY_MS), latency_ms)
        b.observe(s.id("histogram", "sglang:kv_transfer_total_mb", (), cat.KV_TRANSFER_TOTAL_MB), total_mb)
        b.observe(s.id("histogram", "sglang:kv_transfer_speed_gb_s", (), cat.KV_TRANSFER_SPEED_GB_S), speed_gb_s)
        b.flush()

    def observe_kv_transfer_bootstrap(self, bootstrap_ms: float, alloc_ms: float) -> None:
        s, b = self._series, self._batches.batch
        b.observe(s.id("histogram", "sglang:kv_transfer_bootstrap_ms", (), cat.KV_TRANSFER_BOOTSTRAP_MS), bootstrap_ms)
        b.observe(s.id("histogram", "sglang:kv_transfer_alloc_ms", (), cat.KV_TRANSFER_ALLOC_MS), alloc_ms)
        b.flush()

    def observe_per_stage_req_latency(self, stage: str, latency: float) -> None:
        self._observe("sglang:per_stage_req_latency_seconds", latency, cat.PER_STAGE_REQ_LATENCY, (("stage", stage),))

    def observe_queue_time(self, latency: float) -> None:
        self._observe("sglang:queue_time_seconds", latency, cat.QUEUE_TIME)

    def observe_weight_load(self, duration_seconds: float, source: str) -> None:
        self._set("sglang:weight_load_duration_seconds", duration_seconds, (("source", source),))

    def observe_prefill_delayer_outcome(self, forward_passes: int, wait_seconds: float, input_estimation: str,
                                        output_allow: bool, output_reason: str, actual_execution: bool) -> None:
        s, b = self._series, self._batches.batch
        if output_allow and actual_execution:
            b.observe(s.id("histogram", "sglang:prefill_delayer_wait_forward_passes", (),
                           self._delayer_passes_buckets), forward_passes)
            b.observe(s.id("histogram", "sglang:prefill_delayer_wait_seconds", (), self._delayer_seconds_buckets),
                      wait_seconds)
        labels = (("input_estimation", str(input_estimation)), ("output_allow", str(bool(output_allow)).lower()),
                  ("output_reason", str(output_reason)), ("actual_execution", str(bool(actual_execution)).lower()))
        b.add(s.id("counter", "sglang:prefill_delayer_outcomes_total", labels), 1)
        b.flush()

    def increment_retracted_reqs(self, num_retracted_reqs: int, num_retracted_input_tokens: int,
                                 num_retracted_output_tokens: int) -> None:
        s, b = self._series, self._batches.batch
        b.add(s.id("counter", "sglang:num_retracted_reqs_total"), num_retracted_reqs)
        b.add(s.id("counter", "sglang:num_retracted_input_tokens_total"), num_retracted_input_tokens)
        b.add(s.id("counter", "sglang:num_retracted_output_tokens_total"), num_retracted_output_tokens)
        b.flush()

    def increment_decode_cuda_graph_pass(self, value: bool) -> None:
        self._inc("sglang:cuda_graph_passes_total", 1, (("mode", "decode_cuda_graph" if value else "decode_none"),))

    def increment_prefill_cuda_graph_pass(self, value: bool) -> None:
        self._inc("sglang:cuda_graph_passes_total", 1, (("mode", "prefill_cuda_graph" if value else "prefill_none"),))

    def increment_eplb_balancedness(self, forward_mode: str, balancedness: float) -> None:
        if self._eplb:
            self.reporter.observe(self._series.id("summary", "sglang:eplb_balancedness",
                                                  (("forward_mode", str(forward_mode)),)), balancedness)

    def increment_realtime_tokens(self, dp_cooperation_info: Optional[DPCooperationInfo] = None,
                                  prefill_compute_tokens: int = 0, prefill_cache_tokens: int = 0,
                                  decode_tokens: int = 0) -> None:
        s, b = self._series, self._batches.batch
        coop = None
        if dp_cooperation_info is not None:
            coop = tuple(dp_cooperation_info.to_labels().items()) if hasattr(dp_cooperation_info, "to_labels") \
                else (("num_prefill_ranks", str(dp_cooperation_info)),)
            coop = tuple((k, str(v)) for k, v in coop)
        for mode, delta in (("prefill_compute", prefill_compute_tokens), ("prefill_cache", prefill_cache_tokens),
                            ("decode", decode_tokens)):
            if delta == 0:
                continue
            b.add(s.id("counter", "sglang:realtime_tokens_total", (("mode", mode),)), delta)
            if coop is not None:
                b.add(s.id("counter", "sglang:dp_cooperation_realtime_tokens_total", (("mode", mode),) + coop), delta)
        b.flush()

    def increment_effective_prefill_tokens(self, input_tokens: int, device_hit_tokens: int, host_hit_tokens: int,
                                           storage_hit_tokens: int) -> None:
        s, b = self._series, self._batches.batch
        for mode, delta in (("input", input_tokens), ("device_hit", device_hit_tokens), ("host_hit", host_hit_tokens),
                            ("storage_hit", storage_hit_tokens)):
            if delta > 0:
                b.add(s.id("counter", "sglang:prefill_effective_tokens_total", (("mode", mode),)), delta)
        b.flush()

    def increment_forward_execution_seconds(self, category: str, t: float,
                                            dp_cooperation_info: Optional[DPCooperationInfo] = None) -> None:
        s, b = self._series, self._batches.batch
        b.add(s.id("counter", "sglang:forward_execution_seconds_total", (("category", str(category)),)), t)
        if dp_cooperation_info is not None:
            coop = tuple((k, str(v)) for k, v in dp_cooperation_info.to_labels().items())
            b.add(s.id("counter", "sglang:dp_cooperation_forward_execution_seconds_total",
                       (("category", str(category)),) + coop), t)
        b.flush()

    def increment_estimated_perf(self, num_flops_per_gpu: float = 0.0, num_read_bytes_per_gpu: float = 0.0,
                                 num_write_bytes_per_gpu: float = 0.0) -> None:
        s, b = self._series, self._batches.batch
        if num_flops_per_gpu > 0:
            b.add(s.id("counter", "sglang:estimated_flops_per_gpu_total"), num_flops_per_gpu)
        if num_read_bytes_per_gpu > 0:
            b.add(s.id("counter", "sglang:estimated_read_bytes_per_gpu_total"), num_read_bytes_per_gpu)
        if num_write_bytes_per_gpu > 0:
            b.add(s.id("counter", "sglang:estimated_write_bytes_per_gpu_total"), num_write_bytes_per_gpu)
        b.flush()

    def log_grammar_stats(self, grammar_stats: Any) -> None:
        s, b = self._series, self._batches.batch
        g = grammar_stats
        compilation_time = getattr(g, "compilation_time", None)
        if compilation_time is not None:
            b.observe(s.id("histogram", "sglang:grammar_compilation_time_seconds", (), cat.GRAMMAR_COMPILATION_TIME),
                      compilation_time)
        schema_count = getattr(g, "schema_count", None)
        if schema_count is not None:
            b.observe(s.id("histogram", "sglang:grammar_schema_count", (), cat.GRAMMAR_SCHEMA_COUNT), schema_count)
        ebnf_size = getattr(g, "ebnf_size", None)
        if ebnf_size is not None:
            b.observe(s.id("histogram", "sglang:grammar_ebnf_size", (), cat.GRAMMAR_EBNF_SIZE), ebnf_size)
        tree_times = getattr(g, "tree_traversal_time", None)
        if tree_times:
            b.observe(s.id("histogram", "sglang:grammar_tree_traversal_time_max", (), cat.GRAMMAR_TREE_TRAVERSAL_TIME),
                      max(tree_times))
            b.observe(s.id("histogram", "sglang:grammar_tree_traversal_time_avg", (), cat.GRAMMAR_TREE_TRAVERSAL_TIME),
                      sum(tree_times) / len(tree_times))
        if getattr(g, "is_cache_hit", False):
            b.add(s.id("counter", "sglang:num_grammar_cache_hit_total"), 1)
        if getattr(g, "is_grammar_aborted", False):
            b.add(s.id("counter", "sglang:num_grammar_aborted_total"), 1)
        num_timeout = getattr(g, "num_timeout", 0) or 0
        if num_timeout > 0:
            b.add(s.id("counter", "sglang:num_grammar_timeout_total"), num_timeout)
        b.add(s.id("counter", "sglang:num_grammar_total"), 1)
        b.flush()

    def emit_constants(self, max_total_num_tokens: int, max_total_num_tokens_swa: Optional[int],
                       weight_memory_usage_gb: float, kv_cache_memory_usage_gb: float,
                       graph_memory_usage_gb: Mapping[str, float], max_running_requests_under_SLO: Optional[int],
                       page_size: int, num_pages: int, context_len: int,
                       startup_available_gpu_memory_gb: float) -> None:
        s, b = self._series, self._batches.batch
        g = lambda name, labels=(): s.id("gauge", name, labels)  # noqa: E731
        b.set(g("sglang:max_total_num_tokens"), max_total_num_tokens)
        if max_total_num_tokens_swa is not None:
            b.set(g("sglang:max_total_num_tokens_swa"), max_total_num_tokens_swa)
        b.set(g("sglang:weight_memory_usage_gb"), weight_memory_usage_gb)
        b.set(g("sglang:kv_cache_memory_usage_gb"), kv_cache_memory_usage_gb)
        for phase, gb in (graph_memory_usage_gb or {}).items():
            b.set(g("sglang:graph_memory_usage_gb", (("phase", str(phase)),)), gb)
        if max_running_requests_under_SLO is not None:
            b.set(g("sglang:max_running_requests_under_SLO"), max_running_requests_under_SLO)
        b.set(g("sglang:page_size"), page_size)
        b.set(g("sglang:num_pages"), num_pages)
        b.set(g("sglang:context_len"), context_len)
        b.set(g("sglang:startup_available_gpu_memory_gb"), startup_available_gpu_memory_gb)
        b.flush()

    # --- the reference article's additions --------------------------------------------------------------

    def observe_dp_balance(self, stats: DPBalanceStats) -> None:
        """One synchronized DP-attention step: scheduled and imbalance tokens and pairs, the step's rank
        state, this rank's sync wait, and (only on attn_dp 0 / attn_tp 0 / attn_cp 0) the engine-wide
        max/mean ratio."""
        s, b = self._series, self._batches.batch
        local_tokens = stats.local_tokens
        imbalance_tokens = stats.max_tokens - local_tokens
        local_pairs = stats.local_attention_pairs
        imbalance_pairs = stats.max_attention_pairs - local_pairs
        if local_tokens:
            b.add(s.id("counter", "sglang:dp_attention_tokens_total", (("kind", "scheduled"),)), local_tokens)
        if imbalance_tokens:
            b.add(s.id("counter", "sglang:dp_attention_tokens_total", (("kind", "imbalance"),)), imbalance_tokens)
        if local_pairs:
            b.add(s.id("counter", "sglang:dp_attention_pairs_total", (("kind", "scheduled"),)), local_pairs)
        if imbalance_pairs:
            b.add(s.id("counter", "sglang:dp_attention_pairs_total", (("kind", "imbalance"),)), imbalance_pairs)
        state = "idle" if local_tokens == 0 else "active"
        b.add(s.id("counter", "sglang:dp_attention_steps_total", (("rank_state", state),)), 1)
        b.observe(s.id("histogram", "sglang:dp_attention_sync_wait_seconds", (), cat.DP_ATTENTION_SYNC_WAIT_SECONDS),
                  stats.sync_wait_seconds)
        if self.reports_dp_token_imbalance_ratio:
            ratio = stats.max_tokens * stats.num_ranks / stats.sum_tokens if stats.sum_tokens else 0.0
            b.observe(s.id("histogram", "sglang:dp_attention_token_imbalance_ratio", (),
                           cat.DP_ATTENTION_TOKEN_IMBALANCE_RATIO), ratio)
        b.flush()

    def increment_scheduler_iterations(self, count: int = 1) -> None:
        self._inc("sglang:scheduler_iterations_total", count)

    def increment_scheduler_idle_seconds(self, seconds: float) -> None:
        if seconds > 0:
            self._inc("sglang:scheduler_idle_seconds_total", seconds)

    def increment_scheduler_stage_seconds(self, category: str, seconds: float) -> None:
        if seconds > 0:
            self._inc("sglang:scheduler_stage_seconds_total", seconds, (("category", str(category)),))

    def observe_scheduler_stages(self, seconds_by_category: Mapping[str, float]) -> None:
        """A SchedulerStageMetricsRecorder drain: seconds per stage, 'idle' going to the idle counter."""
        s, b = self._series, self._batches.batch
        for category, seconds in seconds_by_category.items():
            if seconds <= 0:
                continue
            if category == "idle":
                b.add(s.id("counter", "sglang:scheduler_idle_seconds_total"), seconds)
            else:
                b.add(s.id("counter", "sglang:scheduler_stage_seconds_total", (("category", str(category)),)), seconds)
        b.flush()


class _LabelledChild:
    """prometheus_client-style child used by ExpertDispatchCollector.eplb_gpu_physical_count."""

    __slots__ = ("_r", "_id")

    def __init__(self, reporter: Reporter, series: int):
        self._r, self._id = reporter, series

    def observe(self, value: float) -> None:
        self._r.observe(self._id, value)


class _LayerHistogram:
    def __init__(self, reporter: Reporter, buckets: Sequence[float]):
        self._r = reporter
        self._buckets = list(buckets)
        self._children: Dict[str, _LabelledChild] = {}

    def labels(self, layer: Any = None, **kw: Any) -> _LabelledChild:
        key = str(kw.get("layer", layer))
        child = self._children.get(key)
        if child is None:
            series = self._r.register("histogram", "sglang:eplb_gpu_physical_count", (("layer", key),),
                                      buckets=self._buckets, identity_labels=False)
            child = self._children[key] = _LabelledChild(self._r, series)
        return child


class ExpertDispatchCollector:
    """Stands in for SGLang's ExpertDispatchCollector: eplb_gpu_physical_count{layer}, buckets range(ep_size).
    Writes to the given reporter or to the segment of the scheduler labels given."""

    def __init__(self, ep_size: int, *, reporter: Optional[Reporter] = None,
                 labels: Optional[Mapping[str, Any]] = None, **rankstat_options: Any):
        # SGLang builds it with ep_size only: it joins the scheduler segment of this process.
        r = reporter or (scheduler_segment(labels, None, **rankstat_options) if labels is not None
                         else current_scheduler_segment() or scheduler_segment({}, None, **rankstat_options))
        self.reporter = r
        self.eplb_gpu_physical_count = _LayerHistogram(r, cat.eplb_gpu_physical_count_buckets(ep_size))


class RadixCacheMetricsCollector:
    """Stands in for SGLang's RadixCacheMetricsCollector (prefix cache and HiCache L2 traffic). It shares
    the scheduler rank's segment (the labels are the scheduler's)."""

    def __init__(self, labels: Mapping[str, Any], *, reporter: Optional[Reporter] = None, **rankstat_options: Any):
        self.labels = dict(labels)
        self.reporter = reporter or scheduler_segment(self.labels, None, **rankstat_options)
        self._series = _Series(self.reporter)
        self._eviction_buckets = histogram_conf_from_env(cat.ENV_BUCKET_EVICTION_DURATION) or cat.EVICTION_DURATION
        self._load_back_buckets = histogram_conf_from_env(cat.ENV_BUCKET_LOAD_BACK_DURATION) or cat.LOAD_BACK_DURATION
        self._own = tuple((k, str(v)) for k, v in self.labels.items()
                          if self.reporter.identity_labels.get(k) != str(v))

    def _inc(self, family: str, amount: float, labels: Tuple = ()) -> None:
        self.reporter.add(self._series.id("counter", family, self._own + labels), amount)

    def _observe(self, family: str, value: float, buckets: Sequence[float]) -> None:
        self.reporter.observe(self._series.id("histogram", family, self._own, sorted(set(buckets))), value)

    def increment_eviction_num_tokens(self, num_tokens: int) -> None:
        self._inc("sglang:evicted_tokens_total", num_tokens)

    def increment_load_back_num_tokens(self, num_tokens: int, pool: str) -> None:
        self._inc("sglang:load_back_tokens_total", num_tokens, (("pool", str(pool)),))

    def observe_eviction_duration(self, duration_seconds: float) -> None:
        self._observe("sglang:eviction_duration_seconds", duration_seconds, self._eviction_buckets)

    def observe_load_back_duration(self, duration_seconds: float) -> None:
        self._observe("sglang:load_back_duration_seconds", duration_seconds, self._load_back_buckets)

    def increment_backup_num_tokens(self, num_tokens: int, pool: str) -> None:
        self._inc("sglang:hicache_backup_tokens_total", num_tokens, (("pool", str(pool)),))

    def increment_backup_num_bytes(self, num_bytes: int) -> None:
        self._inc("sglang:hicache_backup_bytes_total", num_bytes)

    def increment_load_back_num_bytes(self, num_bytes: int) -> None:
        self._inc("sglang:load_back_bytes_total", num_bytes)

    def observe_backup_duration(self, duration_seconds: float) -> None:
        self._observe("sglang:hicache_backup_duration_seconds", duration_seconds, cat.HICACHE_BACKUP_DURATION)

    def increment_dropped_tokens(self, num_tokens: int, reason: str, pool: str) -> None:
        self._inc("sglang:hicache_dropped_tokens_total", num_tokens, (("reason", str(reason)), ("pool", str(pool))))


_PREFETCH_OUTCOMES = ("attempts", "issued", "declined_too_short", "declined_rate_limited", "revoked_insufficient",
                      "revoked_full_miss")


class StorageMetricsCollector:
    """Stands in for SGLang's StorageMetricsCollector (HiCache L3), plus the article's storage prefetch
    hit / unfulfilled / deferred token counters."""

    def __init__(self, labels: Mapping[str, Any], *, reporter: Optional[Reporter] = None, **rankstat_options: Any):
        self.labels = dict(labels)
        self.reporter = reporter or scheduler_segment(self.labels, None, **rankstat_options)
        self._series = _Series(self.reporter)
        self._batches = _Batches(self.reporter)
        self._last_prefetch_outcomes: Dict[str, float] = {}
        self._own = tuple((k, str(v)) for k, v in self.labels.items()
                          if self.reporter.identity_labels.get(k) != str(v))

    def _inc(self, family: str, amount: float) -> None:
        if amount > 0:
            self.reporter.add(self._series.id("counter", family, self._own), amount)

    def log_prefetch_outcomes(self, prefetch_stats: Mapping[str, float]) -> None:
        """Cumulative outcome counts become increments; a snapshot lower than the previous one starts a
        new epoch (the source was reset) and counts in full, never as a negative delta."""
        s, b = self._series, self._batches.batch
        for outcome in _PREFETCH_OUTCOMES:
            current = max(float(prefetch_stats.get(outcome, 0)), 0.0)
            previous = self._last_prefetch_outcomes.get(outcome, 0.0)
            increment = current if current < previous else current - previous
            if increment > 0:
                b.add(s.id("counter", "sglang:hicache_prefetch_outcomes_total", self._own + (("outcome", outcome),)),
                      increment)
            self._last_prefetch_outcomes[outcome] = current
        b.flush()

    def log_prefetched_tokens(self, prefetched_tokens: int) -> None:
        self._inc("sglang:prefetched_tokens_total", prefetched_tokens)

    def log_backuped_tokens(self, backuped_tokens: int) -> None:
        self._inc("sglang:backuped_tokens_total", backuped_tokens)

    def log_backup_dropped_tokens(self, dropped_tokens: int) -> None:
        self._inc("sglang:hicache_backup_dropped_tokens_total", dropped_tokens)

    def log_prefetch_aux_alloc_failed_tokens(self, num_tokens: int) -> None:
        self._inc("sglang:hicache_prefetch_aux_alloc_failed_tokens_total", num_tokens)

    def log_prefetch_hit_tokens(self, num_tokens: int) -> None:
        self._inc("sglang:storage_prefetch_hit_tokens_total", num_tokens)

    def log_prefetch_unfulfilled_tokens(self, num_tokens: int) -> None:
        self._inc("sglang:storage_prefetch_unfulfilled_tokens_total", num_tokens)

    def log_prefetch_deferred_tokens(self, num_tokens: int) -> None:
        self._inc("sglang:storage_prefetch_deferred_tokens_total", num_tokens)

    def log_storage_metrics(self, storage_metrics: Any = None) -> None:
        if storage_metrics is None:
            return
        s, b = self._series, self._batches.batch
        for attr, family, buckets in (("prefetch_pgs", "sglang:prefetch_pgs", cat.STORAGE_PAGES),
                                      ("backup_pgs", "sglang:backup_pgs", cat.STORAGE_PAGES),
                                      ("prefetch_bandwidth", "sglang:prefetch_bandwidth", cat.STORAGE_BANDWIDTH),
                                      ("backup_bandwidth", "sglang:backup_bandwidth", cat.STORAGE_BANDWIDTH)):
            values = getattr(storage_metrics, attr, None) or ()
            if values:
                series = s.id("histogram", family, self._own, buckets)
                for v in values:
                    b.observe(series, v)
        b.flush()
        self.log_prefetch_outcomes(getattr(storage_metrics, "prefetch_stats", None) or {})


class TokenizerMetricsCollector:
    """Stands in for SGLang's TokenizerMetricsCollector (the tokenizer manager / HTTP front end).

    `labels` are SGLang's tokenizer labels (model_name, engine_type, priority "" when on, each allowed
    custom label with "" and extra_metric_labels). Per-call `labels` may override any of them; keys that
    are neither identity labels nor in the custom-label allow-list are dropped (no label from a request
    header becomes a series unless allowed)."""

    def __init__(self, server_args: Any = None, labels: Optional[Mapping[str, Any]] = None,
                 bucket_time_to_first_token: Optional[Sequence[Any]] = None,
                 bucket_inter_token_latency: Optional[Sequence[Any]] = None,
                 bucket_e2e_request_latency: Optional[Sequence[Any]] = None, *,
                 reporter: Optional[Reporter] = None, allowed_custom_labels: Optional[Iterable[str]] = None,
                 prompt_tokens_buckets: Any = None, generation_tokens_buckets: Any = None,
                 bucket_time_per_output_token: Optional[Sequence[Any]] = None, **rankstat_options: Any):
        self.labels = {k: str(v) for k, v in (labels or {}).items()}
        self.server_args = server_args
        self.reporter = reporter or tokenizer_segment(self.labels, server_args, **rankstat_options)
        self._series = _Series(self.reporter)
        self._batches = _Batches(self.reporter)
        allowed = allowed_custom_labels
        if allowed is None:
            allowed = getattr(server_args, "tokenizer_metrics_allowed_custom_labels", None) or ()
        self.allowed_custom_labels = frozenset(allowed)
        self._allowed_keys = frozenset(self.labels) | self.allowed_custom_labels
        if prompt_tokens_buckets is None:
            prompt_tokens_buckets = getattr(server_args, "prompt_tokens_buckets", None)
        if generation_tokens_buckets is None:
            generation_tokens_buckets = getattr(server_args, "generation_tokens_buckets", None)
        self._prompt_buckets = generate_buckets(prompt_tokens_buckets, cat.PROMPT_TOKENS)
        self._generation_buckets = generate_buckets(generation_tokens_buckets, cat.PROMPT_TOKENS)
        self._ttft_buckets = buckets_or_rule(
            bucket_time_to_first_token if bucket_time_to_first_token is not None
            else getattr(server_args, "bucket_time_to_first_token", None), cat.TIME_TO_FIRST_TOKEN)
        self._itl_buckets = buckets_or_rule(
            bucket_inter_token_latency if bucket_inter_token_latency is not None
            else getattr(server_args, "bucket_inter_token_latency", None), cat.INTER_TOKEN_LATENCY)
        self._e2e_buckets = buckets_or_rule(
            bucket_e2e_request_latency if bucket_e2e_request_latency is not None
            else getattr(server_args, "bucket_e2e_request_latency", None), cat.E2E_REQUEST_LATENCY)
        self._tpot_buckets = buckets_or_rule(bucket_time_per_output_token, cat.TIME_PER_OUTPUT_TOKEN)
        self._own_cache: Dict[Tuple, Tuple] = {}
        # A local copy of the streaming TTFT bucket counts, for check_time_to_first_token_straggler.
        self._ttft_stream_counts = [0] * (len(self._ttft_buckets) + 1)
        self.get_loads_duration_seconds = _TokenizerHistogram(self, "sglang:get_loads_duration_seconds",
                                                              cat.GET_LOADS_DURATION)

    def own_labels(self, labels: Optional[Mapping[str, Any]]) -> Tuple[Tuple[str, str], ...]:
        """The series labels for a call's `labels`: what differs from the identity, allow-listed keys only."""
        if not labels or labels is self.labels:
            return ()
        key = tuple(labels.items())
        found = self._own_cache.get(key)
        if found is None:
            identity = self.reporter.identity_labels or self.labels
            found = tuple((k, str(v)) for k, v in labels.items()
                          if k in self._allowed_keys and identity.get(k, self.labels.get(k)) != str(v))
            if len(self._own_cache) < 4096:
                self._own_cache[key] = found
        return found

    def labels_for_request(self, custom_labels: Optional[Mapping[str, Any]] = None) -> Dict[str, str]:
        """The labels dict for one request: the collector's labels with the allowed custom labels set."""
        out = dict(self.labels)
        for k, v in (custom_labels or {}).items():
            if k in self.allowed_custom_labels:
                out[k] = str(v)
        return out

    def emit_startup_time(self, startup_time: Mapping[str, Any]) -> None:
        s, b = self._series, self._batches.batch
        for phase in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"):
            if phase in startup_time:
                b.set(s.id("gauge", "sglang:startup_time_seconds", (("phase", phase),)), float(startup_time[phase]))
        for phase, duration in (startup_time.get("cuda_graph") or {}).items():
            b.set(s.id("gauge", "sglang:startup_cuda_graph_time_seconds", (("phase", str(phase)),)), float(duration))
        b.flush()

    def observe_one_finished_request(self, labels: Mapping[str, Any], prompt_tokens: int, generation_tokens: int,
                                     cached_tokens: int, e2e_latency: float, has_grammar: bool,
                                     cached_tokens_details: Optional[Mapping[str, Any]] = None,
                                     spec_verify_ct: int = 0, is_streaming: bool = False) -> None:
        s, b = self._series, self._batches.batch
        own = self.own_labels(labels)
        stream = own + (("is_streaming", "true" if is_streaming else "false"),)
        b.add(s.id("counter", "sglang:prompt_tokens_total", stream), prompt_tokens)
        b.add(s.id("counter", "sglang:generation_tokens_total", stream), generation_tokens)
        if spec_verify_ct > 0:
            b.add(s.id("counter", "sglang:spec_verify_calls_total", own), spec_verify_ct)
        if cached_tokens > 0:
            if cached_tokens_details:
                for source in ("device", "host"):
                    value = cached_tokens_details.get(source, 0) or 0
                    if value > 0:
                        b.add(s.id("counter", "sglang:cached_tokens_total", own + (("cache_source", source),)), value)
                if "storage" in cached_tokens_details:
                    value = cached_tokens_details.get("storage", 0) or 0
                    if value > 0:
                        backend = cached_tokens_details.get("storage_backend") or "unknown"
                        b.add(s.id("counter", "sglang:cached_tokens_total",
                                   own + (("cache_source", f"storage_{backend}"),)), value)
            else:
                b.add(s.id("counter", "sglang:cached_tokens_total", own + (("cache_source", "total"),)), cached_tokens)
        b.add(s.id("counter", "sglang:num_requests_total", stream), 1)
        if has_grammar:
            b.add(s.id("counter", "sglang:num_so_requests_total", own), 1)
        b.observe(s.id("histogram", "sglang:e2e_request_latency_seconds", stream, self._e2e_buckets), e2e_latency)
        b.observe(s.id("histogram", "sglang:prompt_tokens_histogram", own, self._prompt_buckets), prompt_tokens)
        b.observe(s.id("histogram", "sglang:uncached_prompt_tokens_histogram", own, self._prompt_buckets),
                  prompt_tokens - cached_tokens)
        b.observe(s.id("histogram", "sglang:generation_tokens_histogram", own, self._generation_buckets),
                  generation_tokens)
        b.flush()

    def observe_time_to_first_token(self, labels: Mapping[str, Any], value: float, *, stream: bool = False) -> None:
        own = self.own_labels(labels) + (("is_streaming", "true" if stream else "false"),)
        self.reporter.observe(self._series.id("histogram", "sglang:time_to_first_token_seconds", own,
                                              self._ttft_buckets), value)
        if stream:
            self._ttft_stream_counts[bisect.bisect_left(self._ttft_buckets, value)] += 1

    def check_time_to_first_token_straggler(self, value: float) -> bool:
        """True when `value` is at or above the bucket holding this process's streaming P99 TTFT (from 100
        observations on), as SGLang's straggler check."""
        counts = self._ttft_stream_counts
        total = sum(counts)
        if total < 100:
            return False
        threshold = total * 0.99
        cumulative = 0
        for i, c in enumerate(counts):
            cumulative += c
            if cumulative > threshold:
                return i < len(self._ttft_buckets) and value >= self._ttft_buckets[i]
        return False

    def observe_inter_token_latency(self, labels: Mapping[str, Any], interval: Optional[float] = None,
                                    num_new_tokens: int = 1, *, internval: Optional[float] = None) -> None:
        """One output batch: `num_new_tokens` samples of interval / num_new_tokens in one bucket, and
        `interval` added to the sum (one C call). Nothing when no new token came."""
        if interval is None:
            interval = internval
        if interval is None or num_new_tokens <= 0:
            return
        own = self.own_labels(labels)
        self.reporter.observe_many(self._series.id("histogram", "sglang:inter_token_latency_seconds", own,
                                                   self._itl_buckets),
                                   interval / num_new_tokens, num_new_tokens, interval)

    def observe_time_per_output_token(self, labels: Mapping[str, Any], value: Optional[float]) -> None:
        """TPOT of one finished request; None (0 or 1 output token, abort, no decode time) observes nothing."""
        if value is None:
            return
        own = self.own_labels(labels)
        self.reporter.observe(self._series.id("histogram", "sglang:request_time_per_output_token_seconds", own,
                                              self._tpot_buckets), value)

    def observe_one_aborted_request(self, labels: Mapping[str, Any]) -> None:
        self.reporter.add(self._series.id("counter", "sglang:num_aborted_requests_total", self.own_labels(labels)), 1)

    def observe_get_loads_duration(self, seconds: float, labels: Optional[Mapping[str, Any]] = None) -> None:
        self.reporter.observe(self._series.id("histogram", "sglang:get_loads_duration_seconds", self.own_labels(labels),
                                              cat.GET_LOADS_DURATION), seconds)


class _TokenizerHistogram:
    """`collector.get_loads_duration_seconds.labels(**labels).observe(v)`, as SGLang's handler calls it."""

    def __init__(self, collector: TokenizerMetricsCollector, family: str, buckets: Sequence[float]):
        self._c, self._family, self._buckets = collector, family, buckets

    def labels(self, **labels: Any) -> _LabelledChild:
        c = self._c
        return _LabelledChild(c.reporter, c._series.id("histogram", self._family, c.own_labels(labels), self._buckets))


def stat_loggers() -> Dict[str, type]:
    """The classes to put in SGLang's ServerArgs.stat_loggers (keys are SGLang's role names)."""
    return {
        "scheduler": SchedulerMetricsCollector,
        "tokenizer": TokenizerMetricsCollector,
        "storage": StorageMetricsCollector,
        "radix_cache": RadixCacheMetricsCollector,
        "expert_dispatch": ExpertDispatchCollector,
    }
