"""Reporting through SGLang's collector classes as the engine oracle has them: the stand-ins in
<oracle>/emul, built from a trace of SGLang's metrics_collector.py at one commit
(<oracle>/sglang/<commit>.trace.json), with rankstat installed under them by rankstat.sglang.install().

The stand-ins are played live (the oracle's README, "Live use"): each collector re-performs what
SGLang's own did when it was recorded, with the values, label values and label names this engine
passes wherever the trace says they came from an argument. So the families, HELP texts, buckets and
label names are SGLang's at that commit; the numbers are this engine's. Operations whose value SGLang
computed (not an argument) repeat the recorded one, and a decision SGLang took by value (a branch)
is the recorded one whatever the numbers are now.

The oracle is $RANKSTAT_ENGINE_ORACLE, else <repo>/../shared/reference/engine-oracle."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from typing import Any, Dict, Optional

from load_model import Finished, Step

# The newest SGLang commit the oracle has a trace of (its README's table).
NEWEST_VERSION = "6a7c8a1d"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_oracle() -> str:
    return os.environ.get("RANKSTAT_ENGINE_ORACLE") or os.path.join(os.path.dirname(REPO), "shared", "reference",
                                                                    "engine-oracle")


def trace_path(oracle: str, version: Optional[str] = None) -> str:
    return os.path.join(oracle, "sglang", f"{version or NEWEST_VERSION}.trace.json")


def prepare(oracle: str, trace: str) -> None:
    """Makes `import sglang.srt.observability.metrics_collector` give the oracle's stand-ins built from
    `trace`, with rankstat installed under them. Once per process, before any collector exists."""
    # The stand-ins import prometheus_client, as SGLang does.
    if importlib.util.find_spec("prometheus_client") is None:
        raise SystemExit("SGLang's collectors need prometheus_client importable (Debian: python3-prometheus-client)")
    sys.path.insert(0, os.path.join(os.path.abspath(oracle), "emul"))
    os.environ["ENGINE_ORACLE_TRACE"] = os.path.abspath(trace)
    import rankstat.sglang
    rankstat.sglang.install()


def _module():
    import sglang.srt.observability.metrics_collector as mc
    return mc


def live_errors() -> Dict[str, int]:
    """Operations the stand-ins skipped because they raised (the oracle's LIVE_ERRORS)."""
    import engine_oracle_emul
    return dict(engine_oracle_emul.LIVE_ERRORS)


def report_live_errors(who: str) -> None:
    """Prints what the stand-ins skipped because it raised: with rankstat under them that is an operation
    of SGLang's that rankstat refused, which a real SGLang would have hit too."""
    errors = live_errors()
    if errors:
        print(f"{who}: SGLang's collectors: {sum(errors.values())} operations raised and were skipped: "
              + "; ".join(f"{n} x {e}" for e, n in sorted(errors.items())), file=sys.stderr)


def _call(fn, values: Dict[str, Any]):
    """fn(**values restricted to its parameters): the stand-ins have the signatures of the traced commit,
    which differ between commits (server_args required or not, stream / retraction_count, ...)."""
    params = inspect.signature(fn).parameters
    kw = {k: v for k, v in values.items() if k in params}
    missing = [name for name, p in params.items()
               if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in kw]
    if missing:
        raise TypeError(f"{fn.__qualname__}: no value for {missing} at this SGLang commit")
    return fn(**kw)


class SchedulerCollector:
    """One scheduler rank: SGLang's SchedulerMetricsCollector with the labels SGLang's scheduler composes
    for it, and log_stats() with a SchedulerStats built from the load model's step."""

    def __init__(self, *, model_name: str, engine_type: str, tp_rank: int, dp_rank, extra_labels: Dict[str, str],
                 priorities: bool, **_):
        self.mc = _module()
        labels: Dict[str, Any] = {"model_name": model_name, "engine_type": engine_type, "tp_rank": tp_rank,
                                  "pp_rank": 0, "moe_ep_rank": 0}
        if dp_rank is not None:
            labels["dp_rank"] = dp_rank
        if priorities:  # with priority scheduling the per-priority series carry priority="<n>", the total ""
            labels["priority"] = ""
        labels.update(extra_labels)
        self.priorities, self.collector_labels = priorities, labels
        # server_args: the stand-ins take SGLang's signature; what SGLang's constructor read from it is in
        # the trace (recorded decisions), nothing is read from it live.
        self.collector = _call(self.mc.SchedulerMetricsCollector, dict(labels=labels, server_args=None))

    def report(self, step: Step) -> None:
        stats = self.mc.SchedulerStats()
        queue_count = getattr(self.mc, "QueueCount", None)
        for name, value in vars(step).items():
            if name == "finished" or not hasattr(stats, name):
                continue
            if queue_count is not None and isinstance(getattr(stats, name), queue_count):
                # one priority class: everything is priority 0 (none without priority scheduling, so no
                # per-priority series)
                value = queue_count(total=value, by_priority={0: value} if self.priorities else {})
            setattr(stats, name, value)
        self.collector.log_stats(stats)

    def close(self) -> None:
        labels = self.collector_labels
        report_live_errors(f"scheduler {labels['engine_type']} tp_rank={labels['tp_rank']}")


class TokenizerCollector:
    """The tokenizer: SGLang's TokenizerMetricsCollector, fed per finished request."""

    def __init__(self, *, model_name: str, extra_labels: Dict[str, str]):
        self.labels = {"model_name": model_name, "engine_type": "unified", **extra_labels}
        self.collector = _call(_module().TokenizerMetricsCollector,
                               dict(server_args=None, labels=dict(self.labels), collect_tokens_histogram=True))

    def finished(self, req: Finished) -> None:
        values = dict(labels=dict(self.labels), prompt_tokens=req.prompt_tokens,
                      generation_tokens=req.generation_tokens, cached_tokens=req.cached_tokens,
                      e2e_latency=req.e2e, has_grammar=False, retraction_count=0, value=req.ttft,
                      stream=True, is_streaming=True)
        _call(self.collector.observe_time_to_first_token, values)
        _call(self.collector.observe_one_finished_request, values)

    def close(self) -> None:
        report_live_errors("tokenizer")
