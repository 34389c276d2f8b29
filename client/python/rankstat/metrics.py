"""Counter, Gauge, Histogram and Summary with prometheus_client's interface, writing into the process's
rankstat segment instead of prometheus_client's files.

They are what an engine's collector classes create through their `_counter_cls` / `_gauge_cls` /
`_histogram_cls` / `_summary_cls` hooks (SGLang, vLLM, TensorRT-LLM): the same constructor (name,
documentation, labelnames, namespace, subsystem, unit, registry, multiprocess_mode, buckets; unknown
keyword arguments are accepted and ignored), the same `labels()` rules and errors, the same child API,
and the histogram-child internals SGLang's call sites touch (`_buckets[i].inc`, `_sum.inc`,
`_upper_bounds`, `bucket._value.get()`). Semantics are prometheus_client's multiprocess mode: a
child exists at zero as soon as it is labelled; `remove()` and `clear()` forget the child but its value
stays exported; the ten gauge modes mean what they mean there (rankstatd aggregates them).

Each child is one series registered in the segment with the family's exposed name, HELP text, type,
label names, buckets and mode, so the daemon serves what the engine declared. Updates are one C call
(`rankstat._accel`: a C extension, or its ctypes twin), made with the GIL held, so threads of one
process may share metrics. After a fork every family and child keeps working in the child process, in a
segment of the child's own (rankstat.backend, "fork()").
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
import time as _time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import backend
from ._accel import Family, Value

INF = float("inf")

log = logging.getLogger("rankstat")

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

MODES = {  # prometheus_client's multiprocess modes -> RANKSTAT_MODE_*
    "all": 0, "liveall": 1, "sum": 2, "livesum": 3, "min": 4, "livemin": 5, "max": 6, "livemax": 7,
    "mostrecent": 8, "livemostrecent": 9,
}
_MOST_RECENT = ("mostrecent", "livemostrecent")

KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM, KIND_SUMMARY = 1, 2, 3, 4

DEFAULT_BUCKETS = (.005, .01, .025, .05, .075, .1, .25, .5, .75, 1.0, 2.5, 5.0, 7.5, 10.0, INF)


def _full_name(kind: str, name: str, namespace: str, subsystem: str, unit: str) -> str:
    if not name:
        raise ValueError("Metric name should not be empty")
    full = "".join(part + "_" for part in (namespace, subsystem) if part) + name
    if kind == "counter" and full.endswith("_total"):
        full = full[:-6]  # the family; samples are exposed as <family>_total
    if unit and not full.endswith("_" + unit):
        full += "_" + unit
    if not _METRIC_NAME.match(full):
        raise ValueError("invalid metric name " + full)
    return full


def _label_names(kind: str, name: str, labelnames: Iterable[str], reserved: Tuple[str, ...]) -> Tuple[str, ...]:
    # Stricter than prometheus_client 0.25's default (which admits any UTF-8): the text format rankstatd
    # serves needs legacy names, and a duplicate would make two labels of one name.
    if isinstance(labelnames, str):
        raise ValueError(f"{name}: labelnames must be a sequence of label names, not the string {labelnames!r}")
    names = tuple(labelnames)
    seen = set()
    for label in names:
        if not isinstance(label, str) or not _LABEL_NAME.match(label):
            raise ValueError(f"{name}: invalid label name {label!r}")
        if label.startswith("__"):
            raise ValueError(f"{name}: reserved label name {label!r} (names starting with __ are reserved)")
        if label in reserved:
            raise ValueError(f"{name}: label name {label!r} is reserved for a {kind}")
        if label in seen:
            raise ValueError(f"{name}: duplicate label name {label!r}")
        seen.add(label)
    return names


# --- what the children's internals return -----------------------------------------------------------

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
        return backend.segment().value(self._child)

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


class _Bucket:
    """One histogram bucket (non-cumulative count), as prometheus_client's `child._buckets[i]`."""

    __slots__ = ("_child", "_index")

    def __init__(self, child, index: int):
        self._child, self._index = child, index

    @property
    def _value(self) -> _Number:
        return _Number(self.get())

    def inc(self, amount: float = 1) -> None:
        backend.segment().bucket_add(self._child, self._index, amount)

    def get(self) -> float:
        return backend.segment().bucket(self._child, self._index)


class _Sum:
    """A histogram's or summary's sum, as prometheus_client's `child._sum`."""

    __slots__ = ("_child",)

    def __init__(self, child):
        self._child = child

    @property
    def _value(self) -> _Number:
        return _Number(self.get())

    def inc(self, amount: float = 1) -> None:
        backend.segment().add_sum(self._child, amount)

    def get(self) -> float:
        return backend.segment().value(self._child)


class _SummaryCount:
    __slots__ = ("_child",)

    def __init__(self, child):
        self._child = child

    @property
    def _value(self) -> _Number:
        return _Number(self.get())

    def get(self) -> float:
        return backend.segment().bucket(self._child, 0)


# --- timing helpers (decorator or context manager, like prometheus_client's) -------------------------

class _Timer:
    def __init__(self, record):
        self._record = record
        self._start = 0.0

    def __enter__(self):
        self._start = _time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._record(max(_time.perf_counter() - self._start, 0.0))

    def labels(self, *args, **kw):  # prometheus_client allows timing a labelled metric's child later
        raise ValueError("time() must be called on a labelled child")

    def __call__(self, f):
        @functools.wraps(f)
        def wrapped(*args, **kw):
            with _Timer(self._record):
                return f(*args, **kw)
        return wrapped


class _InProgress:
    def __init__(self, gauge):
        self._gauge = gauge

    def __enter__(self):
        self._gauge.inc()

    def __exit__(self, *exc):
        self._gauge.dec()

    def __call__(self, f):
        @functools.wraps(f)
        def wrapped(*args, **kw):
            with self:
                return f(*args, **kw)
        return wrapped


class _ExceptionCounter:
    def __init__(self, counter, exception):
        self._counter, self._exception = counter, exception

    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        if isinstance(value, self._exception):
            self._counter.inc()
        return False

    def __call__(self, f):
        @functools.wraps(f)
        def wrapped(*args, **kw):
            with self:
                return f(*args, **kw)
        return wrapped


# --- children: one registered series each ------------------------------------------------------------
# Value (rankstat._accel) carries the hot-path methods in C; these subclasses add prometheus_client's
# helpers and internals, which are cold.

class _Child(Value):
    """What every child shares: after a fork, its next update or read binds it in the child's segment.
    `_family` (set by the family that made it) keeps that family tracked while the child is in use."""

    def _rebind(self) -> None:
        # Called by Value (C or Python) before the first update of a detached child, and by the reads.
        try:
            _rebind_inherited()
        except Exception as e:  # never into the engine: the child's updates become no-ops
            log.warning("rankstat: cannot re-bind metrics after fork: %s: %s", type(e).__name__, e)
        if self._detached:  # not reachable from any family: nothing to register it under
            self._reporter_address = 0


class CounterChild(_Child):
    @property
    def _value(self):
        return _Reading(self)

    def count_exceptions(self, exception=Exception):
        return _ExceptionCounter(self, exception)

    def get(self) -> float:
        return backend.segment().value(self)


class GaugeChild(_Child):
    @property
    def _value(self):
        return _Reading(self)

    def set_to_current_time(self) -> None:
        self.set(_time.time())

    def track_inprogress(self):
        return _InProgress(self)

    def time(self):
        return _Timer(self.set)

    def set_function(self, f) -> None:
        # prometheus_client in multiprocess mode accepts the callback but exports only the files' values;
        # the segment likewise keeps the last value set.
        self._function = f

    def get(self) -> float:
        return backend.segment().value(self)


class MostRecentGaugeChild(GaugeChild):
    def inc(self, amount: float = 1) -> None:
        raise RuntimeError("inc must not be used with the mostrecent mode")

    def dec(self, amount: float = 1) -> None:
        raise RuntimeError("dec must not be used with the mostrecent mode")


class HistogramChild(_Child):
    # _upper_bounds is set per child (a list, as prometheus_client's).

    @property
    def _buckets(self) -> List[_Bucket]:
        found = self.__dict__.get("_bucket_list")
        if found is None:
            found = [_Bucket(self, i) for i in range(len(self._upper_bounds))]
            self.__dict__["_bucket_list"] = found
        return found

    @property
    def _sum(self) -> _Sum:
        return _Sum(self)

    def time(self):
        return _Timer(self.observe)


class SummaryChild(_Child):
    @property
    def _sum(self) -> _Sum:
        return _Sum(self)

    @property
    def _count(self) -> _SummaryCount:
        return _SummaryCount(self)

    def time(self):
        return _Timer(self.observe)


_registration_lock = threading.RLock()


def _new_lock_after_fork() -> None:
    # A thread registering a label value when another forks would leave the lock held in the child forever.
    global _registration_lock
    _registration_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)


def _rebind_inherited() -> None:
    """In a forked child, once: every child the process inherited is registered in the child's own segment
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


# --- families ----------------------------------------------------------------------------------------

class _Metric(Family):
    _type = ""
    _kind = 0
    _reserved_labelnames: Tuple[str, ...] = ()
    _child_class: type = Value

    def __init__(self, name: str, documentation: str = "", labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = None, _labelvalues: Optional[Sequence[str]] = None,
                 **ignored: Any):
        self._original_name = name
        self._namespace, self._subsystem, self._unit = namespace, subsystem, unit
        self._name = _full_name(self._type, name, namespace, subsystem, unit)
        self._labelnames = _label_names(self._type, self._name, labelnames, self._reserved_labelnames)
        self._documentation = "" if documentation is None else str(documentation)
        self._children = {}
        self._removed: Dict[Tuple[str, ...], Any] = {}
        self._default = None
        backend.track_family(self)
        if _labelvalues:
            # prometheus_client builds a child this way; here it is the parent's child, used directly.
            values = tuple(str(v) for v in _labelvalues)
            if len(values) != len(self._labelnames):
                raise ValueError("Incorrect label count")
            self._default = self._new_child(values)
        elif not self._labelnames:
            self._default = self._new_child(())

    # What the segment exposes as the family name (the text format's; a counter's carries _total).
    @property
    def _exposed_name(self) -> str:
        return self._name

    def _mode(self) -> int:
        return 0

    def _bounds(self) -> Sequence[float]:
        return ()

    def _new_child(self, key: Tuple[str, ...]):
        with _registration_lock:  # two threads labelling one new key must get one series
            child = self._children.get(key)
            if child is not None:
                return child
            seg = backend.segment()
            if seg.inherited:  # a forked child's first new series: the inherited ones are bound first
                _rebind_inherited()
            child = self._removed.pop(key, None)
            if child is None:
                sid = self._series_id_in(seg, key)
                # Address 0 makes every update a no-op: a series the segment could not take, or no segment.
                child = self._child_class(seg.address if sid != backend.NO_SERIES else 0, sid, self._kind)
                child._family = self
                self._init_child(child)
            self._children[key] = child
            return child

    def _series_id_in(self, seg, key: Tuple[str, ...]) -> int:
        return seg.register(self._kind, self._mode(), self._exposed_name, self._documentation, self._labelnames,
                            key, self._bounds())

    def _init_child(self, child) -> None:
        pass

    def _only(self):
        child = self._default
        if child is None:
            if self._labelnames:
                raise ValueError(f"{self._type} metric is missing label values")
            child = self._default = self._new_child(())
        return child

    def remove(self, *labelvalues: Any) -> None:
        if not self._labelnames:
            raise ValueError(f"No label names were set when constructing {self}")
        if len(labelvalues) != len(self._labelnames):
            raise ValueError(f"Incorrect label count (expected {len(self._labelnames)}, got {labelvalues})")
        key = tuple(str(v) for v in labelvalues)
        child = self._children.pop(key, None)
        if child is not None:
            # As in prometheus_client's multiprocess mode the value stays exported; labelling the same
            # values again continues the same series.
            self._removed[key] = child

    def remove_by_labels(self, labels: Dict[str, Any]) -> None:
        if not self._labelnames:
            raise ValueError(f"No label names were set when constructing {self}")
        if not isinstance(labels, dict):
            raise TypeError("labels must be a dict of {label_name: label_value}")
        invalid = [k for k in labels if k not in self._labelnames]
        if invalid:
            raise ValueError(f"Unknown label names: {invalid}; expected {self._labelnames}")
        want = {self._labelnames.index(k): str(v) for k, v in labels.items()}
        for key in [k for k in self._children if all(k[i] == v for i, v in want.items())]:
            self._removed[key] = self._children.pop(key)

    def clear(self) -> None:
        self._removed.update(self._children)
        self._children.clear()

    def _detach_children_after_fork(self) -> None:
        # In the child, right after fork(): the children keep their place (labels() and held references
        # return the same objects, as prometheus_client's do) but never write into the parent's segment.
        for child in list(self._children.values()) + list(getattr(self, "_removed", {}).values()):
            child._detach()

    def _rebind_children(self, seg) -> None:
        # With _registration_lock held (_rebind_inherited).
        for key, child in list(self._children.items()) + list(getattr(self, "_removed", {}).items()):
            if child._detached:
                sid = self._series_id_in(seg, key)
                child._bind(seg.address if sid != backend.NO_SERIES else 0, sid)

    def describe(self):
        return []

    def collect(self):
        return []

    def __str__(self) -> str:
        return f"{self._type}:{self._name}"

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__name__}({self._name})"


class Counter(_Metric):
    _type = "counter"
    _kind = KIND_COUNTER
    _child_class = CounterChild

    @property
    def _exposed_name(self) -> str:
        return self._name + "_total"

    def inc(self, amount: float = 1, exemplar: Optional[Dict[str, str]] = None) -> None:
        self._only().inc(amount)

    def count_exceptions(self, exception=Exception):
        return _ExceptionCounter(self._only(), exception)

    @property
    def _value(self):
        return self._only()._value


class Gauge(_Metric):
    _type = "gauge"
    _kind = KIND_GAUGE
    _MULTIPROC_MODES = frozenset(MODES)

    def __init__(self, name: str, documentation: str = "", labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = None, _labelvalues: Optional[Sequence[str]] = None,
                 multiprocess_mode: str = "all", **ignored: Any):
        if multiprocess_mode not in MODES:
            raise ValueError("Invalid multiprocess mode: " + str(multiprocess_mode))
        self._multiprocess_mode = multiprocess_mode
        self._child_class = MostRecentGaugeChild if multiprocess_mode in _MOST_RECENT else GaugeChild
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry, _labelvalues)

    def _mode(self) -> int:
        return MODES[self._multiprocess_mode]

    def inc(self, amount: float = 1) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._only().dec(amount)

    def set(self, value: float) -> None:
        self._only().set(value)

    def set_to_current_time(self) -> None:
        self._only().set_to_current_time()

    def track_inprogress(self):
        return self._only().track_inprogress()

    def time(self):
        # prometheus_client resolves the child at exit; an unlabelled gauge has one.
        return _Timer(lambda seconds: self.set(seconds))

    def set_function(self, f) -> None:
        self._only().set_function(f)

    @property
    def _value(self):
        return self._only()._value


class _Distribution(_Metric):
    """What histograms and summaries share: observations, the timer, the sum."""

    def observe(self, amount: float, exemplar: Optional[Dict[str, str]] = None) -> None:
        self._only().observe(amount)

    def time(self):
        return _Timer(lambda seconds: self.observe(seconds))

    @property
    def _sum(self):
        return self._only()._sum


class Histogram(_Distribution):
    _type = "histogram"
    _kind = KIND_HISTOGRAM
    _reserved_labelnames = ("le",)
    _child_class = HistogramChild
    DEFAULT_BUCKETS = DEFAULT_BUCKETS

    def __init__(self, name: str, documentation: str = "", labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = None, _labelvalues: Optional[Sequence[str]] = None,
                 buckets: Sequence[Any] = DEFAULT_BUCKETS, **ignored: Any):
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("Buckets not in sorted order")
        if bounds and bounds[-1] != INF:
            bounds.append(INF)
        if len(bounds) < 2:
            raise ValueError("Must have at least two buckets")
        if any(math.isnan(b) for b in bounds):
            raise ValueError("Buckets must not be NaN")
        self._upper_bounds = bounds
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry, _labelvalues)

    def _bounds(self) -> Sequence[float]:
        return self._upper_bounds

    def _init_child(self, child) -> None:
        child._upper_bounds = list(self._upper_bounds)

    @property
    def _buckets(self):
        return self._only()._buckets


class Summary(_Distribution):
    _type = "summary"
    _kind = KIND_SUMMARY
    _reserved_labelnames = ("quantile",)
    _child_class = SummaryChild

    @property
    def _count(self):
        return self._only()._count


__all__ = ["Counter", "Gauge", "Histogram", "Summary", "CounterChild", "GaugeChild", "HistogramChild",
           "SummaryChild", "DEFAULT_BUCKETS", "MODES"]
