"""Reporting without SGLang: the scheduler's numbers as one typed snapshot per step
(Reporter.snapshot_packer, one C call), the tokenizer's per-request numbers through a few families
declared with rankstat's prometheus_client-compatible classes."""

from __future__ import annotations

from typing import Dict, List

import rankstat
from rankstat import backend

from load_model import Finished, Step

# Every step of the load model is a decode step: the report kind, looked up once.
DECODE = rankstat.ReportKind.DECODE


class SchedulerReporter:
    def __init__(self, *, instance: str, model_name: str, engine_type: str, tp_rank: int, dp_rank, rank_key=None,
                 extra_labels: Dict[str, str], tp_size: int, dp_size: int, dp_attention: bool, all_schedulers: bool,
                 priorities: bool):
        self.reporter = rankstat.Reporter(
            role="scheduler", instance=instance, rank_key=rank_key, model_name=model_name, engine_type=engine_type,
            tp_rank=tp_rank, dp_rank=dp_rank, tp_size=tp_size, dp_size=dp_size, dp_attention=dp_attention,
            all_schedulers=all_schedulers, priority_scheduling=priorities, extra_labels=extra_labels)
        self.packer = self.reporter.snapshot_packer()
        self.values: List[float] = [0] * len(self.packer.field_names)
        self.position = {name: i for i, name in enumerate(self.packer.field_names)}

    def report(self, step: Step) -> None:
        for name, value in vars(step).items():
            i = self.position.get(name)
            if i is not None:
                self.values[i] = value
        self.packer.send(self.values, kind=DECODE)
        self.reporter.heartbeat()


class TokenizerReporter:
    def __init__(self, *, model_name: str, extra_labels: Dict[str, str]):
        self.labels = {"model_name": model_name, "engine_type": "unified", **extra_labels}
        backend.segment().hint_identity("tokenizer", self.labels)
        names = list(self.labels)
        self.requests = rankstat.Counter("sglang:num_requests_total", "Number of requests processed.", names)
        self.prompt = rankstat.Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", names)
        self.generation = rankstat.Counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                                           names)
        self.ttft = rankstat.Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in "
                                       "seconds.", names, buckets=[0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30])
        self.e2e = rankstat.Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request "
                                      "latency in seconds", names, buckets=[0.5, 1, 2, 5, 10, 30, 60, 120])

    def finished(self, req: Finished) -> None:
        kw = self.labels
        self.requests.labels(**kw).inc()
        self.prompt.labels(**kw).inc(req.prompt_tokens)
        self.generation.labels(**kw).inc(req.generation_tokens)
        self.ttft.labels(**kw).observe(req.ttft)
        self.e2e.labels(**kw).observe(req.e2e)
