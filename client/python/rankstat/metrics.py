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

This module holds the metric classes and their registration (one lock, the fork re-binding); the jobs
around them are modules of their own: the name rules (rankstat._names), the registries and the
one-declaration rule (rankstat._registry: CollectorRegistry and REGISTRY, re-exported here), the child
value internals SGLang touches (rankstat._child_values) and the timers, trackers and signature-keeping
decorators (rankstat._timing: Timer, InprogressTracker and ExceptionCounter, re-exported here).

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

import functools
import logging
import math
import threading
import time as _time
import warnings
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Tuple

from . import _fork_locks, backend
from ._accel import Family
from ._child_values import INF, _Bucket, _Sum, _SummaryCount, counter_reset, created_sample, go_float, value_of
from ._names import check_label_values, full_name, label_names
from ._native import (GAUGE_MODES, KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM, KIND_SUMMARY, MOST_RECENT_MODES,
                      GaugeMode)
from ._registry import DEFAULT_REGISTRY, REGISTRY, CollectorRegistry, claim_declaration, conflicts, metric_family
from ._timing import ExceptionCounter, InprogressTracker, Timer

log = logging.getLogger("rankstat")

# prometheus_client's multiprocess modes -> RANKSTAT_MODE_*, and the series kinds: rankstat._native's.
MODES = GAUGE_MODES

DEFAULT_BUCKETS = (.005, .01, .025, .05, .075, .1, .25, .5, .75, 1.0, 2.5, 5.0, 7.5, 10.0, INF)


class _Absent:
    """A method the metric type does not have (Value carries every kind's updates in C): looking it up
    raises AttributeError, so hasattr() answers as it does on prometheus_client's classes."""

    def __set_name__(self, owner, name):
        self._name = name

    def __get__(self, obj, owner=None):
        raise AttributeError(f"'{owner.__name__ if obj is None else type(obj).__name__}' object has no "
                             f"attribute '{self._name}'")


# Orders registrations (labels() of a new key, constructors, the fork re-binding); new in a forked child.
_registration_lock = _fork_locks.module_lock(globals(), "_registration_lock", threading.RLock)


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
                 subsystem: str = "", unit: str = "", registry: Any = DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None, *, _segment: Optional[backend.Segment] = None,
                 _identity_labels: bool = False, **ignored: Any):
        # _segment: where the series live; the process's segment unless a rankstat.Reporter's families
        # bind them to its own (with _identity_labels: the daemon adds that Reporter's identity labels).
        self._segment = backend.segment() if _segment is None else _segment
        self._identity_labels = _identity_labels
        self._name = full_name(self._type, name, namespace, subsystem, unit)
        self._labelnames = label_names(self._type, self._name, labelnames, self._reserved_labelnames)
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
            if registry is DEFAULT_REGISTRY:
                registry = DEFAULT_REGISTRY.resolve()
            with _registration_lock:
                clashes = conflicts(self)
                if clashes:
                    raise ValueError(f"Duplicated timeseries in CollectorRegistry: {clashes}")
                if registry:
                    registry.register(self)
                claim_declaration(self)
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
                check_label_values(self._name, self._labelnames, key)
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
        return [metric_family(self._name, self._documentation, self._type, self._unit)]

    def collect(self):
        """This process's own values (prometheus_client's metric collect() in multiprocess mode reads this
        process's values alike); the cross-process aggregate is what rankstatd serves."""
        metric = metric_family(self._name, self._documentation, self._type, self._unit)
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


class _OneValue(_Metric):
    """A counter or a gauge: one value per series, read as prometheus_client's `child._value` or get()."""

    @property
    def _value(self):
        return value_of(self)

    def get(self) -> float:
        """This process's value of the series (the cross-process aggregate is what rankstatd serves)."""
        return self._segment.value(self)


class _Observed(_Metric):
    """A summary or a histogram: observe() (C) and time(); no inc/dec/set; each series has its `_sum` cell."""

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


class Counter(_OneValue):
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
            counter_reset(self._segment, address, self._series_id)
        self._created = _time.time()

    def count_exceptions(self, exception=Exception) -> ExceptionCounter:
        """A context manager or decorator that adds 1 when an exception of `exception` (a type or a tuple
        of types) leaves the block or function; the exception goes on."""
        self._raise_if_not_observable()
        return ExceptionCounter(self, exception)

    def _child_samples(self):
        return [("_total", {}, self._segment.value(self))] + created_sample(self)


class Gauge(_OneValue):
    """prometheus_client's Gauge in multiprocess mode: inc/dec/set (C), the ten multiprocess modes."""

    _type = "gauge"
    _kind = KIND_GAUGE
    _MULTIPROC_MODES = frozenset(MODES)
    _MOST_RECENT_MODES = MOST_RECENT_MODES
    observe = _Absent()

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = DEFAULT_REGISTRY,
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

    def _child_samples(self):
        # As prometheus_client's own collect(): a set_function callback gives the value (its multiprocess
        # collector, like rankstatd, serves the last value set instead).
        f = getattr(self, "_function", None)
        return [("", {}, float(f()) if f is not None else self._segment.value(self))]


def _most_recent_refusal(method: str, amount: float = 1) -> None:
    raise RuntimeError(f"{method} must not be used with the mostrecent mode")


class Summary(_Observed):
    """prometheus_client's Summary: observe(amount) (C), time(); count and sum, no quantiles."""

    _type = "summary"
    _kind = KIND_SUMMARY
    _reserved_labelnames = ("quantile",)
    @property
    def _count(self) -> _SummaryCount:
        if self._is_parent():
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '_count'")
        return _SummaryCount(self)

    def _child_samples(self):
        seg = self._segment
        return [("_count", {}, seg.bucket(self, 0)), ("_sum", {}, seg.value(self))] + created_sample(self)


class Histogram(_Observed):
    """prometheus_client's Histogram: observe(amount, exemplar=None) (C), time(), and the child internals
    SGLang touches (`_upper_bounds`, `_buckets[i].inc`, `_sum.inc`)."""

    _type = "histogram"
    _kind = KIND_HISTOGRAM
    _reserved_labelnames = ("le",)
    DEFAULT_BUCKETS = DEFAULT_BUCKETS
    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (), namespace: str = "",
                 subsystem: str = "", unit: str = "", registry: Any = DEFAULT_REGISTRY,
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

    def _metric_init(self) -> None:
        super()._metric_init()
        # Instance attributes, built once per series as prometheus_client builds its values (a labelled
        # parent has none: AttributeError, as there). SGLang's inter-token-latency code on older versions
        # runs `child._buckets[i].inc(n)` and `child._sum.inc(v)` per streamed chunk: an attribute read,
        # an index and one C call each (docs/performance.md).
        self._buckets = [_Bucket(self, i) for i in range(len(self._upper_bounds))]

    def _child_samples(self):
        seg = self._segment
        out, acc = [], 0.0
        for i, bound in enumerate(self._upper_bounds):
            acc += seg.bucket(self, i)
            out.append(("_bucket", {"le": go_float(bound)}, acc))
        out.append(("_count", {}, acc))
        if self._upper_bounds[0] >= 0:
            out.append(("_sum", {}, seg.value(self)))
        return out + created_sample(self)


__all__ = ["Counter", "Gauge", "Histogram", "Summary", "CollectorRegistry", "REGISTRY", "Timer",
           "InprogressTracker", "ExceptionCounter", "DEFAULT_BUCKETS", "MODES"]
