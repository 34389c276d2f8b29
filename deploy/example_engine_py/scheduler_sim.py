"""A simulated SGLang scheduler rank that reports through rankstat's drop-in collectors.

Requests arrive from the tokenizer process, wait (behind grammar compilation when they have a
grammar), are prefilled in chunks against a KV pool with a prefix cache (device / host / storage hits
when HiCache is on), decode with speculative decoding, get retracted when the pool runs out, and leave.
The rank reports the way SGLang's scheduler does: a snapshot after each prefill batch, one every
decode_log_interval decode steps, an idle refresh after idle_refresh_seconds without a batch, and
counters and histograms as events happen. A PD prefill rank adds the bootstrap and in-flight (KV
transfer) queues; a PD decode rank the prealloc and transfer queues and deferred KV releases.

Nothing here touches a GPU: forward times are modelled, the metrics are real.
"""

from __future__ import annotations

import queue
import random
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from rankstat.sglang import (DPBalanceStats, DPCooperationInfo, ExpertDispatchCollector, GenThroughput, GrammarStats,
                             QueueCount, RadixCacheMetricsCollector, SchedulerMetricsCollector, SchedulerStats,
                             StorageMetrics, StorageMetricsCollector, cache_hit_rate, spec_accept, utilization)

ROUTING_KEYS = [f"key{i}" for i in range(12)]


@dataclass
class Req:
    rid: int
    prompt: int
    max_new: int
    priority: Optional[int]
    created: float
    routing_key: str
    grammar: bool
    generated: int = 0
    cached: int = 0
    cached_details: Dict[str, Any] = field(default_factory=dict)
    queued_at: float = 0.0
    queue_seconds: float = 0.0
    ready_step: int = 0
    spec_verify_ct: int = 0
    prefilled_at: float = 0.0
    retracted: bool = False

    def kv(self) -> int:
        return self.prompt + self.generated


@dataclass
class RankConfig:
    mode: str                      # unified, prefill, decode
    model_name: str
    instance: str
    tp_rank: int
    dp_rank: Optional[int]
    tp_size: int
    dp_size: int
    dp_attention: bool
    priorities: bool
    speculative: bool
    hicache: bool
    lora: bool
    all_schedulers: bool
    extra_labels: Dict[str, str]
    rank_key: Optional[str] = None   # default: derived from the ranks
    step_seconds: float = 0.02
    decode_log_interval: int = 10
    idle_refresh_seconds: float = 30.0
    max_total_tokens: int = 120_000
    max_running_requests: int = 48
    max_running_under_slo: int = 40
    seed: int = 1


class FanoutLog:
    """Records every collector call of a step so the attention-TP mirror ranks can replay it."""

    def __init__(self, name: str, target: Any, outbox: List):
        self._name, self._target, self._outbox = name, target, outbox

    def __getattr__(self, attr: str):
        value = getattr(self._target, attr)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            self._outbox.append((self._name, attr, args, kwargs))
            return value(*args, **kwargs)
        return call


def scheduler_labels(cfg: RankConfig) -> Dict[str, Any]:
    labels: Dict[str, Any] = {"model_name": cfg.model_name, "engine_type": cfg.mode, "tp_rank": cfg.tp_rank,
                              "pp_rank": 0, "moe_ep_rank": cfg.tp_rank}
    if cfg.priorities:
        labels["priority"] = ""
    if cfg.dp_rank is not None:
        labels["dp_rank"] = cfg.dp_rank
    labels.update(cfg.extra_labels)
    return labels


def open_collectors(cfg: RankConfig) -> Dict[str, Any]:
    labels = scheduler_labels(cfg)
    options = dict(instance=cfg.instance, rank_key=cfg.rank_key, tp_size=cfg.tp_size, dp_size=cfg.dp_size,
                   dp_attention=cfg.dp_attention, all_schedulers=cfg.all_schedulers)
    scheduler = SchedulerMetricsCollector(labels, None, enable_lora=cfg.lora, enable_hierarchical_cache=cfg.hicache,
                                          enable_streaming_session=True, enable_expert_balancedness=True,
                                          prefill_delayer_max_delay_passes=30, **options)
    out = {"scheduler": scheduler,
           "radix": RadixCacheMetricsCollector(labels, reporter=scheduler.reporter),
           "storage": StorageMetricsCollector(labels, reporter=scheduler.reporter)}
    if cfg.mode == "unified":
        # The MoE expert dispatch histogram is bucketed by ep_size; one ep group reports it.
        out["experts"] = ExpertDispatchCollector(cfg.tp_size, reporter=scheduler.reporter)
    return out


class SimulatedRank:
    def __init__(self, cfg: RankConfig, inbox, outbox, balance=None, mirrors=(), to_decode=None):
        self.cfg = cfg
        self.inbox = inbox            # requests (and, for decode, transferred requests)
        self.outbox = outbox          # output events for the tokenizer
        self.to_decode = to_decode    # PD prefill: hands finished prefills to the decode rank
        self.balance = balance        # shared arrays for DP-attention balance, or None
        self.mirrors = list(mirrors)
        self.rng = random.Random(cfg.seed * 7919 + cfg.tp_rank)
        collectors = open_collectors(cfg)
        self.reporter = collectors["scheduler"].reporter
        self.calls: List = []
        wrap = (lambda name: FanoutLog(name, collectors[name], self.calls)) if self.mirrors else collectors.get
        self.m = wrap("scheduler")
        self.radix = wrap("radix")
        self.storage = wrap("storage")
        self.experts = collectors.get("experts")
        self.step_no = 0
        self.waiting: List[Req] = []
        self.grammar_queue: List[Req] = []
        self.running: List[Req] = []
        self.bootstrap: List[Tuple[int, Req]] = []   # PD prefill: (ready step, req)
        self.inflight: List[Tuple[int, Req]] = []    # PD prefill: KV transfer in flight
        self.prealloc: List[Tuple[int, Req]] = []    # PD decode
        self.transfer: List[Tuple[int, Req]] = []    # PD decode
        self.deferred: List[Tuple[int, Req]] = []    # PD decode: finished, KV release deferred
        self.throughput = GenThroughput()
        self.generated_since_log = 0
        self.spec_window = [0.0, 0.0, 0.0]  # accept tokens, forward count, correct drafts
        self.retracted_since_report = 0
        self.paused_since_report = 0
        self.last_batch_time = time.monotonic()
        self.last_report_time = time.monotonic()
        self.cache_rate = 0.0
        self.prefetch_totals = {"attempts": 0.0, "issued": 0.0, "declined_too_short": 0.0,
                                "declined_rate_limited": 0.0, "revoked_insufficient": 0.0, "revoked_full_miss": 0.0}
        self.known_tokens: Dict[str, int] = {}  # prefix cache content per routing key
        self.m.emit_constants(max_total_num_tokens=cfg.max_total_tokens,
                              max_total_num_tokens_swa=cfg.max_total_tokens // 4,
                              weight_memory_usage_gb=15.2, kv_cache_memory_usage_gb=48.0,
                              graph_memory_usage_gb={"decode": 1.5, "prefill": 0.8},
                              max_running_requests_under_SLO=cfg.max_running_under_slo, page_size=16,
                              num_pages=cfg.max_total_tokens // 16, context_len=32768,
                              startup_available_gpu_memory_gb=79.1)
        self.m.observe_weight_load(4.2, "disk")

    # --- helpers ---------------------------------------------------------------------------------------

    def _once(self, what: str) -> bool:
        """True the first time it is asked about `what`: makes rare events happen early, once."""
        done = self.__dict__.setdefault("_done_once", set())
        if what in done:
            return False
        done.add(what)
        return True

    def used_tokens(self) -> int:
        return sum(r.kv() for r in self.running) + sum(r.prompt for _, r in self.inflight) + \
            sum(r.prompt for _, r in self.transfer) + sum(r.kv() for _, r in self.deferred)

    def queue_count(self, reqs: List[Req]) -> Any:
        if not self.cfg.priorities:
            return len(reqs)
        return QueueCount.from_priorities((r.priority for r in reqs), True)

    def coop(self) -> Optional[DPCooperationInfo]:
        if self.balance is None:
            return None
        return DPCooperationInfo(num_prefill_ranks=int(sum(1 for m in self.balance["mode"] if m == 1)))

    def emit(self, events: List) -> None:
        if events:
            self.outbox.put(events)

    # --- intake ----------------------------------------------------------------------------------------

    def receive(self, now: float) -> None:
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return
            req = Req(*item) if isinstance(item, tuple) else item
            req.queued_at = now
            if self.cfg.mode == "prefill":
                self.bootstrap.append((self.step_no + self.rng.randint(2, 8), req))
            elif self.cfg.mode == "decode":
                self.prealloc.append((self.step_no + self.rng.randint(1, 5), req))
            elif req.grammar:
                req.ready_step = self.step_no + self.rng.randint(2, 10)
                self.grammar_queue.append(req)
            else:
                self.waiting.append(req)

    def advance_queues(self, now: float) -> None:
        ready = [r for r in self.grammar_queue if r.ready_step <= self.step_no]
        for r in ready:
            self.grammar_queue.remove(r)
            self.waiting.append(r)
            self.m.log_grammar_stats(GrammarStats(
                compilation_time=self.rng.uniform(0.005, 0.3), schema_count=self.rng.randint(1, 40),
                ebnf_size=self.rng.randint(100, 8000), tree_traversal_time=[self.rng.uniform(0.001, 0.05)
                                                                            for _ in range(3)],
                is_cache_hit=self.rng.random() < 0.4,
                is_grammar_aborted=self.rng.random() < 0.02 or self._once("grammar_aborted"),
                num_timeout=1 if self.rng.random() < 0.02 or self._once("grammar_timeout") else 0))
        if self.cfg.mode == "prefill":
            for item in [b for b in self.bootstrap if b[0] <= self.step_no]:
                self.bootstrap.remove(item)
                req = item[1]
                if self.rng.random() < 0.01 or self._once("bootstrap_failed"):
                    self.m.increment_bootstrap_failed_reqs()
                    self.emit([("abort", req.rid)])
                    continue
                self.waiting.append(req)
            for item in [t for t in self.inflight if t[0] <= self.step_no]:
                self.inflight.remove(item)
                req = item[1]
                total_mb = req.prompt * 0.16
                latency_ms = (item[0] - req.ready_step) * self.cfg.step_seconds * 1000 + self.rng.uniform(1, 20)
                self.m.observe_kv_transfer_metrics(latency_ms=latency_ms, total_mb=total_mb,
                                                   speed_gb_s=total_mb / 1024 / max(latency_ms / 1000, 1e-3))
                self.m.observe_kv_transfer_bootstrap(bootstrap_ms=self.rng.uniform(1, 80),
                                                     alloc_ms=self.rng.uniform(1, 40))
                if self.rng.random() < 0.02 or self._once("transfer_failed"):
                    self.m.increment_transfer_failed_reqs()
                    self.m.increment_prefill_retries(1)
                    self.m.increment_kv_transfer_timeouts("transfer")
                self.m.observe_per_stage_req_latency("prefill_transfer_kv_cache", latency_ms / 1000)
                if self.to_decode is not None:
                    self.to_decode.put(req)
                self.emit([("done_prefill", req.rid, req.cached, dict(req.cached_details))])
        if self.cfg.mode == "decode":
            for item in [p for p in self.prealloc if p[0] <= self.step_no]:
                if self.used_tokens() + item[1].prompt > self.cfg.max_total_tokens:
                    break
                self.prealloc.remove(item)
                self.transfer.append((self.step_no + self.rng.randint(1, 6), item[1]))
                self.m.observe_per_stage_req_latency("decode_prealloc", self.rng.uniform(0.001, 0.05))
            for item in [t for t in self.transfer if t[0] <= self.step_no]:
                self.transfer.remove(item)
                req = item[1]
                if self._once("bootstrap_timeout"):
                    self.m.increment_kv_transfer_timeouts("bootstrap")
                self.m.observe_per_stage_req_latency("decode_transferred", self.rng.uniform(0.001, 0.05))
                req.generated = 1  # the first token came from the prefill node
                self.running.append(req)
                self.emit([("token", req.rid, 1, False, req.cached, dict(req.cached_details), 0)])
            for item in [d for d in self.deferred if d[0] <= self.step_no]:
                self.deferred.remove(item)

    # --- one scheduler iteration ----------------------------------------------------------------------

    def step(self) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        now = time.monotonic()
        self.step_no += 1
        self.receive(now)
        t1 = time.perf_counter()
        self.advance_queues(now)
        t2 = time.perf_counter()
        tokens_this_step = 0
        pairs_this_step = 0
        forward_mode = 0
        ran = False
        if cfg.mode != "decode":
            admitted = self.run_prefill(now)
            if admitted:
                ran, forward_mode = True, 1
                tokens_this_step = sum(r.prompt - r.cached for r in admitted)
                pairs_this_step = sum((r.prompt - r.cached) * r.prompt // 2 for r in admitted)
        if not ran and cfg.mode != "prefill" and self.running:
            generated = self.run_decode(now)
            ran, forward_mode = True, 2
            tokens_this_step = len(self.running) + generated
            pairs_this_step = sum(r.kv() for r in self.running) or tokens_this_step
        t3 = time.perf_counter()
        forward_seconds = cfg.step_seconds * (0.3 + 0.6 * min(1.0, tokens_this_step / 4096)) if ran else 0.0
        if ran:
            self.last_batch_time = now
        elif now - self.last_report_time > cfg.idle_refresh_seconds:
            self.report("idle", now)
        self.dp_balance(tokens_this_step, pairs_this_step, forward_mode)
        self.background(now)
        t4 = time.perf_counter()
        self.m.increment_scheduler_iterations()
        self.m.observe_scheduler_stages({
            "recv_requests": t1 - t0, "process_input_requests": (t2 - t1) / 2, "get_next_batch_to_run": (t2 - t1) / 2,
            "run_batch": forward_seconds + (t3 - t2), "process_batch_result": t4 - t3,
            "idle": max(0.0, cfg.step_seconds - forward_seconds - (t4 - t0)) if not ran else 0.0})
        self.flush_mirrors()
        self.reporter.heartbeat()

    def run_prefill(self, now: float) -> List[Req]:
        cfg = self.cfg
        budget = 8192
        admitted: List[Req] = []
        self.waiting.sort(key=lambda r: (-(r.priority or 0), r.queued_at))
        while self.waiting and len(self.running) < cfg.max_running_requests:
            req = self.waiting[0]
            if req.prompt > budget and admitted:
                break
            if self.used_tokens() + req.prompt > cfg.max_total_tokens * 0.9:
                break
            self.waiting.pop(0)
            budget -= req.prompt
            req.queue_seconds += now - req.queued_at
            known = self.known_tokens.get(req.routing_key, 0)
            hit = min(req.prompt - 1, int(known * self.rng.uniform(0.5, 1.0)))
            self.known_tokens[req.routing_key] = max(known, req.prompt)
            req.cached = hit
            if cfg.hicache and hit > 0:
                device = int(hit * 0.6)
                host = int(hit * 0.3)
                req.cached_details = {"device": device, "host": host, "storage": hit - device - host,
                                      "storage_backend": "file"}
            else:
                req.cached_details = {"device": hit, "host": 0}
            req.prefilled_at = now
            admitted.append(req)
            if cfg.mode == "prefill":
                self.inflight.append((self.step_no + self.rng.randint(2, 8), req))
                req.ready_step = self.step_no
            else:
                req.generated = 1
                self.running.append(req)
            self.m.observe_queue_time(req.queue_seconds)
            stage = "chunked_prefill" if req.prompt > 4096 else "prefill_forward"
            self.m.observe_per_stage_req_latency(stage, cfg.step_seconds * self.rng.uniform(0.5, 3))
        if not admitted:
            return admitted
        compute = sum(r.prompt - r.cached for r in admitted)
        hits = sum(r.cached for r in admitted)
        device = sum(r.cached_details.get("device", 0) for r in admitted)
        host = sum(r.cached_details.get("host", 0) for r in admitted)
        storage = sum(r.cached_details.get("storage", 0) for r in admitted)
        self.cache_rate = cache_hit_rate(compute, hits)
        coop = self.coop()
        self.m.increment_realtime_tokens(coop, prefill_compute_tokens=compute, prefill_cache_tokens=hits)
        self.m.increment_effective_prefill_tokens(compute, device, host, storage)
        self.m.increment_prefill_cuda_graph_pass(False)
        self.m.increment_forward_execution_seconds("extend", cfg.step_seconds * 0.5, coop)
        self.m.increment_estimated_perf(num_flops_per_gpu=compute * 2.0e10, num_read_bytes_per_gpu=compute * 1.5e6,
                                        num_write_bytes_per_gpu=compute * 2.0e5)
        self.m.increment_eplb_balancedness("extend", self.rng.uniform(0.7, 0.98))
        self.m.observe_prefill_delayer_outcome(forward_passes=self.rng.randint(0, 20),
                                               wait_seconds=self.rng.uniform(0, 3), input_estimation="token_usage",
                                               output_allow=True, output_reason="budget",
                                               actual_execution=self.rng.random() < 0.9)
        if cfg.mode == "unified":
            self.emit([("token", r.rid, 1, False, r.cached, dict(r.cached_details), 0) for r in admitted])
        self.report("prefill", now)
        return admitted

    def run_decode(self, now: float) -> int:
        cfg = self.cfg
        events = []
        generated = 0
        for req in self.running:
            accepted = self.rng.randint(1, 4) if cfg.speculative else 1
            new = max(1, min(accepted, req.max_new - req.generated))
            req.generated += new
            req.spec_verify_ct += 1 if cfg.speculative else 0
            generated += new
            self.spec_window[0] += accepted
            self.spec_window[1] += 1
            self.spec_window[2] += accepted - 1
        self.generated_since_log += generated
        coop = self.coop()
        self.m.increment_realtime_tokens(coop, decode_tokens=generated)
        self.m.increment_decode_cuda_graph_pass(True)
        self.m.increment_forward_execution_seconds("decode", cfg.step_seconds * 0.4, coop)
        self.m.increment_eplb_balancedness("decode", self.rng.uniform(0.8, 0.99))
        # Out of KV: retract the newest requests back to the waiting queue, as SGLang does. (The first
        # decode step with two requests also retracts one, so the retraction families show up early.)
        while len(self.running) > 1 and (self.used_tokens() > cfg.max_total_tokens or self._once("retract")):
            req = self.running.pop()
            self.m.increment_retracted_reqs(1, req.prompt, req.generated)
            self.retracted_since_report += 1
            req.generated = 0
            req.queued_at = now
            req.retracted = True
            if cfg.mode == "decode":
                self.prealloc.append((self.step_no + 2, req))
            else:
                self.waiting.insert(0, req)
        if self.step_no % 200 == 7:
            # An async weight sync pauses a couple of requests.
            self.paused_since_report += self.rng.randint(1, 3)
        still = []
        for req in self.running:
            done = req.generated >= req.max_new
            events.append(("token", req.rid, req.generated, done, req.cached, dict(req.cached_details),
                           req.spec_verify_ct))
            if done:
                self.m.observe_per_stage_req_latency("decode_loop", now - req.prefilled_at)
                if cfg.mode == "decode":
                    self.deferred.append((self.step_no + self.rng.randint(1, 6), req))
            else:
                still.append(req)
        self.running = still
        self.emit(events)
        if self.step_no % cfg.decode_log_interval == 0:
            self.report("decode", now)
        return generated

    # --- the report -----------------------------------------------------------------------------------

    def report(self, kind: str, now: float) -> None:
        cfg = self.cfg
        used = self.used_tokens()
        capacity = cfg.max_total_tokens
        evictable = min(capacity - used, sum(self.known_tokens.values()) // 4)
        evictable = max(0, evictable)
        full_usage = used / capacity
        swa_used = min(capacity // 4, used // 5)
        stats = SchedulerStats()
        stats.num_running_reqs = self.queue_count(self.running)
        stats.num_queue_reqs = self.queue_count(self.waiting)
        stats.num_grammar_queue_reqs = len(self.grammar_queue)
        if kind == "decode":
            stats.gen_throughput = self.throughput.record_decode(self.generated_since_log, now)
            self.generated_since_log = 0
            accept_tokens, forward_ct, correct = self.spec_window
            stats.spec_accept_length, stats.spec_accept_rate = spec_accept(accept_tokens, forward_ct, correct, 4, 3)
            self.spec_window = [0.0, 0.0, 0.0]
        else:
            stats.gen_throughput = self.throughput.current(now)
        stats.cache_hit_rate = self.cache_rate
        stats.decode_sum_seq_lens = sum(r.kv() for r in self.running)
        stats.full_token_usage = full_usage
        stats.swa_token_usage = swa_used / (capacity // 4)
        stats.mamba_usage = 0.0
        stats.token_usage = round(max(full_usage, stats.swa_token_usage), 2)
        stats.num_used_tokens = used
        stats.kv_available_tokens = capacity - used - evictable
        stats.kv_evictable_tokens = evictable
        stats.kv_used_tokens = used
        stats.swa_available_tokens = capacity // 4 - swa_used
        stats.swa_evictable_tokens = 0
        stats.swa_used_tokens = swa_used
        stats.spec_cap_length = 4.0 if cfg.speculative else 0.0
        stats.spec_block_accept_length = stats.spec_accept_length
        stats.spec_num_steps = 3 if cfg.speculative else 0
        stats.spec_num_draft_tokens = 4 if cfg.speculative else 0
        stats.num_retracted_reqs = self.retracted_since_report
        stats.num_paused_reqs = self.paused_since_report
        self.retracted_since_report = self.paused_since_report = 0
        stats.num_prefill_bootstrap_queue_reqs = self.queue_count([r for _, r in self.bootstrap])
        stats.num_prefill_inflight_queue_reqs = self.queue_count([r for _, r in self.inflight])
        stats.num_decode_prealloc_queue_reqs = self.queue_count([r for _, r in self.prealloc])
        stats.num_decode_transfer_queue_reqs = self.queue_count([r for _, r in self.transfer])
        stats.pending_prealloc_token_usage = sum(r.prompt for _, r in self.prealloc) / capacity
        stats.num_decode_deferred_kv_release_reqs = len(self.deferred)
        stats.utilization = utilization(cfg.mode, len(self.running), cfg.max_running_under_slo, stats.token_usage)
        stats.fwd_occupancy = min(100.0, 40.0 + 55.0 * full_usage) if self.running else 0.0
        stats.new_token_ratio = 0.4 + 0.3 * full_usage
        stats.is_cuda_graph = 1 if kind == "decode" else 0
        if cfg.lora:
            stats.lora_pool_slots_total = 8
            stats.lora_pool_slots_used = min(8, len({r.routing_key for r in self.running}) // 2)
            stats.lora_pool_utilization = stats.lora_pool_slots_used / 8
        if cfg.hicache:
            stats.hicache_host_total_tokens = capacity * 4
            stats.hicache_host_used_tokens = min(capacity * 4, sum(self.known_tokens.values()))
        stats.num_streaming_sessions = len({r.routing_key for r in self.running}) // 3
        stats.streaming_session_held_tokens = stats.num_streaming_sessions * 512
        counts: Dict[str, int] = {}
        for r in self.running:
            counts[r.routing_key] = counts.get(r.routing_key, 0) + 1
        every = dict(counts)
        for r in self.waiting:
            every[r.routing_key] = every.get(r.routing_key, 0) + 1
        stats.num_unique_running_routing_keys = len(counts)
        stats.routing_key_running_req_counts = list(counts.values())
        stats.routing_key_all_req_counts = list(every.values())
        getattr(self.m, f"log_{kind}_stats")(stats)
        self.last_report_time = now

    # --- DP attention, caches and the rest ------------------------------------------------------------

    def dp_balance(self, tokens: int, pairs: int, forward_mode: int) -> None:
        b = self.balance
        if b is None or self.cfg.dp_rank is None:
            return
        g = self.cfg.dp_rank
        b["tokens"][g] = tokens
        b["pairs"][g] = pairs
        b["mode"][g] = forward_mode
        all_tokens = list(b["tokens"])
        all_pairs = list(b["pairs"])
        if max(all_tokens) <= 0:
            return
        if max(all_pairs) <= 0:
            all_pairs = [max(1, t) for t in all_tokens]
        stats = DPBalanceStats.create(local_tokens=tokens, global_num_tokens=all_tokens, local_attention_pairs=pairs,
                                      global_attention_pairs=all_pairs,
                                      sync_wait_seconds=self.rng.uniform(0.0001, 0.004))
        self.m.observe_dp_balance(stats)

    def background(self, now: float) -> None:
        cfg = self.cfg
        if self.step_no % 25 != 3:
            return
        rng = self.rng
        # Prefix cache eviction and, with HiCache, host backup and load-back.
        evicted = rng.randint(64, 4096)
        self.radix.observe_eviction_duration(rng.uniform(0.0005, 0.02))
        self.radix.increment_eviction_num_tokens(evicted)
        if cfg.hicache:
            self.radix.observe_backup_duration(rng.uniform(0.001, 0.5))
            self.radix.increment_backup_num_tokens(evicted // 2, "kv")
            self.radix.increment_backup_num_bytes(evicted // 2 * 160_000)
            self.radix.observe_load_back_duration(rng.uniform(0.0005, 0.05))
            self.radix.increment_load_back_num_tokens(rng.randint(32, 2048), "kv")
            self.radix.increment_load_back_num_bytes(rng.randint(32, 2048) * 160_000)
            self.radix.increment_dropped_tokens(rng.randint(1, 64), "host_full", "kv")
            for k in self.prefetch_totals:
                self.prefetch_totals[k] += rng.randint(0, 5)
            self.storage.log_storage_metrics(StorageMetrics(
                prefetch_pgs=[rng.randint(1, 64)], backup_pgs=[rng.randint(1, 64)],
                prefetch_bandwidth=[rng.uniform(0.2, 40)], backup_bandwidth=[rng.uniform(0.2, 40)],
                prefetch_stats=dict(self.prefetch_totals)))
            self.storage.log_prefetched_tokens(rng.randint(64, 4096))
            self.storage.log_backuped_tokens(rng.randint(64, 4096))
            self.storage.log_backup_dropped_tokens(rng.randint(1, 32))
            self.storage.log_prefetch_aux_alloc_failed_tokens(rng.randint(1, 16))
            self.storage.log_prefetch_hit_tokens(rng.randint(64, 2048))
            self.storage.log_prefetch_unfulfilled_tokens(rng.randint(1, 256))
            self.storage.log_prefetch_deferred_tokens(rng.randint(1, 256))
        if self.experts is not None:
            for layer in range(2):
                for _ in range(cfg.tp_size):
                    self.experts.eplb_gpu_physical_count.labels(layer=str(layer)).observe(
                        rng.randint(0, cfg.tp_size - 1))
        if self.step_no % 750 == 3:
            self.m.observe_weight_load(rng.uniform(1, 8), rng.choice(["disk", "distributed", "tensor", "ipc"]))

    def flush_mirrors(self) -> None:
        if self.mirrors and self.calls:
            calls, self.calls[:] = list(self.calls), []
            for q in self.mirrors:
                q.put(calls)

    def run(self, stop) -> None:
        cfg = self.cfg
        next_tick = time.monotonic()
        try:
            while not stop.is_set():
                self.step()
                next_tick += cfg.step_seconds
                delay = next_tick - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_tick = time.monotonic()
        finally:
            for q in self.mirrors:
                q.put(None)
            self.reporter.close()


def run_mirror(cfg: RankConfig, inbox, stop) -> None:
    """An attention-TP rank other than 0: it sees the same batches as its group's rank 0 and replays its
    collector calls into its own segment (exported only in all-schedulers mode, as in SGLang)."""
    collectors = open_collectors(cfg)
    try:
        while not stop.is_set():
            try:
                calls = inbox.get(timeout=0.5)
            except queue.Empty:
                collectors["scheduler"].reporter.heartbeat()
                continue
            if calls is None:
                break
            for target, method, args, kwargs in calls:
                getattr(collectors[target], method)(*args, **kwargs)
            collectors["scheduler"].reporter.heartbeat()
    finally:
        collectors["scheduler"].reporter.close()
