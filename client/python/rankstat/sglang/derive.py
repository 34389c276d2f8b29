"""Derived values with SGLang's edge cases, for engines that compute them themselves (and for the
example engine). Each function states the rule it implements.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional, Tuple

GEN_THROUGHPUT_STALENESS_SECONDS = 30.0


def time_to_first_token(created_time: float, first_token_time: float) -> Optional[float]:
    """first_token - created; None when no first token was seen (first_token_time 0, e.g. an embedding
    request or an abort before output)."""
    if first_token_time <= 0.0:
        return None
    return first_token_time - created_time


def should_observe_ttft(finish_type: Optional[str], disaggregation_mode: Optional[str]) -> bool:
    """TTFT is observed once per request, never for an aborted request and never on a PD prefill node
    (its requests do not decode there)."""
    if finish_type == "abort":
        return False
    return str(disaggregation_mode or "null").lower() not in ("prefill", "disaggregationmode.prefill")


def time_per_output_token(first_token_time: float, finished_time: float, completion_tokens: int) -> Optional[float]:
    """TPOT = decode latency / (completion_tokens - 1): the first token belongs to TTFT. None when there
    is no first token, one token or fewer (no decode interval: not 'very fast'), or a non-positive decode
    latency."""
    if first_token_time <= 0.0 or completion_tokens <= 1:
        return None
    decode_latency = finished_time - first_token_time
    if decode_latency <= 0.0:
        return None
    return decode_latency / (completion_tokens - 1)


def inter_token_bulk(interval: float, num_new_tokens: int) -> Optional[Tuple[float, int, float]]:
    """SGLang's bulk ITL observe for an output batch that brought `num_new_tokens` tokens after
    `interval` seconds: (per-token value that picks the bucket, samples, sum increment) =
    (interval / n, n, interval). None when no new token arrived (a stop-string confirmation or a
    speculative rollback), which must not become a sample."""
    if num_new_tokens <= 0:
        return None
    return interval / num_new_tokens, num_new_tokens, interval


class GenThroughput:
    """Decode-owned generation throughput with the staleness rule: the last decode report's
    tokens / elapsed, falling to 0 once no decode report has come for `staleness_seconds` (so an idle
    engine does not show its last burst forever). pause() zeroes it at once, as SGLang's
    pause_generation does."""

    def __init__(self, staleness_seconds: float = GEN_THROUGHPUT_STALENESS_SECONDS,
                 clock: Callable[[], float] = time.perf_counter):
        self.staleness_seconds = staleness_seconds
        self._clock = clock
        self._last_tic = clock()
        self._last_decode_tic: Optional[float] = None
        self._value = 0.0

    def record_decode(self, num_generated_tokens: int, now: Optional[float] = None) -> float:
        now = self._clock() if now is None else now
        elapsed = now - self._last_tic
        self._value = num_generated_tokens / elapsed if elapsed > 0 else 0.0
        self._last_tic = now
        self._last_decode_tic = now
        return self._value

    def current(self, now: Optional[float] = None) -> float:
        now = self._clock() if now is None else now
        if self._last_decode_tic is None or now - self._last_decode_tic > self.staleness_seconds:
            self._value = 0.0
        return self._value

    def pause(self) -> None:
        self._value = 0.0


def cache_hit_rate(input_tokens: int, hit_tokens: int, reprocessed_input_tokens: int = 0,
                   reprocessed_hit_tokens: int = 0) -> float:
    """Prefill-owned hit rate of one prefill batch: effective hits / (effective input + effective hits),
    where tokens a retracted request recomputes or re-hits are taken out (they are not new savings)."""
    eff_input = max(0, input_tokens - reprocessed_input_tokens)
    eff_hit = max(0, hit_tokens - reprocessed_hit_tokens)
    total = eff_input + eff_hit
    return eff_hit / total if total > 0 else 0.0


def spec_accept(num_accept_tokens: float, num_forward_ct: float, num_correct_drafts: float,
                speculative_num_draft_tokens: Optional[int],
                speculative_num_steps: Optional[int]) -> Tuple[float, float]:
    """(spec_accept_length, spec_accept_rate) over one decode log window.
    accept_length = tokens produced per verify (accepted drafts plus the bonus token);
    accept_rate = accepted drafts / drafts proposed, drafts per round = num_draft_tokens - 1, or
    num_steps when draft tokens are not set."""
    if num_forward_ct <= 0:
        return 0.0, 0.0
    accept_length = num_accept_tokens / num_forward_ct
    if speculative_num_draft_tokens:
        draft_per_round = speculative_num_draft_tokens - 1
    else:
        draft_per_round = speculative_num_steps or 0
    total_drafts = num_forward_ct * draft_per_round
    return accept_length, (num_correct_drafts / total_drafts if total_drafts > 0 else 0.0)


def utilization(disaggregation_mode: Optional[str], num_running_reqs: int,
                max_running_requests_under_slo: Optional[int], token_usage: float) -> float:
    """-1 on a PD prefill node; else max(running / max_running_requests_under_SLO, token_usage / 0.9)
    when that SLO limit is set and positive; 0 otherwise."""
    if str(disaggregation_mode or "").lower() in ("prefill", "disaggregationmode.prefill"):
        return -1.0
    if max_running_requests_under_slo is not None and max_running_requests_under_slo > 0:
        return max(num_running_reqs / max_running_requests_under_slo, token_usage / 0.9)
    return 0.0


def max_pool_usage(full_token_usage: float, swa_token_usage: Optional[float] = None,
                   mamba_usage: Optional[float] = None) -> float:
    """token_usage: whichever pool fills first stalls the engine."""
    usage = full_token_usage
    if swa_token_usage is not None:
        usage = max(usage, swa_token_usage)
    if mamba_usage is not None:
        usage = max(usage, mamba_usage)
    return usage


def fwd_occupancy(gpu_seconds: float, wall_seconds: float) -> float:
    """Percent of wall time in forward passes, capped at 100; NaN without a measurement."""
    if wall_seconds <= 0:
        return math.nan
    return min(gpu_seconds / wall_seconds * 100.0, 100.0)
