"""The plain API: one Reporter per producing rank (one shared-memory segment), with

- metric families: Reporter.counter() / gauge() / histogram() / summary() give rankstat's
  prometheus_client-compatible classes (rankstat.Counter and the others, the same classes an engine's
  collectors create) bound to this Reporter's segment, with their HELP text and label names;
- series by id: register() and add() / set() / observe() / observe_many(), batched with batch()
  (rankstat.snapshot.UpdateBatch);
- scheduler snapshots: snapshot_packer() (rankstat.snapshot.SnapshotPacker) packs SGLang's scheduler
  fields into a reused buffer, one C call per report.

Cost model (CPython 3.11): an id-based call is one ctypes call and a lock (about 0.5-0.7 us); a family
child's update is one C call through rankstat._accel, as for every metric class (about 0.1-0.2 us with the
extension).

Every write into the segment holds the GIL (the functions come from a ctypes.PyDLL handle, the metric
classes' updates are C calls made with the GIL held): the segment is single-writer, and the GIL is what
serialises a rank's threads, whichever of the APIs above they use.

A Reporter never raises on the hot path: if the segment could not be created (no space, no library),
it stays closed and every update is a no-op, so an engine keeps running without metrics.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref
from typing import Any, Dict, Literal, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from . import _native as n
from . import backend, metrics
from ._native import GaugeMode, ReportKind
from .snapshot import NO_ID as _NO_ID
from .snapshot import SnapshotPacker, UpdateBatch

log = logging.getLogger("rankstat")

__all__ = ["ReportKind", "Reporter", "SeriesKind", "SnapshotPacker", "UpdateBatch", "null_reporter"]

# Reporters alive in this process; a forked child must not write into its parent's segments.
_live_reporters: "weakref.WeakSet[Reporter]" = weakref.WeakSet()


def _forget_in_child() -> None:
    # A Reporter names one rank's segment: the child cannot take over the parent's identity (its segment
    # would replace the parent's name), so its copies become closed no-ops, its families' children too.
    # The metric classes the process creates itself do re-bind in the child, to a segment of its own
    # (rankstat.backend).
    for r in list(_live_reporters):
        r._detach_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _label_arrays(labels: Sequence[Tuple[str, str]]):
    count = len(labels)
    names = (ctypes.c_char_p * max(count, 1))(*[k.encode() for k, _ in labels])
    values = (ctypes.c_char_p * max(count, 1))(*[str(v).encode() for _, v in labels])
    return count, names, values


SeriesKind = Literal["counter", "gauge", "histogram", "summary"]
# The id-based API's kinds; a summary here is a histogram without finite bounds (its count and sum).
_SERIES_KINDS = {"counter": n.KIND_COUNTER, "gauge": n.KIND_GAUGE, "histogram": n.KIND_HISTOGRAM,
                 "summary": n.KIND_HISTOGRAM}

_M = TypeVar("_M", bound="metrics._Metric")


class Reporter:
    """One rank's segment: rankstat.<instance>.<role>.<rank-key> in `shm_dir`, else $RANKSTAT_SHM_DIR, else
    /dev/shm (`shm_dir` applies to this segment only; the environment is never changed).

    Single writer: every write holds the GIL (and the id-based calls an internal lock too), so threads of
    one rank may share it. `strict=True` raises RankstatError when the segment cannot be created; otherwise
    the failure is logged once and the reporter stays closed (every call a no-op, its families' too).

    The capacities (series, ring bytes, histogram bounds, values, text bytes; 0 takes the library's
    default) size the segment; pages are reserved as series are registered.
    """

    def __init__(self, *, role: str = "scheduler", instance: Optional[str] = None, rank_key: Optional[str] = None,
                 model_name: str = "", engine_type: str = "unified", tp_rank: int = 0, pp_rank: int = 0,
                 dp_rank: Optional[int] = None, moe_ep_rank: int = 0, attn_tp_rank: Optional[int] = None,
                 attn_dp_rank: Optional[int] = None, attn_cp_rank: int = 0, tp_size: int = 1, pp_size: int = 1,
                 dp_size: int = 1, priority_scheduling: bool = False, all_schedulers: bool = False,
                 dp_attention: bool = False, extra_labels: Optional[Mapping[str, Any]] = None,
                 shm_dir: Optional[str] = None, ring_bytes: int = 0, series_capacity: int = 2048,
                 bounds_capacity: int = 16384, values_capacity: int = 65536, text_capacity: int = 0,
                 strict: bool = False, quiet: bool = False):
        self._handle: Optional[int] = None
        self._lock = threading.Lock()
        self.error = ""
        self.error_code = n.OK  # rankstat_open's code when the segment could not be opened
        self.note = ""  # set when the segment went under another name than its identity's (logged once)
        self.role = role
        self.identity_labels: Dict[str, str] = {}
        self._series: Dict[Tuple, int] = {}
        self._families: Dict[str, metrics._Metric] = {}
        self._segment: Optional[backend.ReporterSegment] = None  # under the families, made on first use
        self._refused = 0  # series register() could not place (their updates are dropped)
        self._lib: Any = None  # the loaded library (ctypes.CDLL), None when it could not be loaded
        try:
            self._lib, self._layout = n.load_library()
        except n.RankstatError as e:
            self._lib = None
            self.error = str(e)
            if strict:
                raise
            log.warning("rankstat: metrics disabled: %s", e)
            return
        if role not in n.ROLES:
            raise ValueError(f"role must be one of {sorted(n.ROLES)}, not {role!r}")
        identity = n.Identity()
        self._lib.rankstat_identity_init(ctypes.byref(identity))
        keep = []  # the C side copies every string during rankstat_open; keep ours alive until then

        def text(value: Optional[str]):
            if value is None:
                return None
            b = str(value).encode()
            keep.append(b)
            return b

        identity.role = n.ROLES[role]
        identity.instance = text(instance or None)  # empty: the C library takes $RANKSTAT_INSTANCE, else "default"
        identity.rank_key = text(rank_key)
        identity.model_name = text(model_name)
        identity.engine_type = text(engine_type)
        identity.tp_rank = tp_rank
        identity.pp_rank = pp_rank
        identity.dp_rank = n.RANK_UNSET if dp_rank is None else dp_rank
        identity.moe_ep_rank = moe_ep_rank
        identity.attn_tp_rank = n.RANK_UNSET if attn_tp_rank is None else attn_tp_rank
        identity.attn_dp_rank = n.RANK_UNSET if attn_dp_rank is None else attn_dp_rank
        identity.attn_cp_rank = attn_cp_rank
        identity.tp_size, identity.pp_size, identity.dp_size = tp_size, pp_size, dp_size
        identity.flags = ((n.FLAG_PRIORITY_SCHEDULING if priority_scheduling else 0)
                          | (n.FLAG_ALL_SCHEDULERS_METRICS if all_schedulers else 0)
                          | (n.FLAG_DP_ATTENTION if dp_attention else 0))
        extra = [(str(k), str(v)) for k, v in (extra_labels or {}).items()]
        count, names, values = _label_arrays(extra)
        identity.extra_label_count = count
        identity.extra_label_names = ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p))
        identity.extra_label_values = ctypes.cast(values, ctypes.POINTER(ctypes.c_char_p))
        geometry = n.Geometry(ctypes.sizeof(n.Geometry), series_capacity, ring_bytes, bounds_capacity,
                              values_capacity, text_capacity)
        out = ctypes.c_void_p()
        # The directory travels with this one call: the process's environment (other reporters, the
        # metric classes' segment, child processes) is left as it is.
        permissions = n.Permissions(ctypes.sizeof(n.Permissions), 0, None, text(shm_dir or None))
        rc = self._lib.rankstat_open_ex(ctypes.byref(identity), ctypes.byref(geometry), ctypes.byref(permissions),
                                        ctypes.byref(out))
        if rc != n.OK:
            self.error = f"rankstat_open: {n.ERROR_NAMES.get(rc, rc)}: {n.last_error(self._lib)}"
            self.error_code = rc
            if strict:
                raise n.RankstatError(self.error, rc)
            if not quiet:  # quiet: the caller logs (the metric backend's retries log once)
                log.warning("rankstat: metrics disabled for this rank: %s", self.error)
            return
        self._handle = out.value
        self._pid = os.getpid()
        note = getattr(self._lib, "rankstat_segment_note", None)
        self.note = (note(out) or b"").decode("utf-8", "replace") if note is not None else ""
        if self.note:
            log.warning("rankstat: %s", self.note)
        # The labels the daemon adds to every series of this segment, as the C library derives them from
        # the header (one rule, shmproto/identity_labels.hpp); series labels of the same name override them.
        labels: Dict[str, str] = {}
        name_p, value_p = ctypes.c_char_p(), ctypes.c_char_p()
        index = 0
        while self._lib.rankstat_identity_label(out, index, ctypes.byref(name_p), ctypes.byref(value_p)) == n.OK:
            labels[(name_p.value or b"").decode()] = (value_p.value or b"").decode()
            index += 1
        self.identity_labels = labels
        # Bound C entry points for the hot paths, from a PyDLL handle: the GIL stays held during the call,
        # as in the metric classes' updates, so the two never write into the segment at the same time. The
        # two that take only pointers and uint32s are called without argtypes, with pre-built c_void_p
        # objects, which skips the per-call conversions.
        held = ctypes.PyDLL(self._lib._name, handle=self._lib._handle)

        def gil_held(name: str):
            fn = getattr(held, name)
            fn.restype, fn.argtypes = getattr(self._lib, name).restype, getattr(self._lib, name).argtypes
            return fn

        self._c_add = gil_held("rankstat_counter_add")
        self._c_set = gil_held("rankstat_gauge_set")
        self._c_observe = gil_held("rankstat_histogram_observe")
        self._c_observe_many = gil_held("rankstat_histogram_observe_many")
        self._c_register = gil_held("rankstat_register_series")
        self._c_apply = n.raw_function(held, "rankstat_apply_updates")
        self._c_report = n.raw_function(held, "rankstat_report_scheduler")
        self._h = ctypes.c_void_p(self._handle)
        _live_reporters.add(self)

    # --- lifecycle -----------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """Whether the segment is open (False: it could not be created, or the Reporter was closed)."""
        return self._handle is not None

    @property
    def address(self) -> int:
        """The library's rankstat_reporter* as an integer (what the C fast path writes through); 0 when closed."""
        return self._handle or 0

    @property
    def layout(self) -> Optional[n.Layout]:
        """The contract the library writes (snapshot fields, routing-key bins); None without a library."""
        return getattr(self, "_layout", None)

    @property
    def library(self) -> Any:
        """The loaded librankstat.so (a ctypes.CDLL); None when it could not be loaded."""
        return self._lib

    @property
    def registration_failures(self) -> int:
        """Series this Reporter could not register (no room in the segment): their updates are dropped."""
        return self._refused + (self._segment.registration_failures if self._segment is not None else 0)

    def close(self) -> None:
        """Marks the segment closed (a clean exit) and releases it. Idempotent. In a forked child it only
        lets go of the inherited mapping: the segment is the parent's (see _abandon)."""
        if getattr(self, "_pid", None) != os.getpid():
            self._abandon()
            return
        self._unbind_families()  # before the reporter is freed: no child may write through it after
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                self._lib.rankstat_close(handle)

    def _unbind_families(self) -> None:
        # Every child of the families becomes a no-op (address 0), and no new series is registered.
        segment = getattr(self, "_segment", None)
        if segment is None:
            return
        segment.detach()
        for family in list(self._families.values()):
            for series in family._series():
                series._bind(0, series._series_id)

    def _abandon(self) -> None:
        # The parent's segment stays exactly as it is: no `closed` mark (the daemon would retire a parent
        # that is alive and writing), no heartbeat, no unlink. rankstat_abandon unmaps and frees the
        # child's copy; a library older than it has no way to do that without writing the header, so the
        # copy is left mapped (leaked, a few pages of address space) rather than closed.
        handle, self._handle = self._handle, None
        if handle is None or self._lib is None:
            return
        abandon = getattr(self._lib, "rankstat_abandon", None)
        if abandon is not None:
            abandon(handle)

    def _detach_after_fork(self) -> None:
        # In the child, right after fork(): only this thread exists, so a lock another thread held at the
        # fork would never be released; the reporter gets a new one, then lets go of the parent's segment,
        # its families' children first (they would otherwise write through the freed reporter).
        self._lock = threading.Lock()
        self._unbind_families()
        self._abandon()

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def heartbeat(self) -> None:
        """Marks the rank alive now (what the daemon's liveness check reads; an appended record does too)."""
        if self._handle is not None:
            self._lib.rankstat_heartbeat(self._handle)

    @property
    def dropped_records(self) -> int:
        """Records dropped so far because the ring was full (the daemon was slow or absent)."""
        return self._lib.rankstat_dropped_records(self._handle) if self._handle is not None else 0

    # --- registration (cold path) --------------------------------------------------------------------

    def register(self, kind: SeriesKind, family: str, labels: Sequence[Tuple[str, Any]] = (), *,
                 mode: GaugeMode = "mostrecent", buckets: Sequence[float] = (), identity_labels: bool = True) -> int:
        """Registers one series (or returns the id of the same one registered before), for the id-based
        calls: add / set / observe / observe_many and batch(). `kind` is 'counter', 'gauge', 'histogram' or
        'summary' (a histogram without finite bounds); `family` is the name as exposed (a counter's with
        its _total suffix); `mode` is a gauge's multiprocess mode. Returns an id; on a closed reporter or a
        failed registration, an id that every update ignores (the failure is logged, the first ten and
        every thousandth). No HELP text: the families (counter() and the others) carry one.

        identity_labels=True: the daemon adds this Reporter's identity labels (model_name, the ranks, ...)
        to the series, and a series label equal to one of them is left to it. False: the series is
        exported with its own labels only (RANKSTAT_SERIES_OWN_LABELS_ONLY), as SGLang's HTTP families,
        kv_transfer_timeouts_total and eplb_gpu_physical_count are."""
        pairs = tuple((str(k), str(v)) for k, v in labels)
        bounds = tuple(float(b) for b in buckets) if kind == "histogram" else ()
        key = (kind, family, pairs, mode if kind == "gauge" else "", bounds, identity_labels)
        found = self._series.get(key)
        if found is not None:
            return found
        if self._handle is None:
            return _NO_ID
        if kind == "gauge" and mode not in n.GAUGE_MODES:
            raise ValueError(f"gauge mode must be one of {sorted(n.GAUGE_MODES)}, not {mode!r}")
        # Series labels that equal the segment's identity labels are left to the daemon.
        own = [(k, v) for k, v in pairs if not (identity_labels and self.identity_labels.get(k) == v)]
        series_kind = _SERIES_KINDS.get(kind)
        if series_kind is None:
            raise ValueError(f"unknown series kind {kind!r}")
        # Texts go by length: a NUL inside a label value is kept, as prometheus_client keeps it.
        flags = 0 if identity_labels else n.SERIES_OWN_LABELS_ONLY
        spec, _keep = n.series_spec(series_kind, n.GAUGE_MODES[mode] if kind == "gauge" else 0, flags, family.encode(),
                                    b"", [k.encode() for k, _ in own],
                                    [v.encode("utf-8", "surrogatepass") for _, v in own], list(bounds))
        out = ctypes.c_uint32(_NO_ID)
        with self._lock:
            if self._handle is None:
                return _NO_ID
            rc = self._c_register(self._handle, ctypes.byref(spec), ctypes.byref(out))
        if rc != n.OK:
            self._refused += 1
            if self._refused <= 10 or self._refused % 1000 == 0:
                log.warning("rankstat: cannot register %s %s%s (%d failures so far): %s", kind, family, dict(pairs),
                            self._refused, n.last_error(self._lib))
            self._series[key] = _NO_ID
            return _NO_ID
        self._series[key] = out.value
        return out.value

    # --- metric families: rankstat's prometheus_client-compatible classes, bound to this segment -----

    def counter(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
                identity_labels: bool = True) -> metrics.Counter:
        """A Counter (rankstat.Counter: prometheus_client's interface) whose series live in this Reporter's
        segment, with `documentation` as its HELP text. `name` as prometheus_client takes it (a trailing
        _total is the sample suffix). identity_labels: see register(). The same name again gives the same
        family; another type or other label names under it raise ValueError."""
        return self._family(metrics.Counter, name, documentation, labelnames, identity_labels)

    def gauge(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
              multiprocess_mode: GaugeMode = "mostrecent", identity_labels: bool = True) -> metrics.Gauge:
        """A Gauge in this Reporter's segment (see counter()). `multiprocess_mode` says how the daemon
        merges the processes' values (prometheus_client's modes); the default here is the last value set
        ('mostrecent', which refuses inc/dec as prometheus_client does)."""
        return self._family(metrics.Gauge, name, documentation, labelnames, identity_labels,
                            multiprocess_mode=multiprocess_mode)

    def histogram(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
                  buckets: Sequence[float] = metrics.DEFAULT_BUCKETS,
                  identity_labels: bool = True) -> metrics.Histogram:
        """A Histogram in this Reporter's segment (see counter()); `buckets` are the upper bounds, +Inf
        added when missing."""
        return self._family(metrics.Histogram, name, documentation, labelnames, identity_labels,
                            buckets=tuple(float(b) for b in buckets))

    def summary(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
                identity_labels: bool = True) -> metrics.Summary:
        """A Summary in this Reporter's segment (see counter()): count and sum, as prometheus_client's
        multiprocess summaries."""
        return self._family(metrics.Summary, name, documentation, labelnames, identity_labels)

    def _family(self, cls: Type[_M], name: str, documentation: str, labelnames: Sequence[str], identity_labels: bool,
                **kw: Any) -> _M:
        # One registration path: the metric class registers each series (help text, label names, mode,
        # buckets) through this Reporter's segment, as it does through the process's. Registered in no
        # collector registry: two Reporters of one process may each have a family of one name.
        existing = self._families.get(name)
        if existing is not None:
            if type(existing) is not cls or existing._labelnames != tuple(labelnames):
                raise ValueError(f"{name} is already registered as a {type(existing).__name__} with labels "
                                 f"{existing._labelnames}")
            return existing
        if self._segment is None:
            self._segment = backend.ReporterSegment(self)
        family = cls(name, documentation, labelnames, registry=None, _segment=self._segment,
                     _identity_labels=identity_labels, **kw)
        self._families[name] = family
        return family

    # --- updates (hot path) --------------------------------------------------------------------------

    def add(self, series: int, delta: float = 1.0) -> None:
        """Adds `delta` (>= 0) to the counter `series` (an id from register())."""
        if series != _NO_ID and self._handle is not None:
            with self._lock:
                if self._handle is not None:
                    self._c_add(self._handle, series, delta)

    def set(self, series: int, value: float) -> None:
        """Sets the gauge `series` (an id from register()) to `value`."""
        if series != _NO_ID and self._handle is not None:
            with self._lock:
                if self._handle is not None:
                    self._c_set(self._handle, series, value)

    def observe(self, series: int, value: float) -> None:
        """One sample of `value` in the histogram or summary `series` (an id from register())."""
        if series != _NO_ID and self._handle is not None:
            with self._lock:
                if self._handle is not None:
                    self._c_observe(self._handle, series, value)

    def observe_many(self, series: int, value: float, count: int, sum_delta: float) -> None:
        """`count` samples in the bucket of `value`, `sum_delta` added to the sum (SGLang's bulk ITL
        observe: value = interval / n, count = n, sum_delta = interval)."""
        if series != _NO_ID and self._handle is not None and count > 0:
            with self._lock:
                if self._handle is not None:
                    self._c_observe_many(self._handle, series, value, count, sum_delta)

    def batch(self, capacity: int = 64) -> UpdateBatch:
        """A reusable batch of id-based updates applied with one C call (rankstat.snapshot.UpdateBatch)."""
        return UpdateBatch(self, capacity)

    def snapshot_packer(self) -> SnapshotPacker:
        """A packer of scheduler snapshots for this segment (rankstat.snapshot.SnapshotPacker)."""
        return SnapshotPacker(self)

    # --- the packers' C calls (rankstat.snapshot), package-internal ---------------------------------

    def apply_updates(self, updates: ctypes.c_void_p, count: int) -> int:
        """Applies `count` packed rankstat_update records at `updates` with one C call (what
        UpdateBatch.flush() calls with its buffer). The RANKSTAT_* code; ERR_CLOSED on a closed Reporter."""
        if self._handle is None:
            return n.ERR_CLOSED
        with self._lock:
            if self._handle is None:
                return n.ERR_CLOSED
            return self._c_apply(self._h, updates, count, None)

    def report_scheduler(self, snapshot: ctypes.c_void_p, snapshot_bytes: int, entries: ctypes.c_void_p,
                         count: int) -> int:
        """Appends one scheduler record: the packed snapshot of `snapshot_bytes` at `snapshot` and `count`
        per-priority entries at `entries` (what SnapshotPacker.send() calls with its buffers). The
        RANKSTAT_* code; ERR_CLOSED on a closed Reporter."""
        if self._handle is None:
            return n.ERR_CLOSED
        with self._lock:
            if self._handle is None:
                return n.ERR_CLOSED
            return self._c_report(self._h, snapshot, snapshot_bytes, entries, count)


def null_reporter() -> Reporter:
    """A closed reporter: every call is a no-op (for engines with metrics off)."""
    r = Reporter.__new__(Reporter)
    r._handle = None
    r._lock = threading.Lock()
    r.error = "metrics disabled"
    r.role = "other"
    r.identity_labels = {}
    r._series = {}
    r._families = {}
    r._lib = None
    r._refused = 0
    r._segment = None
    return r
