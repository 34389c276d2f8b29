"""A tiny load model for the example engine: requests arrive, run and finish; per step it yields the
numbers a scheduler reports and the requests that finished. No SGLang logic: only plausible values
to put through rankstat."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import List


@dataclass
class Finished:
    prompt_tokens: int
    generation_tokens: int
    cached_tokens: int
    ttft: float
    e2e: float


@dataclass
class Step:
    num_running_reqs: int
    num_queue_reqs: int
    gen_throughput: float
    token_usage: float
    cache_hit_rate: float
    kv_used_tokens: int
    kv_available_tokens: int
    spec_accept_length: float
    finished: List[Finished] = field(default_factory=list)


class LoadModel:
    """One rank's load: Poisson arrivals at a slowly swinging rate, a bounded batch, a KV pool."""

    def __init__(self, arrival_rate: float, step_seconds: float, seed: int, max_running: int = 64,
                 kv_tokens: int = 65536):
        self.rng = random.Random(seed)
        self.rate, self.dt = arrival_rate, step_seconds
        self.max_running, self.kv_tokens = max_running, kv_tokens
        self.queue: List[list] = []    # [prompt, to_generate, generated, arrival_time]
        self.running: List[list] = []
        self.now = 0.0

    def step(self) -> Step:
        self.now += self.dt
        rate = self.rate * (1.0 + 0.5 * math.sin(self.now / 20.0))
        for _ in range(self._poisson(rate * self.dt)):
            self.queue.append([self.rng.randint(64, 2048), self.rng.randint(16, 512), 0, self.now, None])
        while self.queue and len(self.running) < self.max_running:
            req = self.queue.pop(0)
            req[4] = self.now + self.dt  # first token after one prefill step
            self.running.append(req)
        accept = 1.0 + self.rng.random() * 2.0
        done, generated = [], 0
        for req in self.running:
            n = max(1, int(accept))
            req[2] += n
            generated += n
        for req in [r for r in self.running if r[2] >= r[1]]:
            self.running.remove(req)
            cached = int(req[0] * self.rng.random() * 0.6)
            done.append(Finished(req[0], req[2], cached, req[4] - req[3], self.now - req[3]))
        used = sum(r[0] + r[2] for r in self.running)
        return Step(num_running_reqs=len(self.running), num_queue_reqs=len(self.queue),
                    gen_throughput=generated / self.dt, token_usage=min(1.0, used / self.kv_tokens),
                    cache_hit_rate=self.rng.random() * 0.5, kv_used_tokens=min(used, self.kv_tokens),
                    kv_available_tokens=max(0, self.kv_tokens - used), spec_accept_length=accept, finished=done)

    def _poisson(self, mean: float) -> int:
        k, p, limit = 0, 1.0, math.exp(-mean)
        while True:
            p *= self.rng.random()
            if p <= limit:
                return k
            k += 1
