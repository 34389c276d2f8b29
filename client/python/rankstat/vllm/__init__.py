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
import inspect
from types import ModuleType
from typing import Any, Callable, Dict

from .. import _fork_locks, _import_hook
from .._autoload import enabled
from .._class_swap import CLASS_HOOKS, METRIC_CLASSES, constructing_in_segment, is_wrapper, swapping

LOGGER_MODULE = "vllm.v1.metrics.loggers"
SUBCLASS_NAME = "RankstatPrometheusStatLogger"

# The metric-class hooks vLLM's loggers have (no summaries).
_HOOKS = {hook: CLASS_HOOKS[hook] for hook in ("_gauge_cls", "_counter_cls", "_histogram_cls")}
# PrometheusStatLogger's helper-class hooks, each a class that builds a few families with hooks of its own.
_HELPER_HOOKS = ("_spec_decoding_cls", "_perf_metrics_cls", "_kv_connector_cls", "_ec_connector_cls")
# Per-step methods: they update metrics and build none (no class swap on the engine's hot path).
_HOT_METHODS = frozenset({"record"})

_lock = _fork_locks.module_lock(globals(), "_lock")  # patching the logger classes; new in a forked child
_PATCHED = "__rankstat_patched__"


def _wrapped_methods(cls: type, public: bool) -> Dict[str, Callable]:
    """The constructor and, with `public`, every public method of `cls` but the per-step ones, wrapped so
    that metrics they build are rankstat's whatever the version: vLLM builds vllm:cache_config_info in
    log_engine_initialized(), after its constructor, and without the hooks through prometheus_client's
    module attribute. (A helper class builds its metrics in its constructor, which the logger's runs.)"""
    out: Dict[str, Callable] = {}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if is_wrapper(fn) or getattr(fn, "__isabstractmethod__", False):
            continue
        if name == "__init__":
            # vLLM's loggers live in the front-end process (AsyncLLM), which SGLang calls the tokenizer.
            out[name] = constructing_in_segment(fn, "tokenizer")
        elif public and not name.startswith("_") and name not in _HOT_METHODS:
            out[name] = swapping(fn)
    return out


def _with_rankstat_metrics(base: type, public: bool) -> type:
    """A subclass of `base` whose metric-class hooks it has are rankstat's, built while prometheus_client's
    classes are swapped for rankstat's (for code that imports them at call time)."""
    namespace: Dict[str, Any] = {name: cls for name, cls in _HOOKS.items() if hasattr(base, name)}
    namespace.update(_wrapped_methods(base, public))
    namespace.update(__module__=__name__, __qualname__="Rankstat" + base.__name__,
                     __doc__=f"vLLM's {base.__name__}, building its metrics in the process's rankstat segment.")
    return type("Rankstat" + base.__name__, (base,), namespace)


def _make_logger_class() -> type:
    base = importlib.import_module(LOGGER_MODULE).PrometheusStatLogger
    cls = _with_rankstat_metrics(base, public=True)
    cls.__qualname__ = cls.__name__ = SUBCLASS_NAME
    for hook in _HELPER_HOOKS:
        helper = getattr(base, hook, None)
        if isinstance(helper, type):
            setattr(cls, hook, _with_rankstat_metrics(helper, public=False))
    return cls


def _make_disabled_plugin() -> type:
    """What the entry point gives without RANKSTAT_VLLM=1: a per-engine logger that records nothing, so
    vLLM keeps its own PrometheusStatLogger (it adds one unless a custom logger is one)."""
    base: Any = importlib.import_module(LOGGER_MODULE).StatLoggerBase  # vLLM's class, known only at run time

    class RankstatDisabled(base):  # type: ignore[misc, valid-type]
        def __init__(self, vllm_config: Any = None, engine_index: int = 0):
            pass

        def record(self, *args: Any, **kwargs: Any) -> None:
            pass

        def log_engine_initialized(self) -> None:
            pass

    RankstatDisabled.__module__ = __name__
    return RankstatDisabled


def __getattr__(name: str):
    # Created on first access, module attributes with stable names, so pickling and entry points find them.
    if name == SUBCLASS_NAME:
        with _lock:
            found = globals().get(name)
            if found is None:
                found = globals()[name] = _make_logger_class()
        return found
    if name == "VllmStatLoggerPlugin":
        return stat_logger() if enabled("RANKSTAT_VLLM") else _make_disabled_plugin()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stat_logger() -> type:
    """The installed vLLM's PrometheusStatLogger with every metric-class hook set to rankstat's: pass it
    in AsyncLLM's `stat_loggers` (a factory list; the class is its own factory)."""
    return __getattr__(SUBCLASS_NAME)


def patch_logger_module(module: ModuleType) -> bool:
    """In place, for every logger the installed vLLM builds: PrometheusStatLogger's and its helper classes'
    metric-class hooks set to rankstat's, its constructor and public methods building in the process's
    segment, and prometheus_client's classes bound into the module at import (vLLM without the hooks)
    replaced. Returns False where the module has no PrometheusStatLogger. Idempotent."""
    base = getattr(module, "PrometheusStatLogger", None)
    if not isinstance(base, type):
        return False
    with _lock:
        if base.__dict__.get(_PATCHED):
            return True
        for cls in [base] + [h for h in (getattr(base, a, None) for a in _HELPER_HOOKS) if isinstance(h, type)]:
            for hook, rankstat_cls in _HOOKS.items():
                if hasattr(cls, hook):
                    setattr(cls, hook, rankstat_cls)
        for name, fn in _wrapped_methods(base, public=True).items():
            setattr(base, name, fn)
        import prometheus_client
        for name, rankstat_cls in METRIC_CLASSES.items():
            if getattr(module, name, None) is getattr(prometheus_client, name):
                setattr(module, name, rankstat_cls)
        setattr(base, _PATCHED, True)
    return True


def install() -> None:
    """What RANKSTAT_VLLM=1 does in every process (rankstat._autoload): vLLM's logger module is patched in
    place (patch_logger_module) when vLLM imports it, so every vLLM V1 with or without the metric-class
    hooks, and with or without the stat-logger plugin group, logs through rankstat. Idempotent."""
    _import_hook.patch_module(LOGGER_MODULE, patch_logger_module)


__all__ = ["stat_logger", "install", "patch_logger_module", "SUBCLASS_NAME", "LOGGER_MODULE"]
