"""A metrics backend that does nothing: the floor of an engine's metric code in the benchmarks.

Counter, Gauge, Histogram and Summary take prometheus_client's constructor arguments and every method
returns at once; `labels()` returns the metric itself. Plugged into the engine-oracle stand-ins the way
rankstat.sglang and rankstat.vllm plug in (bench/bench_python_calls.py, bench/bench_vllm_record.py):

    replay.py --trace sglang/<c8>.trace.json --backend plugin:null_backend:stat_loggers [--setup null_backend:install]
    replay.py --trace vllm/13cbd441-full.trace.json --backend plugin:null_backend:stat_logger

A replay times the engine's metric operations only, so the figure of this backend is what those
operations cost with a backend that does nothing: the replay's loop, the calls and their arguments.
It is a floor for backends written in Python. It is not one for a backend whose methods are C functions:
calling a C method can cost less than calling a Python method that does nothing (`labels(**kw)` builds
a dict for the keywords here; rankstat's C extension takes them as they come), so rankstat's figure can
come out at or below this one.

SGLang's call sites also reach into histogram children (`child._sum.inc(v)`, `child._upper_bounds`,
`len(child._buckets)`, `child._buckets[i].inc()`, `bucket._value`): those attributes exist here too,
with the bounds as prometheus_client stores them (floats, +Inf last), so that the replay takes the
engine's recorded path instead of stopping as DIVERGED. Values are never kept: a read of `_value` gives
0.0, whatever was observed.
"""

import importlib
from contextlib import contextmanager

INF = float("inf")
DEFAULT_BUCKETS = (.005, .01, .025, .05, .075, .1, .25, .5, .75, 1.0, 2.5, 5.0, 7.5, 10.0, INF)


class _Nothing:
    """What prometheus_client keeps per value (a bucket, a sum): a value that is never updated."""

    __slots__ = ()
    _value = 0.0

    def inc(self, amount=1):
        pass

    def set(self, value, timestamp=None):
        pass

    def get(self):
        return 0.0


class _Metric:
    def __init__(self, name="", documentation="", labelnames=(), namespace="", subsystem="", unit="",
                 registry=None, _labelvalues=None, **kwargs):
        self._name = name
        self._labelnames = tuple(labelnames)

    def labels(self, *labelvalues, **labelkwargs):
        return self

    def remove(self, *labelvalues):
        pass

    def clear(self):
        pass

    def describe(self):
        return []

    def collect(self):
        return []


class Counter(_Metric):
    def inc(self, amount=1, exemplar=None):
        pass

    def reset(self):
        pass

    def count_exceptions(self, exception=Exception):
        return _no_context()


class Gauge(_Metric):
    def inc(self, amount=1):
        pass

    def dec(self, amount=1):
        pass

    def set(self, value):
        pass

    def set_to_current_time(self):
        pass

    def set_function(self, f):
        pass

    def track_inprogress(self):
        return _no_context()

    def time(self):
        return _no_context()


class Histogram(_Metric):
    def __init__(self, name="", documentation="", labelnames=(), namespace="", subsystem="", unit="",
                 registry=None, _labelvalues=None, buckets=DEFAULT_BUCKETS, **kwargs):
        super().__init__(name, documentation, labelnames)
        bounds = [float(b) for b in buckets]
        if bounds and bounds[-1] != INF:
            bounds.append(INF)
        self._upper_bounds = bounds
        self._buckets = [_Nothing() for _ in bounds]
        self._sum = _Nothing()

    def observe(self, amount, exemplar=None):
        pass

    def time(self):
        return _no_context()


class Summary(_Metric):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._count = _Nothing()
        self._sum = _Nothing()

    def observe(self, amount):
        pass

    def time(self):
        return _no_context()


_CLASSES = {"Counter": Counter, "Gauge": Gauge, "Histogram": Histogram, "Summary": Summary}


@contextmanager
def _no_context():
    yield


@contextmanager
def _prometheus_classes_swapped():
    """prometheus_client's four classes are these inside the block, for engine code that imports them when
    it runs instead of through a hook (SGLang's GaugeHistogram), as rankstat's adapters do."""
    import prometheus_client
    saved = {name: getattr(prometheus_client, name) for name in _CLASSES}
    try:
        for name, cls in _CLASSES.items():
            setattr(prometheus_client, name, cls)
        yield
    finally:
        for name, cls in saved.items():
            setattr(prometheus_client, name, cls)


def _building_null_metrics(init):
    """`init` (an engine class's constructor) run with prometheus_client's classes swapped for these."""
    def __init__(self, *args, **kwargs):
        with _prometheus_classes_swapped():
            init(self, *args, **kwargs)

    __init__.null_backend_wraps = init
    return __init__


def _with_null_metrics(base, hooks):
    """A subclass of `base` whose metric-class hooks (those it has) are this module's classes and whose
    constructor runs with prometheus_client's classes swapped for them."""
    namespace = {hook: cls for hook, cls in hooks.items() if hasattr(base, hook)}
    namespace.update(__init__=_building_null_metrics(base.__init__), __module__=__name__,
                     __qualname__="Null" + base.__name__)
    return type("Null" + base.__name__, (base,), namespace)


# SGLang ---------------------------------------------------------------------------------------------------
SGLANG_MODULE = "sglang.srt.observability.metrics_collector"
SGLANG_ROLES = {
    "scheduler": ("SchedulerMetricsCollector", "STAT_LOGGER_ROLE_SCHEDULER"),
    "tokenizer": ("TokenizerMetricsCollector", "STAT_LOGGER_ROLE_TOKENIZER"),
    "storage": ("StorageMetricsCollector", "STAT_LOGGER_ROLE_STORAGE"),
    "radix_cache": ("RadixCacheMetricsCollector", "STAT_LOGGER_ROLE_RADIX_CACHE"),
    "expert_dispatch": ("ExpertDispatchCollector", "STAT_LOGGER_ROLE_EXPERT_DISPATCH"),
}
_SGLANG_HOOKS = {"_counter_cls": Counter, "_gauge_cls": Gauge, "_histogram_cls": Histogram, "_summary_cls": Summary}


def stat_loggers():
    """{role: collector class} for SGLang's stat_loggers, as rankstat.sglang.stat_loggers() gives them."""
    module = importlib.import_module(SGLANG_MODULE)
    out = {}
    for role, (class_name, constant) in SGLANG_ROLES.items():
        base = getattr(module, class_name, None)
        if base is not None:
            out[getattr(module, constant, role)] = _with_null_metrics(base, _SGLANG_HOOKS)
    # Collectors SGLang builds without consulting stat_loggers (EncoderMetricsCollector) would otherwise
    # write prometheus_client's files; rankstat.sglang makes them build its metrics the same way.
    routed = {class_name for class_name, _ in SGLANG_ROLES.values()}
    for name, obj in list(vars(module).items()):
        init = obj.__dict__.get("__init__") if isinstance(obj, type) else None
        if (init is not None and obj.__module__ == module.__name__ and name not in routed
                and name.endswith("MetricsCollector") and not hasattr(init, "null_backend_wraps")):
            obj.__init__ = _building_null_metrics(init)
    return out


def install():
    """For engine versions without the hooks (the replay's --setup): prometheus_client's classes are this
    module's for the rest of the process (a benchmark's replay process; nothing else runs in it)."""
    import prometheus_client
    for name, cls in _CLASSES.items():
        setattr(prometheus_client, name, cls)


# vLLM -----------------------------------------------------------------------------------------------------
VLLM_MODULE = "vllm.v1.metrics.loggers"
_VLLM_HOOKS = {"_gauge_cls": Gauge, "_counter_cls": Counter, "_histogram_cls": Histogram}
_VLLM_HELPER_HOOKS = ("_spec_decoding_cls", "_perf_metrics_cls", "_kv_connector_cls", "_ec_connector_cls")
_vllm_logger = None


def stat_logger():
    """vLLM's PrometheusStatLogger with every metric-class and helper-class hook set to nothing, as
    rankstat.vllm.stat_logger() gives it (one class per process)."""
    global _vllm_logger
    if _vllm_logger is None:
        base = importlib.import_module(VLLM_MODULE).PrometheusStatLogger
        cls = _with_null_metrics(base, _VLLM_HOOKS)
        for hook in _VLLM_HELPER_HOOKS:
            helper = getattr(base, hook, None)
            if isinstance(helper, type):
                setattr(cls, hook, _with_null_metrics(helper, _VLLM_HOOKS))
        _vllm_logger = cls
    return _vllm_logger
