"""The plain API: one Reporter per producing rank (one shared-memory segment), metric families shaped
like prometheus_client's, batched updates, and scheduler snapshots packed into a reused buffer.

Cost model (CPython 3.11, measured in bench/bench_python_report.py): every C call is one ctypes call
(about 0.7 us); a scheduler snapshot is one struct.pack_into into a reused buffer plus one call; a batch
of series updates is one pack per update plus one call.

A Reporter never raises on the hot path: if the segment could not be created (no space, no library),
it stays closed and every update is a no-op, so an engine keeps running without metrics.
"""

from __future__ import annotations

import bisect
import ctypes
import logging
import os
import struct
import threading
import weakref
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from . import _native as n

log = logging.getLogger("rankstat")

ReportKind = type("ReportKind", (), {
    "UNSPECIFIED": n.REPORT_UNSPECIFIED,
    "PREFILL": n.REPORT_PREFILL,
    "DECODE": n.REPORT_DECODE,
    "IDLE": n.REPORT_IDLE,
    "__doc__": "report_kind values: which derived values a scheduler snapshot owns.",
})

_UPDATE = struct.Struct("<IIdQd")  # rankstat_update: op, id, value, count, sum_delta
_ENTRY = struct.Struct("<iBBHq")   # per-priority entry: priority, queue, flags, reserved, count
_NO_ID = 0xFFFFFFFF

# Reporters alive in this process; a forked child must not write into its parent's segments.
_live_reporters: "weakref.WeakSet[Reporter]" = weakref.WeakSet()


def _forget_in_child() -> None:
    # A Reporter names one rank's segment: the child cannot take over the parent's identity (its segment
    # would replace the parent's name), so its copies become closed no-ops. The prometheus_client-compatible
    # classes (rankstat.metrics) do re-bind in the child, to a segment of its own (rankstat.backend).
    for r in list(_live_reporters):
        r._detach_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _label_arrays(labels: Sequence[Tuple[str, str]]):
    count = len(labels)
    names = (ctypes.c_char_p * max(count, 1))(*[k.encode() for k, _ in labels])
    values = (ctypes.c_char_p * max(count, 1))(*[str(v).encode() for _, v in labels])
    return count, names, values


# The plain API's kinds; a summary here is a histogram without finite bounds (its count and sum).
_SERIES_KINDS = {"counter": n.KIND_COUNTER, "gauge": n.KIND_GAUGE, "histogram": n.KIND_HISTOGRAM,
                 "summary": n.KIND_HISTOGRAM}


class Reporter:
    """One rank's segment: rankstat.<instance>.<role>.<rank-key> in `shm_dir`, else $RANKSTAT_SHM_DIR, else
    /dev/shm (`shm_dir` applies to this segment only; the environment is never changed).

    Single writer: updates are serialized by an internal lock, so threads of one rank may share it.
    `strict=True` raises RankstatError when the segment cannot be created; otherwise the failure is logged
    once and the reporter stays closed (every call a no-op).
    """

    def __init__(self, *, role: str = "scheduler", instance: Optional[str] = None, rank_key: Optional[str] = None,
                 model_name: str = "", engine_type: str = "unified", tp_rank: int = 0, pp_rank: int = 0,
                 dp_rank: Optional[int] = None, moe_ep_rank: int = 0, attn_tp_rank: Optional[int] = None,
                 attn_dp_rank: Optional[int] = None, attn_cp_rank: int = 0, tp_size: int = 1, pp_size: int = 1,
                 dp_size: int = 1, priority_scheduling: bool = False, all_schedulers: bool = False,
                 dp_attention: bool = False, extra_labels: Optional[Mapping[str, Any]] = None,
                 shm_dir: Optional[str] = None, ring_bytes: int = 0, series_capacity: int = 2048,
                 bounds_capacity: int = 16384, values_capacity: int = 65536, strict: bool = False,
                 quiet: bool = False):
        self._handle: Optional[int] = None
        self._lock = threading.Lock()
        self.error = ""
        self.error_code = n.OK  # rankstat_open's code when the segment could not be opened
        self.note = ""  # set when the segment went under another name than its identity's (logged once)
        self.role = role
        self.identity_labels: Dict[str, str] = {}
        self._series: Dict[Tuple, int] = {}
        self._families: Dict[str, Any] = {}
        self.registration_failures = 0  # series the segment had no room for (their updates are dropped)
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
        identity.instance = text(instance or os.environ.get("RANKSTAT_INSTANCE") or None)
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
                              values_capacity)
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
        # The labels the daemon adds to every series of this segment (SGLang's order); series labels of
        # the same name override them.
        labels: Dict[str, str] = {"model_name": model_name, "engine_type": engine_type}
        if role == "scheduler":
            labels.update(tp_rank=str(tp_rank), pp_rank=str(pp_rank), moe_ep_rank=str(moe_ep_rank))
        if priority_scheduling:
            labels["priority"] = ""
        if role == "scheduler" and dp_rank is not None:
            labels["dp_rank"] = str(dp_rank)
        labels.update({k: v for k, v in extra})
        self.identity_labels = labels
        # Bound C entry points for the hot paths. The two that take only pointers and uint32s are called
        # without argtypes, with pre-built c_void_p objects, which skips the per-call conversions.
        self._c_add = self._lib.rankstat_counter_add
        self._c_set = self._lib.rankstat_gauge_set
        self._c_observe = self._lib.rankstat_histogram_observe
        self._c_observe_many = self._lib.rankstat_histogram_observe_many
        self._c_apply = n.raw_function(self._lib, "rankstat_apply_updates")
        self._c_report = n.raw_function(self._lib, "rankstat_report_scheduler")
        self._h = ctypes.c_void_p(self._handle)
        _live_reporters.add(self)

    # --- lifecycle -----------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._handle is not None

    @property
    def address(self) -> int:
        """The library's rankstat_reporter* as an integer (what the C fast path writes through); 0 when closed."""
        return self._handle or 0

    @property
    def layout(self) -> Optional[n.Layout]:
        return getattr(self, "_layout", None)

    def close(self) -> None:
        """Marks the segment closed (a clean exit) and releases it. Idempotent. In a forked child it only
        lets go of the inherited mapping: the segment is the parent's (see _abandon)."""
        if getattr(self, "_pid", None) != os.getpid():
            self._abandon()
            return
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                self._lib.rankstat_close(handle)

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
        # fork would never be released; the reporter gets a new one, then lets go of the parent's segment.
        self._lock = threading.Lock()
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
        if self._handle is not None:
            self._lib.rankstat_heartbeat(self._handle)

    @property
    def dropped_records(self) -> int:
        return self._lib.rankstat_dropped_records(self._handle) if self._handle is not None else 0

    # --- registration (cold path) --------------------------------------------------------------------

    def register(self, kind: str, family: str, labels: Sequence[Tuple[str, Any]] = (), *, mode: str = "mostrecent",
                 buckets: Sequence[float] = (), identity_labels: bool = True) -> int:
        """Registers one series (or returns the id of the same one registered before). `kind` is
        'counter', 'gauge', 'histogram' or 'summary' (a histogram without finite bounds). Returns an id
        for add/set/observe; on a closed reporter or a failed registration, an id that every update
        ignores (the failure is logged once per series).

        identity_labels=False documents a family exported with its own labels only (SGLang's HTTP
        families, kv_transfer_timeouts_total, eplb_gpu_physical_count); the daemon knows these families
        by name, since the C ABI cannot flag a series yet."""
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
        spec, _keep = n.series_spec(series_kind, n.GAUGE_MODES[mode] if kind == "gauge" else 0, 0, family.encode(), b"",
                                    [k.encode() for k, _ in own], [v.encode("utf-8", "surrogatepass") for _, v in own],
                                    list(bounds))
        out = ctypes.c_uint32(_NO_ID)
        with self._lock:
            if self._handle is None:
                return _NO_ID
            rc = self._lib.rankstat_register_series(self._handle, ctypes.byref(spec), ctypes.byref(out))
        if rc != n.OK:
            self.registration_failures += 1
            if self.registration_failures <= 10 or self.registration_failures % 1000 == 0:
                log.warning("rankstat: cannot register %s %s%s (%d failures so far): %s", kind, family, dict(pairs),
                            self.registration_failures, n.last_error(self._lib))
            self._series[key] = _NO_ID
            return _NO_ID
        self._series[key] = out.value
        return out.value

    def counter(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
                identity_labels: bool = True) -> "Counter":
        return self._family(Counter, name, labelnames, identity_labels=identity_labels)

    def gauge(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
              multiprocess_mode: str = "mostrecent", identity_labels: bool = True) -> "Gauge":
        return self._family(Gauge, name, labelnames, identity_labels=identity_labels, mode=multiprocess_mode)

    def histogram(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
                  buckets: Sequence[float], identity_labels: bool = True) -> "Histogram":
        return self._family(Histogram, name, labelnames, identity_labels=identity_labels,
                            buckets=tuple(float(b) for b in buckets))

    def summary(self, name: str, documentation: str = "", labelnames: Sequence[str] = (), *,
                identity_labels: bool = True) -> "Summary":
        return self._family(Summary, name, labelnames, identity_labels=identity_labels)

    def _family(self, cls, name, labelnames, **kw):
        existing = self._families.get(name)
        if existing is not None:
            if type(existing) is not cls or existing.labelnames != tuple(labelnames):
                raise ValueError(f"{name} is already registered as a {type(existing).__name__} with labels "
                                 f"{existing.labelnames}")
            return existing
        family = cls(self, name, tuple(labelnames), **kw)
        self._families[name] = family
        return family

    # --- updates (hot path) --------------------------------------------------------------------------

    def add(self, series: int, delta: float = 1.0) -> None:
        if series != _NO_ID and self._handle is not None:
            with self._lock:
                if self._handle is not None:
                    self._c_add(self._handle, series, delta)

    def set(self, series: int, value: float) -> None:
        if series != _NO_ID and self._handle is not None:
            with self._lock:
                if self._handle is not None:
                    self._c_set(self._handle, series, value)

    def observe(self, series: int, value: float) -> None:
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

    def batch(self, capacity: int = 64) -> "UpdateBatch":
        return UpdateBatch(self, capacity)

    def snapshot_packer(self) -> "SnapshotPacker":
        return SnapshotPacker(self)

    def _report(self, snapshot: ctypes.c_void_p, snapshot_bytes: int, entries: ctypes.c_void_p, count: int) -> int:
        if self._handle is None:
            return n.ERR_CLOSED
        with self._lock:
            if self._handle is None:
                return n.ERR_CLOSED
            return self._c_report(self._h, snapshot, snapshot_bytes, entries, count)


class UpdateBatch:
    """Series updates packed into a reused buffer and applied with one C call (rankstat_apply_updates).
    Not thread-safe: one batch per thread. flush() is called automatically when the buffer is full."""

    __slots__ = ("_reporter", "_capacity", "_buffer", "_address", "_count", "_pack")

    def __init__(self, reporter: Reporter, capacity: int = 64):
        self._reporter = reporter
        self._capacity = capacity
        self._buffer = ctypes.create_string_buffer(_UPDATE.size * capacity)
        self._address = ctypes.c_void_p(ctypes.addressof(self._buffer))
        self._count = 0
        self._pack = _UPDATE.pack_into

    def _push(self, op: int, series: int, value: float, count: int, sum_delta: float) -> None:
        if series == _NO_ID:
            return
        if self._count == self._capacity:
            self.flush()
        self._pack(self._buffer, self._count * 32, op, series, value, count, sum_delta)
        self._count += 1

    def add(self, series: int, delta: float = 1.0) -> None:
        self._push(n.OP_COUNTER_ADD, series, float(delta), 0, 0.0)

    def set(self, series: int, value: float) -> None:
        self._push(n.OP_GAUGE_SET, series, float(value), 0, 0.0)

    def observe(self, series: int, value: float) -> None:
        v = float(value)
        self._push(n.OP_HISTOGRAM_OBSERVE, series, v, 1, v)

    def observe_many(self, series: int, value: float, count: int, sum_delta: float) -> None:
        if count > 0:
            self._push(n.OP_HISTOGRAM_OBSERVE, series, float(value), int(count), float(sum_delta))

    def __len__(self) -> int:
        return self._count

    def flush(self) -> None:
        count, self._count = self._count, 0
        r = self._reporter
        if count and r._handle is not None:
            with r._lock:
                if r._handle is not None:
                    r._c_apply(r._h, self._address, count, None)

    def __enter__(self) -> "UpdateBatch":
        return self

    def __exit__(self, *exc) -> None:
        self.flush()


class SnapshotPacker:
    """Packs scheduler snapshots (SGLang's SchedulerStats fields) into a reused buffer: one
    struct.pack_into and one C call per report. The struct format is built once from the library's own
    field table, so no offset is restated here."""

    def __init__(self, reporter: Reporter):
        self._reporter = reporter
        layout = reporter.layout
        if layout is None:
            self.field_names: Tuple[str, ...] = ()
            self._closed = True
            return
        self._closed = False
        members = [(f.offset, f.name, f.kind, f.count) for f in layout.scalar_fields]
        members += [(f.offset, f.name, f.kind, f.count) for f in layout.aux_fields.values()]
        members.sort()
        fmt = "<"
        pos = 0
        order: List[Tuple[str, int]] = []
        for offset, name, kind, count in members:
            if offset < pos:
                raise n.RankstatLayoutError(f"snapshot member {name} overlaps the one before it")
            if offset > pos:
                fmt += f"{offset - pos}x"
            fmt += (f"{count}{kind}" if count > 1 else kind)
            pos = offset + struct.calcsize("<" + kind) * count
            order.append((name, count))
        if pos < layout.snapshot_bytes:
            fmt += f"{layout.snapshot_bytes - pos}x"
        self._struct = struct.Struct(fmt)
        if self._struct.size != layout.snapshot_bytes:
            raise n.RankstatLayoutError(f"packed snapshot is {self._struct.size} bytes, the library expects "
                                        f"{layout.snapshot_bytes}")
        self.field_names = tuple(f.name for f in layout.scalar_fields)
        self.field_kinds = tuple(f.kind for f in layout.scalar_fields)
        self.routing_key_bounds = layout.routing_key_bounds
        self.routing_bins = layout.aux_fields["routing_key_running_req_counts"].count
        self.max_entries = layout.max_priority_counts
        # Position of every value in the pack call.
        self._position: Dict[str, int] = {}
        index = 0
        for name, count in order:
            self._position[name] = index
            index += count
        self._values: List[Any] = [0] * index
        self._scalar_slice = [self._position[f] for f in self.field_names]
        first = self._scalar_slice[0]
        contiguous = self._scalar_slice == list(range(first, first + len(self.field_names)))
        self._scalar_start = self._scalar_slice[0] if contiguous else -1
        self._kind_at = self._position["report_kind"]
        self._count_at = self._position["priority_count"]
        self._groups_at = self._position["groups"]
        self._running_at = self._position["routing_key_running_req_counts"]
        self._all_at = self._position["routing_key_all_req_counts"]
        self._buffer = ctypes.create_string_buffer(layout.snapshot_bytes)
        self._address = ctypes.c_void_p(ctypes.addressof(self._buffer))
        self._entries = ctypes.create_string_buffer(_ENTRY.size * self.max_entries)
        self._entries_address = ctypes.c_void_p(ctypes.addressof(self._entries))
        self._entry_count = 0
        self._zero_bins = (0,) * self.routing_bins

    # --- building one report ---

    def bins(self, per_key_counts: Iterable[float]) -> Tuple[int, ...]:
        """Per-bin key counts ("gt < count <= le") from per-key request counts."""
        bins = [0] * self.routing_bins
        bounds = self.routing_key_bounds
        for c in per_key_counts:
            bins[bisect.bisect_left(bounds, c)] += 1
        return tuple(bins)

    def add_entry(self, queue: int, priority: Any, count: int) -> bool:
        """One per-priority count; priority None is SGLang's priority=None. False when the report is full."""
        if self._entry_count >= self.max_entries:
            return False
        if priority is None:
            _ENTRY.pack_into(self._entries, self._entry_count * 16, 0, queue, n.PRIORITY_IS_NONE, 0, int(count))
        else:
            _ENTRY.pack_into(self._entries, self._entry_count * 16, int(priority), queue, 0, 0, int(count))
        self._entry_count += 1
        return True

    def send(self, values: Sequence[Any], *, kind: int = n.REPORT_UNSPECIFIED, groups: int = 0,
             running_bins: Optional[Sequence[int]] = None, all_bins: Optional[Sequence[int]] = None) -> int:
        """Packs `values` (one per field_names entry, in that order) and the priority entries added since
        the last send, and appends the record. Returns the RANKSTAT_* code (ERR_RING_FULL: the record was
        dropped and counted, the engine carries on)."""
        if self._closed:
            self._entry_count = 0
            return n.ERR_CLOSED
        entries = self._fill(values, kind, groups, running_bins, all_bins)
        return self._reporter._report(self._address, len(self._buffer), self._entries_address, entries)

    def pack_only(self, values: Sequence[Any], *, kind: int = n.REPORT_UNSPECIFIED, groups: int = 0,
                  running_bins: Optional[Sequence[int]] = None,
                  all_bins: Optional[Sequence[int]] = None) -> Tuple[bytes, bytes]:
        """The snapshot and entry bytes send() would append (for tests and tools); nothing is sent."""
        entries = self._fill(values, kind, groups, running_bins, all_bins)
        return bytes(self._buffer), bytes(self._entries)[:16 * entries]

    def _fill(self, values, kind, groups, running_bins, all_bins) -> int:
        v = self._values
        entries, self._entry_count = self._entry_count, 0
        v[self._kind_at] = kind
        v[self._count_at] = entries
        v[self._groups_at] = groups
        start = self._scalar_start
        if start >= 0:
            v[start:start + len(values)] = values
        else:
            for pos, value in zip(self._scalar_slice, values):
                v[pos] = value
        n_bins = self.routing_bins
        v[self._running_at:self._running_at + n_bins] = running_bins or self._zero_bins
        v[self._all_at:self._all_at + n_bins] = all_bins or self._zero_bins
        try:
            self._struct.pack_into(self._buffer, 0, *v)
        except struct.error:
            self._coerce()
            self._struct.pack_into(self._buffer, 0, *v)
        return entries

    def _coerce(self) -> None:
        # Slow path: a plain dataclass handed floats to int fields, None, numpy scalars and the like.
        v = self._values
        for pos, kind in zip(self._scalar_slice, self.field_kinds):
            x = v[pos]
            if x is None:
                v[pos] = 0 if kind == "q" else 0.0
            elif kind == "q":
                try:
                    v[pos] = int(x)
                except (TypeError, ValueError, OverflowError):  # NaN, inf, something odd: report 0
                    v[pos] = 0
            else:
                try:
                    v[pos] = float(x)
                except (TypeError, ValueError):
                    v[pos] = float("nan")
        for pos in range(self._running_at, self._running_at + self.routing_bins):
            v[pos] = int(v[pos])
        for pos in range(self._all_at, self._all_at + self.routing_bins):
            v[pos] = int(v[pos])


# --- metric families shaped like prometheus_client's ----------------------------------------------------

class _Family:
    kind = ""

    def __init__(self, reporter: Reporter, name: str, labelnames: Tuple[str, ...], *, identity_labels: bool = True,
                 mode: str = "mostrecent", buckets: Tuple[float, ...] = ()):
        self._reporter = reporter
        self.name = name
        self.labelnames = labelnames
        self._identity = identity_labels
        self._mode = mode
        self._buckets = buckets
        self._children: Dict[Tuple[str, ...], Any] = {}
        self._default = None if labelnames else self.labels()

    def labels(self, *values: Any, **kw: Any):
        if kw:
            try:
                key = tuple(str(kw[k]) for k in self.labelnames)
            except KeyError as e:
                raise ValueError(f"{self.name}: missing label {e.args[0]!r}") from None
            if len(kw) != len(self.labelnames):
                raise ValueError(f"{self.name}: labels {sorted(kw)} are not {list(self.labelnames)}")
        else:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values")
            key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            series = self._reporter.register(self.kind, self.name, list(zip(self.labelnames, key)), mode=self._mode,
                                             buckets=self._buckets, identity_labels=self._identity)
            child = self._child(series)
            self._children[key] = child
        return child

    def _child(self, series: int):
        raise NotImplementedError

    def _only(self):
        if self._default is None:
            raise ValueError(f"{self.name} has labels {list(self.labelnames)}: call .labels(...) first")
        return self._default


class _CounterChild:
    __slots__ = ("_r", "id")

    def __init__(self, reporter: Reporter, series: int):
        self._r, self.id = reporter, series

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self._r.add(self.id, amount)


class _GaugeChild:
    __slots__ = ("_r", "id")

    def __init__(self, reporter: Reporter, series: int):
        self._r, self.id = reporter, series

    def set(self, value: float) -> None:
        self._r.set(self.id, value)


class _HistogramChild:
    __slots__ = ("_r", "id")

    def __init__(self, reporter: Reporter, series: int):
        self._r, self.id = reporter, series

    def observe(self, value: float) -> None:
        self._r.observe(self.id, value)

    def observe_many(self, value: float, count: int, sum_delta: float) -> None:
        self._r.observe_many(self.id, value, count, sum_delta)


class Counter(_Family):
    kind = "counter"

    def _child(self, series):
        return _CounterChild(self._reporter, series)

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)


class Gauge(_Family):
    """A gauge. Only set() exists: a shared-memory gauge is a last value, as prometheus_client's
    mostrecent gauges (inc/dec would need a read-modify-write that other modes do not share)."""
    kind = "gauge"

    def _child(self, series):
        return _GaugeChild(self._reporter, series)

    def set(self, value: float) -> None:
        self._only().set(value)


class Histogram(_Family):
    kind = "histogram"

    def _child(self, series):
        return _HistogramChild(self._reporter, series)

    def observe(self, value: float) -> None:
        self._only().observe(value)


class Summary(_Family):
    """Count and sum only, like prometheus_client's multiprocess summaries."""
    kind = "summary"

    def _child(self, series):
        return _HistogramChild(self._reporter, series)

    def observe(self, value: float) -> None:
        self._only().observe(value)


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
    r.registration_failures = 0
    return r
