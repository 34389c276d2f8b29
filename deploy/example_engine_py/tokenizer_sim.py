"""The simulated tokenizer manager / HTTP front end: requests arrive (Poisson, load swinging slowly),
go through HTTP accounting, are dispatched to the DP groups (and to the PD pair when it runs), and the
output batches coming back are turned into SGLang's request metrics: TTFT (never for aborts, never on
the PD prefill side), ITL with the bulk observe, E2E, TPOT (none for 0 or 1 output token), token counts
by cache tier, aborts."""

from __future__ import annotations

import math
import queue
import random
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from rankstat import Reporter
from rankstat.sglang import (HttpMetrics, TokenizerMetricsCollector, enable_func_timer, should_observe_ttft,
                             time_func_latency, time_per_output_token)

from scheduler_sim import ROUTING_KEYS

ENDPOINTS = [("/generate", "POST"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST")]


@dataclass
class State:
    rid: int
    created: float
    prompt: int
    stream: bool
    grammar: bool
    labels: Dict[str, str]
    http: Any
    collector: TokenizerMetricsCollector
    side: str                      # unified, prefill, decode
    first_token_time: float = 0.0
    last_time: float = 0.0
    last_completion: int = 0
    ttft_observed: bool = False
    aborted: bool = False


@dataclass
class FrontendConfig:
    model_name: str
    instance: str
    priorities: bool
    arrival_rate: float
    extra_labels: Dict[str, str]
    custom_labels: List[str]
    pd_instance_prefill: Optional[str] = None
    pd_instance_decode: Optional[str] = None
    pd_arrival_rate: float = 4.0
    abort_ratio: float = 0.02
    seed: int = 1


def tokenizer_labels(cfg: FrontendConfig, engine_type: str) -> Dict[str, str]:
    labels = {"model_name": cfg.model_name, "engine_type": engine_type}
    if cfg.priorities:
        labels["priority"] = ""
    for name in cfg.custom_labels:
        labels[name] = ""
    labels.update(cfg.extra_labels)
    return labels


class Frontend:
    def __init__(self, cfg: FrontendConfig, dp_queues: List, outputs, pd_prefill_queue=None):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.dp_queues = dp_queues
        self.pd_prefill_queue = pd_prefill_queue
        self.outputs = outputs
        self.collector = TokenizerMetricsCollector(
            labels=tokenizer_labels(cfg, "unified"), allowed_custom_labels=cfg.custom_labels,
            prompt_tokens_buckets=["default"], bucket_time_to_first_token=None, instance=cfg.instance)
        self.http = HttpMetrics(self.collector.reporter)
        enable_func_timer(self.collector.reporter)
        self.pd: Dict[str, TokenizerMetricsCollector] = {}
        if cfg.pd_instance_prefill and pd_prefill_queue is not None:
            for side, instance in (("prefill", cfg.pd_instance_prefill), ("decode", cfg.pd_instance_decode)):
                reporter = Reporter(role="tokenizer", instance=instance, rank_key=f"tokenizer-{side}",
                                    model_name=cfg.model_name, engine_type=side, priority_scheduling=cfg.priorities,
                                    extra_labels={**{n: "" for n in cfg.custom_labels}, **cfg.extra_labels})
                self.pd[side] = TokenizerMetricsCollector(labels=tokenizer_labels(cfg, side), reporter=reporter,
                                                          allowed_custom_labels=cfg.custom_labels)
        self.states: Dict[int, State] = {}
        self.next_rid = 1
        self.dispatched = 0
        self.started = time.monotonic()
        startup = {"load_weight": 12.5, "kv_cache_allocation": 3.1, "scheduler_e2e": 21.0, "tokenizer_e2e": 23.4,
                   "cuda_graph": {"decode": 6.2, "prefill": 2.4}}
        self.collector.emit_startup_time(startup)
        for c in self.pd.values():
            c.emit_startup_time(startup)
        self.last_loads = 0.0

    # --- requests --------------------------------------------------------------------------------------

    def new_request(self, now: float, side: str) -> Optional[tuple]:
        rng = self.rng
        rid = self.next_rid
        self.next_rid += 1
        endpoint, method = rng.choice(ENDPOINTS)
        key = rng.choice(ROUTING_KEYS)
        custom = {name: rng.choice(["team-a", "team-b"]) for name in self.cfg.custom_labels}
        collector = self.collector if side == "unified" else self.pd["decode"]
        labels = collector.labels_for_request(custom)
        http = self.http.request_started(endpoint, method, key) if side == "unified" else None
        prompt = int(rng.lognormvariate(math.log(900), 0.7)) + 16
        max_new = int(rng.lognormvariate(math.log(120), 0.8)) + 1
        if rng.random() < 0.03:
            max_new = 1  # one-token answers: no TPOT
        priority = rng.choice([0, 1, 2]) if self.cfg.priorities else None
        grammar = rng.random() < 0.1
        state = State(rid, now, prompt, rng.random() < 0.7, grammar, labels, http, collector, side)
        self.states[rid] = state
        return (rid, prompt, max_new, priority, now, key, grammar)

    def arrivals(self, now: float, dt: float) -> None:
        swing = 1.0 + 0.6 * math.sin((now - self.started) / 15.0)
        for _ in range(self._poisson(self.cfg.arrival_rate * swing * dt)):
            item = self.new_request(now, "unified")
            group = self.dispatched % len(self.dp_queues)
            self.dispatched += 1
            self.dp_queues[group].put(item)
        if self.pd_prefill_queue is not None and self.pd:
            for _ in range(self._poisson(self.cfg.pd_arrival_rate * dt)):
                # The router sends each request to both servers of the pair: the prefill side accounts its
                # part when the prefill is done, the decode side the rest.
                self.pd_prefill_queue.put(self.new_request(now, "decode"))

    def _poisson(self, mean: float) -> int:
        limit, k, p = math.exp(-mean), 0, 1.0
        while True:
            p *= self.rng.random()
            if p <= limit:
                return k
            k += 1

    # --- outputs ---------------------------------------------------------------------------------------

    def handle(self, event: tuple, now: float) -> None:
        kind, rid = event[0], event[1]
        state = self.states.get(rid)
        if state is None:
            return
        if kind == "abort":
            self.finish_aborted(state, now)
            return
        if kind == "done_prefill":
            # The PD prefill server finishes its part: one token, no TTFT there (it never decodes).
            _, _, cached, details = event
            prefill = self.pd["prefill"]
            if should_observe_ttft(None, "prefill"):
                prefill.observe_time_to_first_token(prefill.labels, now - state.created, stream=state.stream)
            prefill.observe_one_finished_request(prefill.labels, state.prompt, 1, cached, now - state.created,
                                                 state.grammar, details, 0, state.stream)
            return
        _, _, completion, finished, cached, details, spec_verify_ct = event
        c = state.collector
        if not state.ttft_observed:
            if not state.aborted and self.rng.random() < self.cfg.abort_ratio and not finished:
                self.finish_aborted(state, now)
                return
            state.ttft_observed = True
            state.first_token_time = now
            state.last_completion = completion
            if should_observe_ttft("length" if finished else None, "null" if state.side != "prefill" else "prefill"):
                c.observe_time_to_first_token(state.labels, now - state.created, stream=state.stream)
        else:
            c.observe_inter_token_latency(state.labels, now - state.last_time, completion - state.last_completion)
            state.last_completion = completion
        state.last_time = now
        if finished:
            del self.states[rid]
            c.observe_one_finished_request(state.labels, state.prompt, completion, cached, now - state.created,
                                           state.grammar, details, spec_verify_ct, state.stream)
            c.observe_time_per_output_token(state.labels,
                                            time_per_output_token(state.first_token_time, now, completion))
            if state.http is not None:
                self.http.request_finished(state.http, 200)
                self.generate_request_done(now - state.created)

    @time_func_latency(name="generate_request")
    def generate_request_done(self, seconds: float) -> None:
        # SGLang times its generate_request handler; here the handler's work is the bookkeeping above.
        pass

    def finish_aborted(self, state: State, now: float) -> None:
        self.states.pop(state.rid, None)
        state.aborted = True
        state.collector.observe_one_aborted_request(state.labels)
        if state.http is not None:
            self.http.request_finished(state.http, 499)

    def loads(self, now: float) -> None:
        if now - self.last_loads < 1.0:
            return
        self.last_loads = now
        start = time.perf_counter()
        _ = {"running": len(self.states)}
        self.collector.observe_get_loads_duration(time.perf_counter() - start + self.rng.uniform(0.0001, 0.004))
        token = self.http.request_started("/v1/loads", "GET")
        self.http.request_finished(token, 200)

    def run(self, stop, tick: float = 0.01) -> None:
        last = time.monotonic()
        try:
            while not stop.is_set():
                now = time.monotonic()
                self.arrivals(now, now - last)
                last = now
                deadline = now + tick
                while True:
                    timeout = deadline - time.monotonic()
                    if timeout <= 0:
                        break
                    try:
                        events = self.outputs.get(timeout=timeout)
                    except queue.Empty:
                        break
                    t = time.monotonic()
                    for event in events:
                        self.handle(event, t)
                self.loads(time.monotonic())
                self.collector.reporter.heartbeat()
                for c in self.pd.values():
                    c.reporter.heartbeat()
        finally:
            self.collector.reporter.close()
            for c in self.pd.values():
                c.reporter.close()
