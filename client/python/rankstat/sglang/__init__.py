"""rankstat as the metrics backend under SGLang's own collectors.

Nothing of SGLang's collector logic lives here: SGLang's installed `metrics_collector` module builds and
updates every metric itself; rankstat only supplies the metric classes (rankstat.metrics) it builds
them from. Two ways in (docs/sglang.md):

* SGLang with the stat-logger hooks (`_counter_cls` ... `_summary_cls`, `ServerArgs.stat_loggers`):

      from rankstat.sglang import stat_loggers
      server_args.stat_loggers = stat_loggers()   # {role: subclass of SGLang's own collector class}

  The subclasses are attributes of this module with stable names (RankstatSchedulerMetricsCollector,
  ...), created on first access, so pickling ServerArgs into spawned scheduler processes works.

* Any SGLang, including versions before the hooks: `RANKSTAT_SGLANG=1` in the environment of
  `python -m sglang.launch_server` (the package's start-up file runs `install()` in every process, spawned
  schedulers included: rankstat._autoload), or `rankstat.sglang.install()` once per process. Every
  collector class SGLang's module defines then builds rankstat metrics, whether or not stat_loggers names
  it, with its metric-class hooks set where the version has them.

Either way the routing-key GaugeHistogram families, which SGLang builds on prometheus_client.Gauge
directly, are built while prometheus_client's classes are swapped for rankstat's (under a lock,
restored afterwards). Each collector names the process's segment before its metrics exist: scheduler
collectors by rank, everything else by pid (rankstat.backend).
"""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from typing import Any, Dict

from .. import _import_hook
from .._class_swap import CLASS_HOOKS, constructing_in_segment, is_wrapper, prometheus_classes_swapped

COLLECTOR_MODULE = "sglang.srt.observability.metrics_collector"

# SGLang's collector class per stat-logger role, and the module constant naming the role.
ROLE_CLASSES = {
    "scheduler": ("SchedulerMetricsCollector", "STAT_LOGGER_ROLE_SCHEDULER"),
    "tokenizer": ("TokenizerMetricsCollector", "STAT_LOGGER_ROLE_TOKENIZER"),
    "storage": ("StorageMetricsCollector", "STAT_LOGGER_ROLE_STORAGE"),
    "radix_cache": ("RadixCacheMetricsCollector", "STAT_LOGGER_ROLE_RADIX_CACHE"),
    "expert_dispatch": ("ExpertDispatchCollector", "STAT_LOGGER_ROLE_EXPERT_DISPATCH"),
}
SUBCLASS_PREFIX = "Rankstat"


def _after_fork_in_child() -> None:
    # A thread holding one of these locks when another forks would leave it held in the child forever.
    global _subclass_lock, _install_lock
    _subclass_lock = threading.Lock()
    _install_lock = threading.Lock()


def _collector_module():
    return importlib.import_module(COLLECTOR_MODULE)


def _role_of(class_name: str) -> str:
    if class_name == "SchedulerMetricsCollector":
        return "scheduler"
    if class_name == "TokenizerMetricsCollector":
        return "tokenizer"
    return "other"


def _collector_labels(init, args, kwargs) -> Dict[str, Any]:
    try:
        bound = inspect.signature(init).bind_partial(None, *args, **kwargs)
    except (TypeError, ValueError):
        return {}
    labels = bound.arguments.get("labels")
    return dict(labels) if isinstance(labels, dict) else {}


def _building_rankstat_metrics(init, class_name: str):
    """`init` (an SGLang collector's __init__) naming the segment by the collector's role and labels, then
    running with rankstat's metric classes in place of prometheus_client's."""
    return constructing_in_segment(init, _role_of(class_name), _collector_labels)


def _make_subclass(class_name: str) -> type:
    module = _collector_module()
    # Collectors SGLang builds without consulting stat_loggers (EncoderMetricsCollector; every collector
    # of a version without the hooks) would otherwise still write prometheus_client files that nobody
    # serves once rankstatd replaces SGLang's /metrics. This runs wherever a subclass is first needed,
    # which includes every process that unpickles ServerArgs.stat_loggers.
    patch_collector_module(module, routed_roles=False)
    base = getattr(module, class_name)
    name = SUBCLASS_PREFIX + class_name
    namespace = {
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"SGLang's {class_name}, building its metrics in the process's rankstat segment.",
        **CLASS_HOOKS,
        "__init__": _building_rankstat_metrics(base.__init__, class_name),
    }
    return type(name, (base,), namespace)


_subclass_lock = threading.Lock()


def __getattr__(name: str):
    # Module attributes created on first access, so pickle finds them by reference in any process.
    if name.startswith(SUBCLASS_PREFIX):
        class_name = name[len(SUBCLASS_PREFIX):]
        if any(class_name == c for c, _ in ROLE_CLASSES.values()):
            with _subclass_lock:
                found = globals().get(name)
                if found is None:
                    found = _make_subclass(class_name)
                    globals()[name] = found
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stat_loggers() -> Dict[str, type]:
    """{role: collector class} for ServerArgs.stat_loggers: for every role the installed SGLang's
    collector module has, a subclass of SGLang's own class with the metric-class hooks set to rankstat's."""
    mc = _collector_module()
    out: Dict[str, type] = {}
    for role, (class_name, constant) in ROLE_CLASSES.items():
        if getattr(mc, class_name, None) is None:
            continue
        out[getattr(mc, constant, role)] = __getattr__(SUBCLASS_PREFIX + class_name)
    return out


# --- the adapter: SGLang's own classes build rankstat metrics -------------------------------------------

def _is_collector(name: str, obj: Any, module) -> bool:
    return (isinstance(obj, type) and getattr(obj, "__module__", None) == module.__name__
            and (name.endswith("MetricsCollector") or name == "ExpertDispatchCollector"))


def _has_hooks(module) -> bool:
    return hasattr(module, "resolve_collector_class")


def _set_unset_hooks(cls: type) -> None:
    """Points every metric-class hook `cls` has and nobody set at rankstat's class. SGLang's code takes
    other branches with a hook set (at 6a7c8a1d, one observe() per token instead of reaching into the
    histogram child), the ones its stat_loggers subclasses get: the same behaviour whichever way in."""
    for hook, rankstat_cls in CLASS_HOOKS.items():
        if hook in dir(cls) and getattr(cls, hook) is None:
            setattr(cls, hook, rankstat_cls)


def patch_collector_module(module, *, routed_roles: bool = True) -> list:
    """Wraps __init__ of every collector class `module` defines, and sets the metric-class hooks of those
    that have them; returns the names wrapped. With routed_roles=False, classes that the module routes
    through stat_loggers are left to it."""
    routed = {c for c, _ in ROLE_CLASSES.values()} if (_has_hooks(module) and not routed_roles) else set()
    wrapped = []
    for name, obj in list(vars(module).items()):
        if not _is_collector(name, obj, module) or name in routed:
            continue
        init = obj.__dict__.get("__init__")
        if init is None or is_wrapper(init):
            continue
        _set_unset_hooks(obj)
        obj.__init__ = _building_rankstat_metrics(init, name)
        wrapped.append(name)
    return wrapped


_install_lock = threading.Lock()
_routed_roles = False   # whether install() (every collector) or only install_unrouted() was asked for

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _install(routed_roles: bool) -> None:
    global _routed_roles
    with _install_lock:
        _routed_roles = _routed_roles or routed_roles
        routed = _routed_roles
    # SGLang's module is patched when something imports it, so installing from the start-up file costs no
    # SGLang import at interpreter start.
    _import_hook.patch_module(COLLECTOR_MODULE, lambda module: patch_collector_module(module, routed_roles=routed))


def install() -> None:
    """Makes every collector class of SGLang's metrics_collector module (now or when it is imported)
    build rankstat metrics, with or without the stat-logger hooks. Idempotent; call it once per
    process, e.g. from a sitecustomize so spawned scheduler processes get it too."""
    _install(routed_roles=True)


def install_unrouted() -> None:
    """install() for the collectors stat_loggers does not reach: on SGLang with the hooks, the classes
    without a stat-logger role (EncoderMetricsCollector); on SGLang without them, every collector."""
    _install(routed_roles=False)


__all__ = ["stat_loggers", "install", "install_unrouted", "prometheus_classes_swapped", "patch_collector_module",
           "ROLE_CLASSES", "COLLECTOR_MODULE"]
