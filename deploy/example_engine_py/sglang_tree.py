"""Reporting through SGLang's REAL collectors: the metrics_collector.py of an oracle tree
(../shared/reference/sglang-oracle/trees/<commit>), with rankstat as its backend through
rankstat.sglang.install(). This file only builds the collectors and hands them numbers; which
families, labels and buckets come out is SGLang's code."""

from __future__ import annotations

import glob
import inspect
import os
import sys
from typing import Any, Dict

from load_model import Finished, Step


def prepare(tree: str) -> None:
    """Puts the tree (and, when SGLang's prometheus_client dependency is not installed, the oracle's
    vendored copy) on sys.path and installs rankstat under SGLang's collectors."""
    sys.path.insert(0, os.path.join(os.path.abspath(tree), "python"))
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        vendored = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(tree))),
                                                 "vendor", "prometheus_client-*")))
        if not vendored:
            raise SystemExit("the SGLang tree needs prometheus_client importable (SGLang imports it)")
        sys.path.insert(0, vendored[-1])
    import rankstat.sglang
    rankstat.sglang.install()


def _module():
    import sglang.srt.observability.metrics_collector as mc
    return mc


def _server_args(model_name: str):
    try:
        from sglang.srt.server_args import ServerArgs
        sa = ServerArgs(served_model_name=model_name, enable_metrics=True)
    except Exception:  # a real SGLang's ServerArgs wants a model path; the collectors only read a few fields
        sa = None
    try:
        import sglang.srt.runtime_context as rc  # the oracle's stub publishes the config SGLang reads
        rc.configure(served_model_name=model_name, enable_metrics=True)
    except (ImportError, AttributeError):
        pass
    return sa


def _call(fn, values: Dict[str, Any]):
    """fn(**values restricted to its parameters); None when a required one has no value."""
    params = inspect.signature(fn).parameters
    kw = {k: v for k, v in values.items() if k in params}
    if any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in kw
           for name, p in params.items()):
        return None
    return fn(**kw)


class SchedulerCollector:
    def __init__(self, *, model_name: str, engine_type: str, tp_rank: int, dp_rank, extra_labels: Dict[str, str], **_):
        mc = _module()
        self.mc = mc
        labels = {"model_name": model_name, "engine_type": engine_type, "tp_rank": tp_rank, "pp_rank": 0,
                  "moe_ep_rank": 0, **extra_labels}
        if dp_rank is not None:
            labels["dp_rank"] = dp_rank
        self.collector = _call(mc.SchedulerMetricsCollector, dict(labels=labels, server_args=_server_args(model_name)))

    def report(self, step: Step) -> None:
        stats = self.mc.SchedulerStats()
        queue_count = getattr(self.mc, "QueueCount", None)
        for name, value in vars(step).items():
            if not hasattr(stats, name) or name == "finished":
                continue
            if queue_count is not None and isinstance(getattr(stats, name), queue_count):
                value = queue_count(total=value, by_priority={})
            setattr(stats, name, value)
        self.collector.log_stats(stats)


class TokenizerCollector:
    def __init__(self, *, model_name: str, extra_labels: Dict[str, str]):
        mc = _module()
        self.labels = {"model_name": model_name, "engine_type": "unified", **extra_labels}
        self.collector = _call(mc.TokenizerMetricsCollector,
                               dict(server_args=_server_args(model_name), labels=dict(self.labels),
                                    collect_tokens_histogram=True))

    def finished(self, req: Finished) -> None:
        values = dict(labels=dict(self.labels), prompt_tokens=req.prompt_tokens,
                      generation_tokens=req.generation_tokens, cached_tokens=req.cached_tokens,
                      e2e_latency=req.e2e, has_grammar=False, retraction_count=0, value=req.ttft,
                      stream=True, is_streaming=True)
        for method in ("observe_time_to_first_token", "observe_one_finished_request"):
            fn = getattr(self.collector, method, None)
            if fn is not None:
                _call(fn, values)
