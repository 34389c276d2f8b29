"""Counter, Gauge, Histogram and Summary with prometheus_client's interface, writing into the process's
rankstat segment instead of prometheus_client's files.

They are what an engine's collector classes create through their `_counter_cls` / `_gauge_cls` /
`_histogram_cls` / `_summary_cls` hooks (SGLang, vLLM, TensorRT-LLM): the same constructor (name,
documentation, labelnames, namespace, subsystem, unit, registry, multiprocess_mode, buckets; unknown
keyword arguments are accepted and ignored), the same `labels()` rules and errors, the same methods,
context managers and decorators (signatures kept), the same exceptions and warnings, and the
histogram-child internals SGLang's call sites touch (`_buckets[i].inc`, `_sum.inc`, `_upper_bounds`,
`bucket._value.get()`). Semantics are prometheus_client's multiprocess mode: a child exists at zero as
soon as it is labelled; `remove()` and `clear()` warn and forget the child but its value stays exported;
the ten gauge modes mean what they mean there (rankstatd aggregates them). tests/python/test_contract.py
states the contract case by case; docs/semantics.md lists what differs on purpose.

A metric object is the family and, unlabelled or as a labelled child, the series, as in prometheus_client:
labels() builds children with `self.__class__(...)`. Each series is registered in the segment with the
family's exposed name, HELP text, type, label names, buckets and mode, so the daemon serves what the engine
declared. Metrics register in prometheus_client's REGISTRY by default when prometheus_client is installed
(else in this module's REGISTRY), so duplicate names are refused as there. Updates are one C call
(`rankstat._accel`: a C extension, or its pure-Python twin), made with the GIL held, so threads of one
process may share metrics. After a fork every metric keeps working in the child process, in a segment of
the child's own (rankstat.backend, "fork()").
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import logging
import math
import os
import sys
import threading
import time as _time
import warnings
from timeit import default_timer
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _names, backend
from ._accel import Cell, Family
from ._native import (GAUGE_MODES, KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM, KIND_SUMMARY, MOST_RECENT_MODES,
                      GaugeMode)

INF = float("inf")

log = logging.getLogger("rankstat")


# prometheus_client's multiprocess modes -> RANKSTAT_MODE_*, and the series kinds: rankstat._native's.
MODES = GAUGE_MODES

DEFAULT_BUCKETS = (.005, .01, .025, .05, .075, .1, .25, .5, .75, 1.0, 2.5, 5.0, 7.5, 10.0, INF)


def _full_name(kind: str, name: str, namespace: str, subsystem: str, unit: str) -> str:
    if not name:
        raise ValueError("Metric name should not be empty")
    full = "".join(part + "_" for part in (namespace, subsystem) if part) + name
    if kind == "counter" and full.endswith("_total"):
        full = full[:-6]  # the family; samples are exposed as <family>_total
    if unit and not full.endswith("_" + unit):
        full += "_" + unit
    _names.check_metric_name(full)  # any UTF-8 name, or classic ones only (rankstat._names)
    return full


def _label_names(kind: str, name: str, labelnames: Iterable[str], reserved: Tuple[str, ...]) -> Tuple[str, ...]:
    # prometheus_client's checks and messages, plus three refusals of its own (docs/semantics.md): a
    # string instead of a sequence, a name given twice (two labels of one name are not valid exposition),
    # and `pid` on a gauge (prometheus_client's multiprocess collector replaces or strips it, so the
    # value the caller gave is never served).
    if isinstance(labelnames, str):
        raise ValueError(f"{name}: labelnames must be a sequence of label names, not the string {labelnames!r}")
    names = tuple(labelnames)
    seen = set()
    for label in names:
        _names.check_label_name(label)  # any UTF-8 name but `__…`, or classic ones only (rankstat._names)
        if label in reserved:
            raise ValueError(f"Reserved label metric name: {label}")
        if kind == "gauge" and label == "pid":
            raise ValueError(f"{name}: label name 'pid' is refused on a gauge: prometheus_client's multiprocess "
                             f"mode replaces it with the process id or strips it, so its value would never be served")
        if label in seen:
            raise ValueError(f"{name}: duplicate label name {label!r}")
        seen.add(label)
    return names


# --- registries: duplicate names refused as prometheus_client's CollectorRegistry refuses them --------

_TYPE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


class CollectorRegistry:
    """Where rankstat's metrics register when prometheus_client is not installed (with it, the default
    is prometheus_client.REGISTRY, so an engine's unregister() and duplicate checks see them). Same rule:
    a collector claims every name it describes plus its type's sample suffixes, and a second collector
    claiming any of them is refused with "Duplicated timeseries in CollectorRegistry"."""

    def __init__(self) -> None:
        self._collector_to_names: Dict[Any, List[str]] = {}
        self._names_to_collectors: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def register(self, collector) -> None:
        with self._lock:
            names = self._get_names(collector)
            duplicates = set(self._names_to_collectors).intersection(names)
            if duplicates:
                raise ValueError(f"Duplicated timeseries in CollectorRegistry: {duplicates}")
            for name in names:
                self._names_to_collectors[name] = collector
            self._collector_to_names[collector] = names

    def unregister(self, collector) -> None:
        with self._lock:
            for name in self._collector_to_names[collector]:
                del self._names_to_collectors[name]
            del self._collector_to_names[collector]

    @staticmethod
    def _get_names(collector) -> List[str]:
        describe = getattr(collector, "describe", None)
        if describe is None:
            return []
        result = []
        for metric in describe():
            result.append(metric.name)
            result.extend(metric.name + suffix for suffix in _TYPE_SUFFIXES.get(metric.type, ()))
        return result

    def collect(self):
        with self._lock:
            collectors = list(self._collector_to_names)
        for collector in collectors:
            yield from collector.collect()


def _default_registry():
    try:
        from prometheus_client import REGISTRY as found  # the engines' own default registry
        return found
    except ImportError:
        return CollectorRegistry()


REGISTRY = _default_registry()


class _DefaultRegistry:
    """The `registry=` default: REGISTRY above for code that builds metrics itself, as prometheus_client's
    default; none while rankstat's engine adapters have swapped prometheus_client's classes for rankstat's
    (an SGLang collector's or a vLLM logger's constructor). Engines build those through their metric-class
    hooks, made for classes that register nowhere (vLLM's Ray wrappers), and may build a logger twice
    without unregistering. A conflicting declaration is refused there too (_claim_declaration)."""

    def __repr__(self) -> str:
        return "REGISTRY"

    @staticmethod
    def resolve():
        found = sys.modules.get("prometheus_client")
        if found is not None and getattr(found, "Counter", None) is Counter:
            return None
        return REGISTRY


_DEFAULT_REGISTRY = _DefaultRegistry()

# Every name a family declared in a segment claims (as a registry counts them: a counter claims foo,
# foo_total and foo_created, ...) -> its declaration (type, gauge mode, bucket bounds), in that segment's
# `declarations` (backend.Segment: the process's segment, or one Reporter's). The segment holds every
# declaration for its life, so a second one that disagrees is refused whatever the registry: one family,
# one declaration (docs/semantics.md). Guarded by _registration_lock.

def _claimed_names(metric) -> List[str]:
    return [metric._name] + [metric._name + suffix for suffix in _TYPE_SUFFIXES.get(metric._type, ())]


def _conflicts(metric) -> set:
    declaration = (metric._type, metric._mode(), tuple(metric._bounds()))
    declared = metric._segment.declarations
    return {name for name in _claimed_names(metric) if declared.get(name, declaration) != declaration}


def _claim_declaration(metric) -> None:
    declaration = (metric._type, metric._mode(), tuple(metric._bounds()))
    for name in _claimed_names(metric):
        metric._segment.declarations.setdefault(name, declaration)


class _Described:
    """What describe()/collect() return without prometheus_client: name, documentation, type, unit,
    samples (name, labels, value, timestamp, exemplar)."""

    def __init__(self, name: str, documentation: str, typ: str, unit: str = ""):
        self.name, self.documentation, self.type, self.unit = name, documentation, typ, unit
        self.samples: List[tuple] = []

    def add_sample(self, name, labels, value, timestamp=None, exemplar=None):
        self.samples.append((name, labels, value, timestamp, exemplar))


def _metric_family(name: str, documentation: str, typ: str, unit: str):
    try:
        from prometheus_client.metrics_core import Metric
    except ImportError:
        return _Described(name, documentation, typ, unit)
    try:
        return Metric(name, documentation, typ, unit)
    except ValueError:
        if _names.legacy_validation():
            raise
        # A prometheus_client before 0.22 (Debian's 0.16) refuses a name outside the classic set, which
        # rankstat accepted as the current release does (rankstat._names): its registry then holds the
        # family under a stand-in built with a classic name and given the real one.
        family = Metric("rankstat_stand_in", documentation, typ)
        family.name, family.unit = name, unit
        return family


# --- decorators that keep the decorated function's signature -----------------------------------------

def _decorate(func: Callable, caller: Callable) -> Callable:
    """A function with `func`'s exact signature (inspect.signature and getfullargspec alike, as the
    `decorator` package prometheus_client uses gives) whose body is `caller(func, *args, **kwargs)`.
    Callables without a Python signature are wrapped with functools.wraps."""
    try:
        sig = inspect.signature(func, follow_wrapped=False)
    except (TypeError, ValueError):
        sig = None
    if sig is None or not isinstance(func, type(_decorate)):
        @functools.wraps(func)
        def plain(*args, **kwargs):
            return caller(func, *args, **kwargs)
        return plain
    # The parameter list without defaults or annotations (those are copied onto the new function below).
    bare = sig.replace(parameters=[p.replace(default=p.empty, annotation=p.empty) for p in sig.parameters.values()],
                       return_annotation=sig.empty)
    call = []
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            call.append("*" + p.name)
        elif p.kind == p.KEYWORD_ONLY:
            call.append(f"{p.name}={p.name}")
        elif p.kind == p.VAR_KEYWORD:
            call.append("**" + p.name)
        else:
            call.append(p.name)
    names = set(sig.parameters)
    call_name, func_name = "_call_", "_func_"
    while call_name in names or func_name in names:
        call_name, func_name = call_name + "_", func_name + "_"
    prefix = "async def" if inspect.iscoroutinefunction(func) else "def"
    body = f"return {call_name}({', '.join([func_name] + call)})"
    if prefix == "async def":
        body = "return await " + body[len("return "):]
    source = f"{prefix} {func.__name__ if func.__name__.isidentifier() else 'wrapped'}{bare}:\n    {body}\n"
    namespace: Dict[str, Any] = {call_name: caller, func_name: func}
    exec(compile(source, f"<rankstat decorator of {func.__qualname__}>", "exec"), namespace)
    wrapped = namespace[func.__name__ if func.__name__.isidentifier() else "wrapped"]
    wrapped.__defaults__ = func.__defaults__
    wrapped.__kwdefaults__ = func.__kwdefaults__
    wrapped.__annotations__ = dict(getattr(func, "__annotations__", {}))
    wrapped.__name__ = func.__name__
    wrapped.__qualname__ = func.__qualname__
    wrapped.__doc__ = func.__doc__
    wrapped.__module__ = func.__module__
    wrapped.__dict__.update(func.__dict__)
    wrapped.__wrapped__ = func
    return wrapped


class _Reading:
    """A counter's or gauge's series as prometheus_client's ValueClass (`child._value`): `.get()`,
    `.inc()`, `.set()`, and the number itself in `._value`."""

    __slots__ = ("_child",)

    def __init__(self, child):
        self._child = child

    @property
    def _value(self) -> "_Number":
        return _Number(self.get())

    def get(self) -> float:
        return self._child._segment.value(self._child)

    def inc(self, amount: float = 1) -> None:
        self._child.inc(amount)

    def set(self, value: float) -> None:
        self._child.set(value)


class _Number(float):
    """A value read from the segment. prometheus_client's ValueClass keeps its number in `_value` and
    SGLang does arithmetic on it (`sum(b._value for b in child._buckets)`); `.get()` serves the code that
    reads it like a ValueClass instead."""

    __slots__ = ()

    def get(self) -> float:
        return float(self)


class _Bucket(Cell):
    """One histogram bucket (non-cumulative count), as prometheus_client's `child._buckets[i]`: inc() is the
    C cell's (one call into librankstat, rankstat._accel.Cell), reads go through the segment."""

    __slots__ = ()

    @property
    def _value(self) -> _Number:
        return _Number(self.get())

    def get(self) -> float:
        return self._child._segment.bucket(self._child, self._index)


class _Sum(Cell):
    """A histogram's or summary's sum, as prometheus_client's `child._sum` (built with index -1): inc() in C."""

    __slots__ = ()

    @property
    def _value(self) -> _Number:
        return _Number(self.get())

    def get(self) -> float:
        return self._child._segment.value(self._child)


class _SummaryCount:
    __slots__ = ("_child",)

    def __init__(self, child):
        self._child = child

    @property
    def _value(self) -> _Number:
        return _Number(self.get())

    def get(self) -> float:
        return self._child._segment.bucket(self._child, 0)


# --- timing helpers (decorator or context manager, like prometheus_client's) -------------------------

class Timer:
    """`metric.time()`: a context manager (entering gives the Timer; `t.labels(...)` inside the block picks
    the child the duration goes to) or a decorator (a new Timer per call, so calls may nest or run in
    threads). The duration, never negative, goes to `getattr(metric, callback_name)` at exit."""

    def __init__(self, metric, callback_name: str):
        self._metric = metric
        self._callback_name = callback_name

    def _new_timer(self) -> "Timer":
        return self.__class__(self._metric, self._callback_name)

    def __enter__(self) -> "Timer":
        self._start = default_timer()
        return self

    def __exit__(self, typ, value, traceback) -> None:
        duration = max(default_timer() - self._start, 0)
        getattr(self._metric, self._callback_name)(duration)

    def labels(self, *args, **kw) -> None:
        self._metric = self._metric.labels(*args, **kw)

    def __call__(self, f):
        def wrapped(func, *args, **kwargs):
            with self._new_timer():
                return func(*args, **kwargs)
        return _decorate(f, wrapped)


class InprogressTracker:
    """`gauge.track_inprogress()`: +1 on entry, -1 on exit; a context manager or a decorator."""

    def __init__(self, gauge):
        self._gauge = gauge

    def __enter__(self) -> None:
        self._gauge.inc()

    def __exit__(self, typ, value, traceback) -> None:
        self._gauge.dec()

    def __call__(self, f):
        def wrapped(func, *args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return _decorate(f, wrapped)


class ExceptionCounter:
    """`counter.count_exceptions(exception=Exception)`: +1 when an exception of that type (or tuple of
    types) leaves the block or function; the exception is never swallowed."""

    def __init__(self, counter, exception):
        self._counter = counter
        self._exception = exception

    def __enter__(self) -> None:
        pass

    def __exit__(self, typ, value, traceback) -> None:
        if isinstance(value, self._exception):
            self._counter.inc()  # and the exception goes on

    def __call__(self, f):
        def wrapped(func, *args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return _decorate(f, wrapped)


class _Absent:
    """A method the metric type does not have (Value carries every kind's updates in C): looking it up
    raises AttributeError, so hasattr() answers as it does on prometheus_client's classes."""

    def __set_name__(self, owner, name):
        self._name = name

    def __get__(self, obj, owner=None):
        raise AttributeError(f"'{owner.__name__ if obj is None else type(obj).__name__}' object has no "
                             f"attribute '{self._name}'")


_registration_lock = threading.RLock()


def _new_lock_after_fork() -> None:
    # A thread registering a label value when another forks would leave the lock held in the child forever.
    global _registration_lock
    _registration_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)


def _rebind_inherited() -> None:
    """In a forked child, once: every series the process inherited is registered in the child's own segment
    (opened now) and written there from now on, starting from 0. prometheus_client does the same when a
    value first sees a new pid: every value re-reads its key from the child's own file (0), so every
    inherited series exists in the child from its first metric call on. The parent's totals are the
    parent's: nothing here touches its segment."""
    with _registration_lock:
        seg = backend.segment()
        if not seg.take_inherited():
            return
        for family in backend.families():
            try:
                family._rebind_children(seg)
            except Exception as e:  # a family half-built at the fork: its children stay no-ops
                log.warning("rankstat: cannot re-bind %r after fork: %s: %s", family, type(e).__name__, e)


def _check_label_values(family: str, labelnames: Tuple[str, ...], values: Tuple[str, ...]) -> None:
    """A new child's label values must be text the segment (and the exposition) can carry: UTF-8. A lone
    surrogate ('\\ud800') is not: the call that labels it raises UnicodeEncodeError (a ValueError), naming
    the label, instead of the registration being refused later with only a log line. Only a new child is
    checked (labels() of a known child never comes here)."""
    for name, value in zip(labelnames, values):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UnicodeEncodeError(e.encoding, e.object, e.start, e.end,
                                     f"{e.reason}: label {name!r} of {family} must be UTF-8 text") from None


def _multiprocess_warning(message: str) -> None:
    # rankstat is always prometheus_client's multiprocess mode, which warns here (the value stays exported).
    warnings.warn(message, UserWarning, stacklevel=3)


# --- metrics -----------------------------------------------------------------------------------------
# A metric object is a Family (labels() in C) and a Value (inc/dec/set/observe in C) at once, as
# prometheus_client's metric objects are the family and, unlabelled or as a labelled child, the series:
# labels() builds each child with `self.__class__(...)`, so a subclass's children are instances of the
# subclass, its __init__ included. A labelled parent is bound to no series: its updates raise
# prometheus_client's "missing label values" ValueError, in C.

class _Metric(Family):
    _type = ""  # "counter", "gauge", "summary" or "histogram" in each class
    _children: Dict[Tuple[str, ...], Any]
    _kind = 0
    _reserved_labelnames: Tuple[str, ...] = ()

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None, *, _segment: Optional[backend.Segment] = None,
                 _identity_labels: bool = False, **ignored: Any):
        # _segment: where the series live; the process's segment unless a rankstat.Reporter's families
        # bind them to its own (with _identity_labels: the daemon adds that Reporter's identity labels).
        self._segment = backend.segment() if _segment is None else _segment
        self._identity_labels = _identity_labels
        self._name = _full_name(self._type, name, namespace, subsystem, unit)
        self._labelnames = _label_names(self._type, self._name, labelnames, self._reserved_labelnames)
        self._labelvalues = tuple(_labelvalues or ())
        self._kwargs: Dict[str, Any] = {}
        if _segment is not None:  # the children are bound where their family is
            self._kwargs.update(_segment=_segment, _identity_labels=_identity_labels)
        self._documentation = documentation
        self._unit = unit
        if self._labelvalues and len(self._labelvalues) != len(self._labelnames):
            raise ValueError("Incorrect label count")
        if not self._labelvalues:
            # Both checks before anything reaches the segment: a refused duplicate declares nothing there.
            if registry is _DEFAULT_REGISTRY:
                registry = _DEFAULT_REGISTRY.resolve()
            with _registration_lock:
                clashes = _conflicts(self)
                if clashes:
                    raise ValueError(f"Duplicated timeseries in CollectorRegistry: {clashes}")
                if registry:
                    registry.register(self)
                _claim_declaration(self)
            if _segment is None:  # a Reporter's families follow their Reporter through a fork
                backend.track_family(self)
        if self._is_parent():
            self._removed: Dict[Tuple[str, ...], Any] = {}
            self._bind(None, 0, self._kind)
        else:
            self._metric_init()

    # prometheus_client's predicates
    def _is_observable(self) -> bool:
        return not self._labelnames or bool(self._labelvalues)

    def _is_parent(self) -> bool:
        return bool(self._labelnames) and not self._labelvalues

    def _raise_if_not_observable(self) -> None:
        if not self._is_observable():
            raise ValueError(f"{self._type} metric is missing label values")

    # What the segment exposes as the family name (the text format's; a counter's carries _total).
    @property
    def _exposed_name(self) -> str:
        return self._name

    def _mode(self) -> int:
        return 0

    def _bounds(self) -> Sequence[float]:
        return ()

    def _metric_init(self) -> None:
        """Registers this object's series (an unlabelled metric or a labelled child) in the process's
        segment and binds it; address 0 (no segment, or the segment refused the series) makes every update
        a no-op."""
        with _registration_lock:
            seg = self._segment
            if seg.inherited:  # a forked child's first new series: the inherited ones are bound first
                _rebind_inherited()
            sid = self._series_id_in(seg)
            self._bind(seg.address if sid != backend.NO_SERIES else 0, sid, self._kind)
        self._created = _time.time()

    def _series_id_in(self, seg) -> int:
        return seg.register(self._kind, self._mode(), self._exposed_name, self._documentation_text(),
                            self._labelnames, self._labelvalues, self._bounds(),
                            identity_labels=self._identity_labels)

    def _documentation_text(self) -> str:
        return "" if self._documentation is None else str(self._documentation)

    def _new_child(self, key: Tuple[str, ...]):
        # Called by labels() (C) on a miss, with the tuple of str label values.
        with _registration_lock:  # two threads labelling one new key must get one child
            child = self._children.get(key)
            if child is not None:
                return child
            child = self._removed.pop(key, None)
            if child is None:
                _check_label_values(self._name, self._labelnames, key)
                child = self.__class__(self._name, documentation=self._documentation, labelnames=self._labelnames,
                                       unit=self._unit, _labelvalues=key, **self._kwargs)
                child._parent = self  # keeps the family tracked (fork re-binding) while the child is in use
            self._children[key] = child
            return child

    def _rebind(self) -> None:
        # Called by Value (C or Python) before the first update of a detached series, and by the reads.
        if self._segment is not backend.segment():
            # A Reporter's series, detached by a fork or by closing the Reporter: the segment is gone (or
            # the parent's), so the series stays a no-op, as the Reporter's own calls are.
            self._bind(0, self._series_id)
            return
        try:
            _rebind_inherited()
        except Exception as e:  # never into the engine: the series' updates become no-ops
            log.warning("rankstat: cannot re-bind metrics after fork: %s: %s", type(e).__name__, e)
        if self._detached:  # not reachable from any family: nothing to register it under
            self._bind(0, self._series_id)

    def remove(self, *labelvalues: Any) -> None:
        """Forgets the child of these label values (multiprocess mode: warns, and its value stays served)."""
        _multiprocess_warning("Removal of labels has not been implemented in multi-process mode yet.")
        if not self._labelnames:
            raise ValueError(f"No label names were set when constructing {self}")
        if len(labelvalues) != len(self._labelnames):
            raise ValueError(f"Incorrect label count (expected {len(self._labelnames)}, got {labelvalues})")
        key = tuple(str(v) for v in labelvalues)
        with _registration_lock:
            child = self._children.pop(key, None)
            if child is not None:
                # As in prometheus_client's multiprocess mode the value stays exported; labelling the same
                # values again continues the same series.
                self._removed[key] = child

    def remove_by_labels(self, labels: Dict[str, Any]) -> None:
        """Forgets every child whose labels include `labels` (a dict of some label names to values); as
        remove(), it warns and the values stay served."""
        _multiprocess_warning("Removal of labels has not been implemented in multi-process mode yet.")
        if not self._labelnames:
            raise ValueError(f"No label names were set when constructing {self}")
        if not isinstance(labels, dict):
            raise TypeError("labels must be a dict of {label_name: label_value}")
        invalid = [k for k in labels if k not in self._labelnames]
        if invalid:
            raise ValueError(f"Unknown label names: {invalid}; expected {self._labelnames}")
        want = {self._labelnames.index(k): str(v) for k, v in labels.items()}
        with _registration_lock:
            for key in [k for k in self._children if all(k[i] == v for i, v in want.items())]:
                self._removed[key] = self._children.pop(key)

    def clear(self) -> None:
        """Forgets every child (multiprocess mode: warns, and their values stay served)."""
        _multiprocess_warning("Clearing labels has not been implemented in multi-process mode yet")
        with _registration_lock:
            if self._is_parent():
                self._removed.update(self._children)
            self._children = {}

    def _series(self) -> list:
        """This object's series: itself when observable, else its children (current and removed)."""
        if not self._is_parent():
            return [self]
        return list(self._children.values()) + list(getattr(self, "_removed", {}).values())

    def _detach_children_after_fork(self) -> None:
        # In the child, right after fork(): every series keeps its place (labels() and held references
        # return the same objects, as prometheus_client's do) but never writes into the parent's segment.
        for series in self._series():
            series._detach()

    def _rebind_children(self, seg) -> None:
        # With _registration_lock held (_rebind_inherited).
        for series in self._series():
            if series._detached:
                sid = series._series_id_in(seg)
                series._bind(seg.address if sid != backend.NO_SERIES else 0, sid)

    # --- the registry's and collect()'s view ---------------------------------------------------------

    def describe(self):
        """The family as a registry sees it: one metric family (name, help, type, unit), no samples."""
        return [_metric_family(self._name, self._documentation, self._type, self._unit)]

    def collect(self):
        """This process's own values (prometheus_client's metric collect() in multiprocess mode reads this
        process's values alike); the cross-process aggregate is what rankstatd serves."""
        metric = _metric_family(self._name, self._documentation, self._type, self._unit)
        with _registration_lock:
            children = [(dict(zip(self._labelnames, s._labelvalues)), s) for s in (
                list(self._children.values()) if self._is_parent() else [self])]
        for labels, series in children:
            for suffix, extra, value in series._child_samples():
                metric.add_sample(self._name + suffix, dict(labels, **extra), value)
        return [metric]

    def _child_samples(self):
        return []

    @property
    def _metrics(self) -> dict:
        """prometheus_client's name for a parent's children (label values -> child)."""
        if not self._is_parent():
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '_metrics'")
        return self._children

    def __str__(self) -> str:
        return f"{self._type}:{self._name}"

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__name__}({self._name})"


_reset_function: List[Any] = []


def _counter_reset(seg: backend.Segment, address: int, series_id: int) -> None:
    # rankstat_counter_reset through a PyDLL handle (the GIL stays held, as for every update: the reporter
    # is single-writer). Cold: only Counter.reset() calls it.
    if not _reset_function:
        lib = seg.reporter.library
        fn = getattr(ctypes.PyDLL(lib._name, handle=lib._handle), "rankstat_counter_reset", None)
        if fn is None:
            raise RuntimeError("the rankstat library lacks rankstat_counter_reset: it is older than this package")
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32]
        _reset_function.append(fn)
    _reset_function[0](address, series_id)


def _value_of(metric) -> "_Reading":
    if metric._is_parent():
        raise AttributeError(f"'{type(metric).__name__}' object has no attribute '_value'")
    return _Reading(metric)


class Counter(_Metric):
    """prometheus_client's Counter: inc(amount=1, exemplar=None) (C), count_exceptions(), reset()."""

    _type = "counter"
    _kind = KIND_COUNTER
    dec = _Absent()
    set = _Absent()
    observe = _Absent()

    @property
    def _exposed_name(self) -> str:
        return self._name + "_total"

    def reset(self) -> None:
        """This process's total back to 0, as prometheus_client's reset() sets its own value to 0 (the
        other processes' totals are theirs)."""
        if self._is_parent():
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '_value'")
        if self._detached:
            self._rebind()
        address = self._reporter_address
        if address:
            _counter_reset(self._segment, address, self._series_id)
        self._created = _time.time()

    def count_exceptions(self, exception=Exception) -> ExceptionCounter:
        """A context manager or decorator that adds 1 when an exception of `exception` (a type or a tuple
        of types) leaves the block or function; the exception goes on."""
        self._raise_if_not_observable()
        return ExceptionCounter(self, exception)

    @property
    def _value(self):
        return _value_of(self)

    def get(self) -> float:
        return self._segment.value(self)

    def _child_samples(self):
        return [("_total", {}, self._segment.value(self))] + _created_sample(self)


class Gauge(_Metric):
    """prometheus_client's Gauge in multiprocess mode: inc/dec/set (C), the ten multiprocess modes."""

    _type = "gauge"
    _kind = KIND_GAUGE
    _MULTIPROC_MODES = frozenset(MODES)
    _MOST_RECENT_MODES = MOST_RECENT_MODES
    observe = _Absent()

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None, multiprocess_mode: GaugeMode = "all", **ignored: Any):
        self._multiprocess_mode = multiprocess_mode
        if multiprocess_mode not in self._MULTIPROC_MODES:
            raise ValueError("Invalid multiprocess mode: " + str(multiprocess_mode))
        self._is_most_recent = multiprocess_mode in self._MOST_RECENT_MODES
        if self._is_most_recent:
            # prometheus_client refuses these before anything else; an instance attribute shadows the C
            # methods for this object only.
            self.inc = functools.partial(_most_recent_refusal, "inc")
            self.dec = functools.partial(_most_recent_refusal, "dec")
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry, _labelvalues,
                         **ignored)
        self._kwargs["multiprocess_mode"] = self._multiprocess_mode

    def _mode(self) -> int:
        return MODES[self._multiprocess_mode]

    def set_to_current_time(self) -> None:
        """Sets the gauge to the current Unix time in seconds."""
        self.set(_time.time())

    def track_inprogress(self) -> InprogressTracker:
        """A context manager or decorator counting the blocks or calls in progress: +1 on entry, -1 on exit."""
        self._raise_if_not_observable()
        return InprogressTracker(self)

    def time(self) -> Timer:
        """A context manager or decorator that sets the gauge to the duration of the block or call, in seconds."""
        return Timer(self, "set")

    def set_function(self, f: Callable[[], float]) -> None:
        """Makes `f()` the gauge's value in this process's collect(); rankstatd serves the last value set."""
        # prometheus_client's multiprocess collector reads the processes' files and never calls the
        # function; its files keep the last value set. The segment likewise keeps the last value set.
        self._raise_if_not_observable()
        self._function = f

    @property
    def _value(self):
        return _value_of(self)

    def get(self) -> float:
        return self._segment.value(self)

    def _child_samples(self):
        # As prometheus_client's own collect(): a set_function callback gives the value (its multiprocess
        # collector, like rankstatd, serves the last value set instead).
        f = getattr(self, "_function", None)
        return [("", {}, float(f()) if f is not None else self._segment.value(self))]


def _most_recent_refusal(method: str, amount: float = 1) -> None:
    raise RuntimeError(f"{method} must not be used with the mostrecent mode")


class Summary(_Metric):
    """prometheus_client's Summary: observe(amount) (C), time(); count and sum, no quantiles."""

    _type = "summary"
    _kind = KIND_SUMMARY
    _reserved_labelnames = ("quantile",)
    inc = _Absent()
    dec = _Absent()
    set = _Absent()

    def time(self) -> Timer:
        """A context manager or decorator that observes the duration of the block or call, in seconds."""
        return Timer(self, "observe")

    def _metric_init(self) -> None:
        super()._metric_init()
        # An instance attribute, built once per series (a labelled parent has none: AttributeError, as in
        # prometheus_client): `child._sum.inc(v)` is an attribute read and one C call.
        self._sum = _Sum(self, -1)

    @property
    def _count(self) -> _SummaryCount:
        if self._is_parent():
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '_count'")
        return _SummaryCount(self)

    def _child_samples(self):
        seg = self._segment
        return [("_count", {}, seg.bucket(self, 0)), ("_sum", {}, seg.value(self))] + _created_sample(self)


def _created_sample(metric) -> list:
    # prometheus_client's collect() adds <name>_created unless PROMETHEUS_DISABLE_CREATED_SERIES is set.
    if os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() in ("true", "1", "t"):
        return []
    return [("_created", {}, getattr(metric, "_created", 0.0))]


def _go_float(b: float) -> str:
    try:
        from prometheus_client.utils import floatToGoString
        return floatToGoString(b)
    except ImportError:
        pass
    if b == INF:
        return "+Inf"
    if b == -INF:
        return "-Inf"
    return repr(float(b))


class Histogram(_Metric):
    """prometheus_client's Histogram: observe(amount, exemplar=None) (C), time(), and the child internals
    SGLang touches (`_upper_bounds`, `_buckets[i].inc`, `_sum.inc`)."""

    _type = "histogram"
    _kind = KIND_HISTOGRAM
    _reserved_labelnames = ("le",)
    DEFAULT_BUCKETS = DEFAULT_BUCKETS
    inc = _Absent()
    dec = _Absent()
    set = _Absent()

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None, buckets: Sequence[Any] = DEFAULT_BUCKETS,
                 **ignored: Any):
        self._prepare_buckets(buckets)
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry, _labelvalues,
                         **ignored)
        self._kwargs["buckets"] = buckets

    def _prepare_buckets(self, source_buckets: Sequence[Any]) -> None:
        bounds = [float(b) for b in source_buckets]
        if bounds != sorted(bounds):
            raise ValueError("Buckets not in sorted order")
        if bounds and bounds[-1] != INF:
            bounds.append(INF)
        if len(bounds) < 2:
            raise ValueError("Must have at least two buckets")
        # prometheus_client takes NaN bounds (sorted() cannot place them); no Prometheus reader can use
        # them, so rankstat refuses them (docs/semantics.md).
        if any(math.isnan(b) for b in bounds):
            raise ValueError("Buckets must not be NaN")
        self._upper_bounds = bounds

    def _bounds(self) -> Sequence[float]:
        return self._upper_bounds

    def time(self) -> Timer:
        """A context manager or decorator that observes the duration of the block or call, in seconds."""
        return Timer(self, "observe")

    def _metric_init(self) -> None:
        super()._metric_init()
        # Instance attributes, built once per series as prometheus_client builds its values (a labelled
        # parent has none: AttributeError, as there). SGLang's inter-token-latency code on older versions
        # runs `child._buckets[i].inc(n)` and `child._sum.inc(v)` per streamed chunk: an attribute read,
        # an index and one C call each (docs/performance.md).
        self._buckets = [_Bucket(self, i) for i in range(len(self._upper_bounds))]
        self._sum = _Sum(self, -1)

    def _child_samples(self):
        seg = self._segment
        out, acc = [], 0.0
        for i, bound in enumerate(self._upper_bounds):
            acc += seg.bucket(self, i)
            out.append(("_bucket", {"le": _go_float(bound)}, acc))
        out.append(("_count", {}, acc))
        if self._upper_bounds[0] >= 0:
            out.append(("_sum", {}, seg.value(self)))
        return out + _created_sample(self)


__all__ = ["Counter", "Gauge", "Histogram", "Summary", "CollectorRegistry", "REGISTRY", "Timer",
           "InprogressTracker", "ExceptionCounter", "DEFAULT_BUCKETS", "MODES"]
