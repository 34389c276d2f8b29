"""rankstat as the metrics backend under vLLM's own stat logger.

vLLM's `PrometheusStatLogger` (vllm/v1/metrics/loggers.py) creates every metric through class attributes
(`_gauge_cls`, `_counter_cls`, `_histogram_cls`) and builds its helper families through helper classes
with hooks of their own (`_spec_decoding_cls`, `_perf_metrics_cls`, `_kv_connector_cls`,
`_ec_connector_cls`). `stat_logger()` returns a subclass of the *installed* vLLM's class with every one of
them pointed at rankstat's prometheus_client-compatible classes, so nothing of vLLM's logger is copied and
nothing leaks into prometheus_client's multiprocess files:

    from rankstat.vllm import stat_logger
    engine = AsyncLLM.from_vllm_config(vllm_config, stat_loggers=[stat_logger()])   # docs/vllm.md

or, for `vllm serve`, `RANKSTAT_VLLM=1` with the package installed (the `vllm.stat_logger_plugins` entry
point `VllmStatLoggerPlugin`). The logger runs in vLLM's API-server process, which records every engine
core's stats: that process gets one segment, `rankstat.<instance>.tokenizer.pid<pid>` (the front end).
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any, Dict

from .. import backend
from ..metrics import Counter, Gauge, Histogram
from ..sglang import prometheus_classes_swapped

LOGGER_MODULE = "vllm.v1.metrics.loggers"
SUBCLASS_NAME = "RankstatPrometheusStatLogger"

_HOOKS = {"_gauge_cls": Gauge, "_counter_cls": Counter, "_histogram_cls": Histogram}
# PrometheusStatLogger's helper-class hooks, each a class that builds a few families with hooks of its own.
_HELPER_HOOKS = ("_spec_decoding_cls", "_perf_metrics_cls", "_kv_connector_cls", "_ec_connector_cls")

_lock = threading.Lock()


def _with_rankstat_metrics(base: type) -> type:
    """A subclass of `base` whose metric-class hooks it has are rankstat's, built while prometheus_client's
    classes are swapped for rankstat's (for code that imports them at call time)."""
    namespace: Dict[str, Any] = {name: cls for name, cls in _HOOKS.items() if hasattr(base, name)}
    init = base.__init__

    def __init__(self, *args, **kwargs):
        backend.segment().hint_identity("tokenizer", {})
        with prometheus_classes_swapped():
            init(self, *args, **kwargs)

    namespace.update(__init__=__init__, __module__=__name__, __qualname__="Rankstat" + base.__name__,
                     __doc__=f"vLLM's {base.__name__}, building its metrics in the process's rankstat segment.")
    return type("Rankstat" + base.__name__, (base,), namespace)


def _make_logger_class() -> type:
    base = importlib.import_module(LOGGER_MODULE).PrometheusStatLogger
    cls = _with_rankstat_metrics(base)
    cls.__qualname__ = cls.__name__ = SUBCLASS_NAME
    for hook in _HELPER_HOOKS:
        helper = getattr(base, hook, None)
        if isinstance(helper, type):
            setattr(cls, hook, _with_rankstat_metrics(helper))
    return cls


def _make_disabled_plugin() -> type:
    """What the entry point gives without RANKSTAT_VLLM=1: a per-engine logger that records nothing, so
    vLLM keeps its own PrometheusStatLogger (it adds one unless a custom logger is one)."""
    base = importlib.import_module(LOGGER_MODULE).StatLoggerBase

    class RankstatDisabled(base):
        def __init__(self, vllm_config: Any = None, engine_index: int = 0):
            pass

        def record(self, *args: Any, **kwargs: Any) -> None:
            pass

        def log_engine_initialized(self) -> None:
            pass

    RankstatDisabled.__module__ = __name__
    return RankstatDisabled


def _enabled_by_environment() -> bool:
    return os.environ.get("RANKSTAT_VLLM", "").strip().lower() in ("1", "true", "yes", "on")


def __getattr__(name: str):
    # Created on first access, module attributes with stable names, so pickling and entry points find them.
    if name == SUBCLASS_NAME:
        with _lock:
            found = globals().get(name)
            if found is None:
                found = globals()[name] = _make_logger_class()
        return found
    if name == "VllmStatLoggerPlugin":
        return stat_logger() if _enabled_by_environment() else _make_disabled_plugin()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stat_logger() -> type:
    """The installed vLLM's PrometheusStatLogger with every metric-class hook set to rankstat's: pass it
    in AsyncLLM's `stat_loggers` (a factory list; the class is its own factory)."""
    return __getattr__(SUBCLASS_NAME)


__all__ = ["stat_logger", "SUBCLASS_NAME", "LOGGER_MODULE"]
