"""rankstat._slowpath: the pure-Python twin of the CPython extension rankstat._fastpath.

Same names, same behaviour, same messages (tests/python/test_accel.py runs one set of checks against
both); used where the extension is not built or RANKSTAT_NO_FASTPATH is set. Each update is one ctypes
call (~0.7 us). The ctypes function objects are built with PYFUNCTYPE, which keeps the GIL held across the
call like the extension does: a reporter is single-writer, and the GIL serialises the threads of a rank.

- bind(lib): takes the update functions' addresses from the loaded ctypes CDLL of librankstat.so.
- Value(reporter_address, series_id, kind): one series; kind 1 counter, 2 gauge, 3 histogram,
  4 summary; reporter_address 0 (or None): every update is a no-op. After a fork, `_detach()` forgets
  the parent's reporter and the next update calls `self._rebind()` first (a subclass registers the series
  in the child's segment and calls `_bind(address, id)`; the default makes the Value a no-op).
- Family: `_labelnames` (tuple of str) and `_children` (dict: tuple of str -> child);
  `labels(*values, **kw)` with prometheus_client's checks and messages; `self._new_child(key)` on a miss.
- Cell(child, index): one bucket (index >= 0) or the sum (index -1) of a histogram or summary series,
  with inc(amount=1) (`child._buckets[i].inc(n)`, `child._sum.inc(v)`); reads are the subclass's.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, Dict, Tuple

from . import _names

# The series kinds are the C ABI's (rankstat._native, from rankstat.h), imported once: the per-call code
# compares plain module-level ints.
from ._native import KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM, KIND_NAMES as _KIND_NAMES, KIND_SUMMARY

_NAMES = ("rankstat_counter_add", "rankstat_gauge_set", "rankstat_gauge_add", "rankstat_histogram_observe",
          "rankstat_histogram_bucket_add", "rankstat_histogram_add_sum")
# Later than the others: a library without them still binds (gauge inc/dec, Cell.inc raise RuntimeError).
_OPTIONAL = ("rankstat_gauge_add", "rankstat_histogram_bucket_add", "rankstat_histogram_add_sum")
# int f(rankstat_reporter*, uint32_t id, double); PYFUNCTYPE: the GIL stays held during the call.
_PROTO = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_double)
# int rankstat_histogram_bucket_add(rankstat_reporter*, uint32_t id, uint32_t bucket, uint64_t count)
_BUCKET_ADD_PROTO = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                                      ctypes.c_uint64)

_functions: Dict[str, Any] = {}


def bind(lib) -> None:
    """Takes the addresses of the update functions from `lib` (a ctypes CDLL of librankstat.so).
    rankstat_gauge_add and the histogram-internals functions may be missing (an older library): gauge
    inc/dec and Cell.inc then raise RuntimeError."""
    found = {}
    for name in _NAMES:
        try:
            fn = getattr(lib, name)
        except AttributeError:
            if name in _OPTIONAL:
                continue
            raise AttributeError(f"the rankstat library lacks {name}: it is older than this package") from None
        proto = _BUCKET_ADD_PROTO if name == "rankstat_histogram_bucket_add" else _PROTO
        found[name] = proto(ctypes.cast(fn, ctypes.c_void_p).value or 0)
    _functions.clear()
    _functions.update(found)


def bound():
    """The names of the librankstat functions bound so far."""
    return [name for name in _NAMES if name in _functions]


def _unbound(name: str):
    raise RuntimeError(f"rankstat._slowpath: {name} is not bound (call bind(lib) with a librankstat that has it)")


def _number(value) -> float:
    """float(value) as the extension converts: numbers and objects with __float__ / __index__ (numpy
    scalars), never text (float("1") would parse it)."""
    if value.__class__ is float:
        return value
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"must be real number, not {type(value).__name__}")
    return float(value)


def _text_or_number(value) -> float:
    """Gauge.set's float(value): prometheus_client's Gauge.set accepts text ("1.5") too."""
    if isinstance(value, str):
        return float(value)
    return _number(value)


def validate_exemplar(exemplar) -> None:
    """prometheus_client's exemplar rule, checked after the update it comes with (its multiprocess mode then
    drops the exemplar, and so does rankstat): every label name valid and not `__`-prefixed, and at most
    128 characters in the names and values together. The extension calls this function too."""
    runes = 0
    for name, value in exemplar.items():
        _names.check_label_name(name)  # the metric classes' label-name rule (rankstat._names)
        runes += len(name) + len(value)
    if runes > 128:
        raise ValueError(f"Exemplar labels have {runes} UTF-8 characters, exceeding the limit of 128")


def _check_exemplar(exemplar) -> None:
    if exemplar is not None and exemplar:
        validate_exemplar(exemplar)


def _address(value) -> int:
    if value is None:
        return 0
    if not isinstance(value, int):
        value = value.__index__()  # TypeError for anything that is not an integer, like PyLong_AsVoidPtr
    return value


class Value:
    """One series of a rankstat segment: Value(reporter_address, series_id, kind)."""

    __slots__ = ("_h", "_id", "_k", "_d")

    def __init__(self, reporter_address, series_id, kind):
        address = _address(reporter_address)
        series_id = series_id.__index__()
        kind = kind.__index__()
        if not 0 <= series_id <= 0xFFFFFFFF:
            raise ValueError("series_id must fit in 32 bits")
        if kind not in _KIND_NAMES:
            raise ValueError(f"kind must be 1 (counter), 2 (gauge), 3 (histogram) or 4 (summary), not {kind}")
        self._h = address or None
        self._id = series_id
        self._k = kind
        self._d = False

    def _live(self) -> bool:
        # Called only without a reporter, as in the extension: whether the update goes anywhere. A
        # detached Value (its process forked since it was bound) asks its owner to bind it here first; a
        # labelled family that is not a child refuses the update as prometheus_client does.
        if self._d:
            self._rebind()
        elif isinstance(self, Family) and self._names and not self._lv:
            raise ValueError(f"{_KIND_NAMES[self._k]} metric is missing label values")
        return self._h is not None

    def _call(self, name, value):
        fn = _functions.get(name)
        if fn is None:
            _unbound(name)
        fn(self._h, self._id, value)

    def _wrong_kind(self, method):
        raise AttributeError(f"{method}() is not available on a {_KIND_NAMES.get(getattr(self, '_k', 0), 'uninitialised')} "
                             f"series")

    def inc(self, amount=1, exemplar=None):
        """inc(amount=1): a counter's total or a gauge's value plus amount (counters: amount >= 0)."""
        k = self._k
        if k == KIND_COUNTER:
            live = self._h is not None or self._live()
            amount = _number(amount)
            # NaN passes, as in prometheus_client (NaN < 0 is false): the total becomes NaN.
            if amount < 0:
                raise ValueError("Counters can only be incremented by non-negative amounts.")
            if live:
                self._call("rankstat_counter_add", amount)
            if exemplar is not None:  # checked inline: the common call passes none and pays no call
                _check_exemplar(exemplar)
            return None
        if k == KIND_GAUGE:
            live = self._h is not None or self._live()
            if exemplar is not None:
                raise TypeError("inc() got an unexpected keyword argument 'exemplar'")
            amount = _number(amount)
            if live:
                self._call("rankstat_gauge_add", amount)
            return None
        self._wrong_kind("inc")

    def dec(self, amount=1):
        """dec(amount=1): a gauge's value minus amount."""
        if self._k != KIND_GAUGE:
            self._wrong_kind("dec")
        live = self._h is not None or self._live()
        amount = _number(amount)
        if live:
            self._call("rankstat_gauge_add", -amount)

    def set(self, value):
        """set(value): a gauge's value."""
        if self._k != KIND_GAUGE:
            self._wrong_kind("set")
        live = self._h is not None or self._live()
        value = _text_or_number(value)
        if live:
            self._call("rankstat_gauge_set", value)

    def observe(self, amount, exemplar=None):
        """observe(amount): one sample of a histogram or summary."""
        if self._k != KIND_HISTOGRAM and self._k != KIND_SUMMARY:
            self._wrong_kind("observe")
        live = self._h is not None or self._live()
        if exemplar is not None and self._k == KIND_SUMMARY:  # Summary.observe(amount) takes no exemplar
            raise TypeError("observe() got an unexpected keyword argument 'exemplar'")
        amount = _number(amount)
        if live:
            self._call("rankstat_histogram_observe", amount)
        if exemplar is not None and amount == amount:  # an observation that found its bucket (never NaN's)
            _check_exemplar(exemplar)

    @property
    def _reporter_address(self) -> int:
        return self._h or 0

    @_reporter_address.setter
    def _reporter_address(self, value) -> None:
        self._h = _address(value) or None
        self._d = False

    @property
    def _detached(self) -> bool:
        return self._d

    def _detach(self) -> None:
        self._h = None
        self._d = True

    def _bind(self, reporter_address, series_id, kind=None) -> None:
        address = _address(reporter_address)
        series_id = operator.index(series_id)
        if not 0 <= series_id <= 0xFFFFFFFF:
            raise ValueError("series_id must fit in 32 bits")
        if kind is not None:
            kind = operator.index(kind)
            if kind not in _KIND_NAMES:
                raise ValueError(f"kind must be 1 (counter), 2 (gauge), 3 (histogram) or 4 (summary), not {kind}")
            self._k = kind
        self._h = address or None
        self._id = series_id
        self._d = False

    def _rebind(self) -> None:
        self._d = False

    @property
    def _series_id(self) -> int:
        return self._id

    @property
    def _kind(self) -> int:
        return self._k

    def __repr__(self) -> str:
        return (f"<{type(self).__module__}.{type(self).__qualname__} {_KIND_NAMES.get(self._k, 'uninitialised')} "
                f"series {self._id}{' (detached)' if self._d else ' (no-op)' if self._h is None else ''}>")


class Family(Value):
    """A metric family's label names and children, with prometheus_client's labels(); a Value too (the
    series of an unlabelled family or of a labelled child), as prometheus_client's metric objects are."""

    __slots__ = ("_names", "_kids", "_lv", "__dict__", "__weakref__")

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        self._h = None
        self._id = 0
        self._k = 0
        self._d = False
        self._names = ()
        self._kids = {}
        self._lv = ()
        return self

    def __init__(self, *args, **kwargs):
        pass

    @property
    def _labelnames(self) -> Tuple[str, ...]:
        return self._names

    @_labelnames.setter
    def _labelnames(self, value) -> None:
        names = tuple(value)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"label names must be str, not {type(name).__name__}")
        self._names = names

    @property
    def _children(self) -> dict:
        return self._kids

    @_children.setter
    def _children(self, value) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"_children must be a dict, not {type(value).__name__}")
        self._kids = value

    @property
    def _labelvalues(self) -> Tuple[str, ...]:
        return self._lv

    @_labelvalues.setter
    def _labelvalues(self, value) -> None:
        self._lv = tuple(value)

    def labels(self, *labelvalues, **labelkwargs):
        names = self._names
        if not names:
            raise ValueError("No label names were set when constructing %s" % self)
        if self._lv:
            raise ValueError("%s already has labels set (%r); can not chain calls to .labels()"
                             % (self, dict(zip(names, self._lv))))
        if labelvalues and labelkwargs:
            raise ValueError("Can't pass both *args and **kwargs")
        if labelkwargs:
            if len(labelkwargs) != len(names):
                raise ValueError("Incorrect label names")
            try:
                key = tuple([str(labelkwargs[name]) for name in names])
            except KeyError:
                raise ValueError("Incorrect label names") from None
        else:
            if len(labelvalues) != len(names):
                raise ValueError("Incorrect label count")
            key = tuple([str(v) for v in labelvalues])
        child = self._kids.get(key)
        if child is not None:
            return child
        return self._new_child(key)

    def _new_child(self, key):
        raise NotImplementedError(f"{type(self).__name__} must define _new_child(label_values)")


_TWO_TO_64 = 18446744073709551616.0


class Cell:
    """One bucket (index >= 0) or the sum (index -1) of a histogram or summary series, as prometheus_client's
    `child._buckets[i]` and `child._sum`. It holds its child and reads the child's reporter and id at every
    call, so it follows the child through a fork's re-binding."""

    __slots__ = ("_c", "_i")

    def __init__(self, child, index):
        if not isinstance(child, Value):
            raise TypeError(f"Cell() needs a Value, not {type(child).__name__}")
        index = operator.index(index)
        if not -1 <= index <= 0xFFFFFFFF:
            raise ValueError("index must be -1 (the sum) or a bucket index")
        self._c = child
        self._i = index

    @property
    def _child(self):
        return self._c

    @property
    def _index(self) -> int:
        return self._i

    def inc(self, amount=1):
        """A bucket's count plus amount (a number; truncated to a whole count, ignored unless > 0,
        OverflowError when infinite or >= 2**64), or the sum plus amount. A detached child re-binds first;
        a child without a reporter makes it a no-op."""
        amount = _number(amount)
        index = self._i
        if index >= 0:
            if not amount > 0:
                return None
            if amount >= _TWO_TO_64:
                raise OverflowError("cannot convert float infinity to integer" if amount == float("inf")
                                    else "bucket count out of range")
        child = self._c
        if child._h is None:
            if child._d:
                child._rebind()
            if child._h is None:
                return None
        if index < 0:
            fn = _functions.get("rankstat_histogram_add_sum")
            if fn is None:
                _unbound("rankstat_histogram_add_sum")
            fn(child._h, child._id, amount)
        else:
            fn = _functions.get("rankstat_histogram_bucket_add")
            if fn is None:
                _unbound("rankstat_histogram_bucket_add")
            fn(child._h, child._id, index, int(amount))
        return None
