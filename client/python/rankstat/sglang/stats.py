"""Stats objects shaped like SGLang's (observability/metrics_collector.py and friends).

The collectors accept SGLang's own objects or these: they only read attributes by name, so any object
with the same attribute names works (a missing attribute counts as 0 / empty).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional


@dataclass
class QueueCount:
    """A queue length with an optional per-priority breakdown (priority=None allowed, as in SGLang)."""

    total: int = 0
    by_priority: Optional[Dict[Any, int]] = None

    @classmethod
    def from_priorities(cls, priorities: Iterable[Any], enable_priority_scheduling: bool = False) -> "QueueCount":
        """From the priorities of the requests in the queue, in one pass."""
        items = list(priorities)
        by_priority = dict(collections.Counter(items)) if enable_priority_scheduling else None
        return cls(total=len(items), by_priority=by_priority)

    @classmethod
    def from_reqs(cls, reqs: Iterable[Any], enable_priority_scheduling: bool = False) -> "QueueCount":
        """From request objects with a `priority` attribute (SGLang's Req)."""
        return cls.from_priorities((getattr(r, "priority", None) for r in reqs), enable_priority_scheduling)


@dataclass
class SchedulerStats:
    """SGLang's SchedulerStats, field for field. Queue fields take a QueueCount or a plain int."""

    # Basics
    num_running_reqs: Any = field(default_factory=QueueCount)
    num_queue_reqs: Any = field(default_factory=QueueCount)
    num_grammar_queue_reqs: int = 0
    gen_throughput: float = 0.0
    cache_hit_rate: float = 0.0
    decode_sum_seq_lens: int = 0
    # Pools
    token_usage: float = 0.0
    full_token_usage: float = 0.0
    swa_token_usage: float = 0.0
    mamba_usage: float = 0.0
    num_used_tokens: int = 0
    kv_available_tokens: int = 0
    kv_evictable_tokens: int = 0
    kv_used_tokens: int = 0
    swa_available_tokens: int = 0
    swa_evictable_tokens: int = 0
    swa_used_tokens: int = 0
    mamba_available_tokens: int = 0
    mamba_evictable_tokens: int = 0
    mamba_used_tokens: int = 0
    # Speculative decoding
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    spec_cap_length: float = 0.0
    spec_block_accept_length: float = 0.0
    spec_num_steps: int = 0
    spec_num_draft_tokens: int = 0
    # Retraction
    num_retracted_reqs: int = 0
    num_paused_reqs: int = 0
    # PD disaggregation
    num_prefill_bootstrap_queue_reqs: Any = field(default_factory=QueueCount)
    num_prefill_inflight_queue_reqs: Any = field(default_factory=QueueCount)
    num_decode_prealloc_queue_reqs: Any = field(default_factory=QueueCount)
    num_decode_transfer_queue_reqs: Any = field(default_factory=QueueCount)
    kv_transfer_speed_gb_s: float = 0.0
    kv_transfer_latency_ms: float = 0.0
    pending_prealloc_token_usage: float = 0.0
    num_decode_deferred_kv_release_reqs: int = 0
    # Utilization
    utilization: float = 0.0
    fwd_occupancy: float = float("nan")
    # Scheduler policy
    new_token_ratio: float = 0.0
    # CUDA graph
    is_cuda_graph: int = 0
    # LoRA
    lora_pool_slots_used: int = 0
    lora_pool_slots_total: int = 0
    lora_pool_utilization: float = 0.0
    # HiCache
    hicache_host_used_tokens: int = 0
    hicache_host_total_tokens: int = 0
    # Streaming sessions
    num_streaming_sessions: int = 0
    streaming_session_held_tokens: int = 0
    # Routing keys
    num_unique_running_routing_keys: int = 0
    routing_key_running_req_counts: List[int] = field(default_factory=list)
    routing_key_all_req_counts: List[int] = field(default_factory=list)


@dataclass
class DPCooperationInfo:
    """How many DP ranks ran extend-like (prefill) work in this step; a label of the dp_cooperation_*
    counters."""

    num_prefill_ranks: int

    def to_labels(self) -> Dict[str, str]:
        return {"num_prefill_ranks": str(self.num_prefill_ranks)}


@dataclass
class DPBalanceStats:
    """One synchronized DP-attention step as seen by one rank (the reference article's DPBalanceStats)."""

    local_tokens: int
    max_tokens: int
    sum_tokens: int
    local_attention_pairs: int
    max_attention_pairs: int
    num_ranks: int
    sync_wait_seconds: float = 0.0

    @classmethod
    def create(cls, *, local_tokens: int, global_num_tokens: Iterable[int], local_attention_pairs: int,
               global_attention_pairs: Iterable[int], sync_wait_seconds: float = 0.0) -> "DPBalanceStats":
        """From the gathered per-rank token and pair counts. Raises ValueError when no rank had tokens
        (an idle step is not a balance sample) or when a rank with tokens attends no pair (a gather or
        pair-count bug, not a quiet step)."""
        tokens = list(global_num_tokens)
        pairs = list(global_attention_pairs)
        max_tokens = max(tokens) if tokens else 0
        if max_tokens == 0:
            raise ValueError("DP balance stats need a rank with tokens")
        max_pairs = max(pairs) if pairs else 0
        if max_pairs == 0:
            raise ValueError("a rank with tokens attends at least one query-key pair")
        return cls(local_tokens=local_tokens, max_tokens=max_tokens, sum_tokens=sum(tokens),
                   local_attention_pairs=local_attention_pairs, max_attention_pairs=max_pairs,
                   num_ranks=len(tokens), sync_wait_seconds=sync_wait_seconds)

    def __post_init__(self) -> None:
        if self.max_tokens == 0:
            raise ValueError("DP balance stats need a rank with tokens")
        if self.max_attention_pairs == 0:
            raise ValueError("a rank with tokens attends at least one query-key pair")

    @property
    def imbalance_tokens(self) -> int:
        return self.max_tokens - self.local_tokens

    @property
    def imbalance_attention_pairs(self) -> int:
        return self.max_attention_pairs - self.local_attention_pairs

    @property
    def max_over_mean(self) -> float:
        return self.max_tokens * self.num_ranks / self.sum_tokens if self.sum_tokens else math.nan


@dataclass
class GrammarStats:
    """What SGLang's log_grammar_stats reads."""

    compilation_time: Optional[float] = None
    schema_count: Optional[int] = None
    ebnf_size: Optional[int] = None
    tree_traversal_time: List[float] = field(default_factory=list)
    is_cache_hit: bool = False
    is_grammar_aborted: bool = False
    num_timeout: int = 0


@dataclass
class StorageMetrics:
    """HiCache L3 storage metrics of one interval (SGLang's StorageMetrics)."""

    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)
    prefetch_stats: Mapping[str, float] = field(default_factory=dict)
