"""Which segment a collector writes to. SGLang builds several collectors per process from the same
labels (scheduler, radix cache, storage); they share one segment per rank, opened by whichever comes
first. Settings SGLang's labels do not carry (the engine instance id, attention ranks, all-schedulers
mode) come from configure(), keyword arguments, server_args or the environment, in that order of
precedence: keyword argument, configure(), environment, server_args."""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from ..reporter import Reporter

_lock = threading.Lock()
_segments: Dict[Tuple, Reporter] = {}
_defaults: Dict[str, Any] = {}
_last_scheduler: Optional[Reporter] = None

SCHEDULER_BASE = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "priority", "dp_rank")
TOKENIZER_BASE = ("model_name", "engine_type", "priority")

_ENV = {
    "instance": "RANKSTAT_INSTANCE",
    "attn_tp_rank": "RANKSTAT_ATTN_TP_RANK",
    "attn_dp_rank": "RANKSTAT_ATTN_DP_RANK",
    "attn_cp_rank": "RANKSTAT_ATTN_CP_RANK",
    "all_schedulers": "RANKSTAT_ALL_SCHEDULERS",
}


def configure(**options: Any) -> None:
    """Process-wide defaults for the collectors: instance, shm_dir, attn_tp_rank, attn_dp_rank,
    attn_cp_rank, all_schedulers, dp_attention, tp_size, dp_size, pp_size, ring_bytes, series_capacity."""
    _defaults.update(options)


def current_scheduler_segment() -> Optional[Reporter]:
    """The scheduler segment this process opened last (collectors SGLang builds without labels use it)."""
    r = _last_scheduler
    return r if r is not None and r.is_open else None


def reset() -> None:
    """Closes every shared segment and forgets configure() (for tests)."""
    global _last_scheduler
    with _lock:
        _last_scheduler = None
        for r in _segments.values():
            r.close()
        _segments.clear()
        _defaults.clear()


def _option(name: str, overrides: Mapping[str, Any], server_args: Any, server_name: Optional[str] = None,
            default: Any = None) -> Any:
    if overrides.get(name) is not None:
        return overrides[name]
    if _defaults.get(name) is not None:
        return _defaults[name]
    env = _ENV.get(name)
    if env and os.environ.get(env):
        value = os.environ[env]
        if name == "all_schedulers":
            return value.lower() in ("1", "true", "yes", "on")
        return value if name == "instance" else int(value)
    if server_args is not None and server_name is not None:
        value = getattr(server_args, server_name, None)
        if value is not None:
            return value
    return default


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def attention_ranks(tp_rank: int, dp_rank: Optional[int], server_args: Any, overrides: Mapping[str, Any]):
    """(attn_tp_rank, attn_dp_rank, attn_cp_rank, dp_attention): explicit values win; with DP attention the
    tp ranks split into dp_size groups of tp_size / dp_size attention-TP ranks."""
    tp_size = _int(_option("tp_size", overrides, server_args, "tp_size", 1), 1)
    dp_size = _int(_option("dp_size", overrides, server_args, "dp_size", 1), 1)
    dp_attention = bool(_option("dp_attention", overrides, server_args, "enable_dp_attention", False))
    if dp_attention and dp_size > 1 and tp_size % dp_size == 0:
        attn_tp_size = tp_size // dp_size
        attn_tp, attn_dp = tp_rank % attn_tp_size, tp_rank // attn_tp_size
    else:
        attn_tp, attn_dp = tp_rank, (dp_rank if dp_rank is not None else 0)
    attn_tp = _int(_option("attn_tp_rank", overrides, None, default=attn_tp), attn_tp)
    attn_dp = _int(_option("attn_dp_rank", overrides, None, default=attn_dp), attn_dp)
    attn_cp = _int(_option("attn_cp_rank", overrides, None, default=0), 0)
    return attn_tp, attn_dp, attn_cp, dp_attention


def _geometry(overrides: Mapping[str, Any], server_args: Any) -> Dict[str, Any]:
    out = {}
    for name in ("ring_bytes", "series_capacity", "bounds_capacity", "values_capacity", "shm_dir"):
        value = _option(name, overrides, server_args)
        if value is not None:
            out[name] = value
    return out


def scheduler_segment(labels: Mapping[str, Any], server_args: Any = None, **overrides: Any) -> Reporter:
    """The segment of the scheduler rank these labels describe (SGLang's scheduler label dict)."""
    tp_rank = _int(labels.get("tp_rank"), 0)
    pp_rank = _int(labels.get("pp_rank"), 0)
    ep_rank = _int(labels.get("moe_ep_rank"), 0)
    dp_rank = None if labels.get("dp_rank") in (None, "") else _int(labels.get("dp_rank"))
    instance = _option("instance", overrides, server_args, default=None)
    rank_key = overrides.get("rank_key")
    key = ("scheduler", instance, str(labels.get("model_name", "")), str(labels.get("engine_type", "unified")),
           tp_rank, pp_rank, ep_rank, dp_rank, rank_key)
    with _lock:
        found = _segments.get(key)
        if found is not None and (found.is_open or found.error):
            return found
        attn_tp, attn_dp, attn_cp, dp_attention = attention_ranks(tp_rank, dp_rank, server_args, overrides)
        all_schedulers = bool(_option("all_schedulers", overrides, server_args, "enable_metrics_for_all_schedulers",
                                      False))
        extra = {k: v for k, v in labels.items() if k not in SCHEDULER_BASE}
        reporter = Reporter(
            role="scheduler", instance=instance, rank_key=rank_key, model_name=str(labels.get("model_name", "")),
            engine_type=str(labels.get("engine_type", "unified")), tp_rank=tp_rank, pp_rank=pp_rank,
            dp_rank=dp_rank, moe_ep_rank=ep_rank, attn_tp_rank=attn_tp, attn_dp_rank=attn_dp, attn_cp_rank=attn_cp,
            tp_size=_int(_option("tp_size", overrides, server_args, "tp_size", 1), 1),
            pp_size=_int(_option("pp_size", overrides, server_args, "pp_size", 1), 1),
            dp_size=_int(_option("dp_size", overrides, server_args, "dp_size", 1), 1),
            priority_scheduling="priority" in labels, all_schedulers=all_schedulers, dp_attention=dp_attention,
            extra_labels=extra, **_geometry(overrides, server_args))
        reporter.attention = (attn_tp, attn_dp, attn_cp)  # type: ignore[attr-defined]
        _segments[key] = reporter
        global _last_scheduler
        _last_scheduler = reporter
        return reporter


def tokenizer_segment(labels: Mapping[str, Any], server_args: Any = None, **overrides: Any) -> Reporter:
    """The segment of the tokenizer / HTTP front-end process these labels describe."""
    instance = _option("instance", overrides, server_args, default=None)
    rank_key = overrides.get("rank_key")
    key = ("tokenizer", instance, str(labels.get("model_name", "")), str(labels.get("engine_type", "unified")),
           rank_key, os.getpid())
    with _lock:
        found = _segments.get(key)
        if found is not None and (found.is_open or found.error):
            return found
        extra = {k: v for k, v in labels.items() if k not in TOKENIZER_BASE}
        reporter = Reporter(role="tokenizer", instance=instance, rank_key=rank_key,
                            model_name=str(labels.get("model_name", "")),
                            engine_type=str(labels.get("engine_type", "unified")),
                            priority_scheduling="priority" in labels, extra_labels=extra,
                            **_geometry(overrides, server_args))
        _segments[key] = reporter
        return reporter
