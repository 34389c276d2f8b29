"""The value internals of a metric child as prometheus_client exposes them, over a series in a segment:
`child._value` (a ValueClass: get/inc/set, the number in `._value`), a histogram's `child._buckets[i]`
and `child._sum`, a summary's `_sum` and `_count`, Counter.reset(), and the samples collect() adds
(`_created`, bucket bounds as Go writes floats).

SGLang's call sites touch these (`_buckets[i].inc`, `_sum.inc`, `bucket._value.get()`,
`sum(b._value for b in child._buckets)`): the bucket and sum cells' inc() is one C call
(rankstat._accel.Cell); every read goes through the child's segment (rankstat.backend.Segment).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, List

from . import backend
from ._accel import Cell

INF = float("inf")


class _Number(float):
    """A value read from the segment. prometheus_client's ValueClass keeps its number in `_value` and
    SGLang does arithmetic on it (`sum(b._value for b in child._buckets)`); `.get()` serves the code that
    reads it like a ValueClass instead."""

    __slots__ = ()

    def get(self) -> float:
        return float(self)


class _ReadAsNumber:
    """`._value`: the number get() reads now, as a _Number."""

    __slots__ = ()

    def get(self) -> float:
        raise NotImplementedError

    @property
    def _value(self) -> _Number:
        return _Number(self.get())


class _Reading(_ReadAsNumber):
    """A counter's or gauge's series as prometheus_client's ValueClass (`child._value`): `.get()`,
    `.inc()`, `.set()`, and the number itself in `._value`."""

    __slots__ = ("_child",)

    def __init__(self, child):
        self._child = child

    def get(self) -> float:
        return self._child._segment.value(self._child)

    def inc(self, amount: float = 1) -> None:
        self._child.inc(amount)

    def set(self, value: float) -> None:
        self._child.set(value)


class _Bucket(Cell, _ReadAsNumber):
    """One histogram bucket (non-cumulative count), as prometheus_client's `child._buckets[i]`: inc() is the
    C cell's (one call into librankstat, rankstat._accel.Cell), reads go through the segment."""

    __slots__ = ()

    def get(self) -> float:
        return self._child._segment.bucket(self._child, self._index)


class _Sum(Cell, _ReadAsNumber):
    """A histogram's or summary's sum, as prometheus_client's `child._sum` (built with index -1): inc() in C."""

    __slots__ = ()

    def get(self) -> float:
        return self._child._segment.value(self._child)


class _SummaryCount(_ReadAsNumber):
    """A summary's `child._count`: its observation count, read from the segment."""

    __slots__ = ("_child",)

    def __init__(self, child):
        self._child = child

    def get(self) -> float:
        return self._child._segment.bucket(self._child, 0)


def value_of(metric) -> _Reading:
    """`metric._value` of a counter or gauge series; AttributeError on a labelled parent, as there."""
    if metric._is_parent():
        raise AttributeError(f"'{type(metric).__name__}' object has no attribute '_value'")
    return _Reading(metric)


_reset_function: List[Any] = []


def counter_reset(seg: backend.Segment, address: int, series_id: int) -> None:
    """rankstat_counter_reset through a PyDLL handle (the GIL stays held, as for every update: the reporter
    is single-writer). Cold: only Counter.reset() calls it."""
    if not _reset_function:
        lib = seg.reporter.library
        fn = getattr(ctypes.PyDLL(lib._name, handle=lib._handle), "rankstat_counter_reset", None)
        if fn is None:
            raise RuntimeError("the rankstat library lacks rankstat_counter_reset: it is older than this package")
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32]
        _reset_function.append(fn)
    _reset_function[0](address, series_id)


def created_sample(metric) -> list:
    """prometheus_client's collect() adds <name>_created unless PROMETHEUS_DISABLE_CREATED_SERIES is set."""
    if os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() in ("true", "1", "t"):
        return []
    return [("_created", {}, getattr(metric, "_created", 0.0))]


def go_float(b: float) -> str:
    """A bucket bound as the `le` label writes it (prometheus_client's floatToGoString when installed)."""
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
