"""rankstat as the metrics backend under SGLang's own collectors.

Nothing of SGLang's collector logic lives here: SGLang's installed `metrics_collector` module builds and
updates every metric itself; rankstat only supplies the metric classes (rankstat.metrics) it builds
them from. Two ways in (docs/sglang.md):

* SGLang with the stat-logger hooks (`_counter_cls` ... `_summary_cls`, `ServerArgs.stat_loggers`):

      from rankstat.sglang import stat_loggers
      server_args.stat_loggers = stat_loggers()   # {role: subclass of SGLang's own collector class}

  The subclasses are attributes of this module with stable names (RankstatSchedulerMetricsCollector,
  ...), created on first access, so pickling ServerArgs into spawned scheduler processes works.

* Any SGLang, including versions before the hooks: `rankstat.sglang.install()` once per process (a
  `sitecustomize` reaches spawned schedulers too). Every collector class SGLang's module defines then
  builds rankstat metrics, whether or not stat_loggers names it.

Either way the routing-key GaugeHistogram families, which SGLang builds on prometheus_client.Gauge
directly, are built while prometheus_client's classes are swapped for rankstat's (under a lock,
restored afterwards). Each collector names the process's segment before its metrics exist: scheduler
collectors by rank, everything else by pid (rankstat.backend).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import inspect
import sys
import threading
from contextlib import contextmanager
from typing import Any, Dict, Optional

from .. import backend
from ..metrics import Counter, Gauge, Histogram, Summary

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

_METRIC_CLASSES = {"Counter": Counter, "Gauge": Gauge, "Histogram": Histogram, "Summary": Summary}
_swap_lock = threading.RLock()


@contextmanager
def prometheus_classes_swapped():
    """prometheus_client's Counter/Gauge/Histogram/Summary are rankstat's inside the block (for code
    that imports them at call time, as SGLang's collectors and GaugeHistogram do). Reentrant; other
    threads building prometheus_client metrics meanwhile get rankstat's too."""
    import prometheus_client
    with _swap_lock:
        saved = {name: getattr(prometheus_client, name) for name in _METRIC_CLASSES}
        try:
            for name, cls in _METRIC_CLASSES.items():
                setattr(prometheus_client, name, cls)
            yield
        finally:
            for name, cls in saved.items():
                setattr(prometheus_client, name, cls)


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
    """`init` (an SGLang collector's __init__) naming the segment, then running with rankstat's
    metric classes in place of prometheus_client's."""
    role = _role_of(class_name)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        backend.segment().hint_identity(role, _collector_labels(init, args, kwargs))
        with prometheus_classes_swapped():
            init(self, *args, **kwargs)

    __init__.__rankstat_wraps__ = init
    return __init__


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
        "_counter_cls": Counter,
        "_gauge_cls": Gauge,
        "_histogram_cls": Histogram,
        "_summary_cls": Summary,
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


def patch_collector_module(module, *, routed_roles: bool = True) -> list:
    """Wraps __init__ of every collector class `module` defines; returns the names wrapped. With
    routed_roles=False, classes that the module routes through stat_loggers are left to it."""
    routed = {c for c, _ in ROLE_CLASSES.values()} if (_has_hooks(module) and not routed_roles) else set()
    wrapped = []
    for name, obj in list(vars(module).items()):
        if not _is_collector(name, obj, module) or name in routed:
            continue
        init = obj.__dict__.get("__init__")
        if init is None or hasattr(init, "__rankstat_wraps__"):
            continue
        obj.__init__ = _building_rankstat_metrics(init, name)
        wrapped.append(name)
    return wrapped


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner, routed_roles: bool):
        self._inner, self._routed_roles = inner, routed_roles

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        patch_collector_module(module, routed_roles=self._routed_roles)

    def __getattr__(self, name):  # get_source, get_filename, ... for inspect and tracebacks
        return getattr(self._inner, name)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def __init__(self, routed_roles: bool):
        self.routed_roles = routed_roles

    def find_spec(self, fullname, path, target=None):
        if fullname != COLLECTOR_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, self.routed_roles)
                return spec
        return None


_install_lock = threading.Lock()
_installed: Optional[_PatchOnImport] = None


def _install(routed_roles: bool) -> None:
    global _installed
    with _install_lock:
        module = sys.modules.get(COLLECTOR_MODULE)
        if module is not None:
            patch_collector_module(module, routed_roles=routed_roles)
        if _installed is None:
            # SGLang's module is patched when something imports it, so importing rankstat from a
            # sitecustomize costs no SGLang import at interpreter start.
            _installed = _PatchOnImport(routed_roles)
            sys.meta_path.insert(0, _installed)
        elif routed_roles:
            _installed.routed_roles = True


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
