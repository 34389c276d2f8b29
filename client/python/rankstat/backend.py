"""The process's one segment, under every metric the prometheus_client-compatible classes create.

A process (an SGLang scheduler rank, the tokenizer, a detokenizer) builds several collectors; they all
write into one segment, opened lazily when the first series is registered. Who the process is comes
from the first collector that says so (`hint_identity`): a scheduler collector names the rank
(`tp0-pp0-ep0[-dp1]`), anything else gets a per-process key (`pid1234`), so two collectors never open or
rename over each other's segment. Instance and directory come from $RANKSTAT_INSTANCE and
$RANKSTAT_SHM_DIR, as for every Reporter.

Every C call made from here holds the GIL (the functions come from a ctypes.PyDLL handle): another
thread's hot-path update, which also holds the GIL, can then never run inside the single-writer
reporter at the same time as a registration.

If the library or the segment cannot be opened the failure is logged once and every metric becomes a
no-op: SGLang must never see an exception from its metrics. A segment that could not be created (a full
/dev/shm, most often) is tried again by a background thread, every 0.5 s at first and every 5 s at
most, never from an update; once it opens, every series created meanwhile is registered in it and its
children are bound to it. What they counted while there was no segment is lost (docs/reliability.md).

Footprint: the capacities below cost nothing until used. The segment file has its full size but only
the pages registrations fill are reserved (shmproto/segment.hpp), so a process starts at about 52 KiB of
/dev/shm (header, a 32 KiB ring for the gauges' update records, a page per cumulative region) and grows
by what its series need. A registration refused for room (the shm directory is full, or a capacity is
used up) is logged with the family's name and counted (here and in the segment, which the daemon
exports as rankstat_series_registrations_refused_total).

fork() (multiprocessing's fork start method, vLLM's workers, any library that forks): the segment is the
parent's and stays exactly as the parent has it. The child's copy of the reporter is abandoned
(rankstat_abandon: unmapped, no header write, no unlink) and every metric child it inherited is detached.
The child's first registration, or first update or read of an inherited child, opens a segment of its own
(its own pid-keyed identity, or the identity a collector in the child names) and re-binds every inherited
child to it at 0, as prometheus_client's values re-bind to the child's own files when they see a new pid.
Every lock of the package is new in the child: a lock another thread held at the fork would never be
released there.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _native as n

log = logging.getLogger("rankstat")

NO_SERIES = 0xFFFFFFFF

# SGLang declares ~900 series per process at the newest version, histograms with up to 41 buckets and
# help texts of a few hundred bytes. Capacities cost address space only: pages are reserved as series
# are registered. The ring carries only the gauges' update records (for the time integrals; a full ring
# drops records, counted, never values), drained every 2-100 ms: 512 records of room.
SERIES_CAPACITY = 1 << 15
BOUNDS_CAPACITY = 1 << 18
VALUES_CAPACITY = 1 << 21
RING_BYTES = 32 * 1024
# Retries of a segment that could not be opened: first after RETRY_FIRST_S, doubling to RETRY_MAX_S.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0

_ROLE_KEYS = ("role", "rank_key", "model_name", "engine_type", "tp_rank", "pp_rank", "dp_rank", "moe_ep_rank")


class _Calls:
    """The declared-series C functions, bound so that calling them keeps the GIL."""

    def __init__(self, lib: ctypes.CDLL):
        held = ctypes.PyDLL(lib._name, handle=lib._handle)
        for name in n.DECLARED_SERIES_FUNCTIONS:
            src = getattr(lib, name)
            fn = getattr(held, name)
            fn.restype, fn.argtypes = src.restype, src.argtypes
            setattr(self, name[len("rankstat_"):], fn)


class Segment:
    """The process-wide segment. Use `segment()`; tests may build their own."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._hints: Dict[str, Any] = {}
        self._opened = False
        self.reporter: Any = None  # rankstat.reporter.Reporter once opened (possibly closed on failure)
        self.address = 0      # the rankstat_reporter* every Value writes through; 0 = disabled
        self.calls: Any = None  # _Calls once opened: the library's functions, bound by name at run time
        self.error = ""
        self.registration_failures = 0
        self.refused_by_reason: Dict[str, int] = {}  # registration failures by ERROR_NAMES reason
        self._logged_families: set = set()  # families whose first refusal was logged
        # Set while the segment could not be opened and a retry thread is trying again.
        self.retrying = False
        self.detached_since = 0.0  # time.monotonic() of the first failed open
        # One series per (kind, mode, family, labels, bounds) in the process, as prometheus_client keeps one
        # mmap value per key: a metric built again (vLLM builds a logger twice; tests rebuild collectors)
        # continues the same series instead of adding a second one that a min/max gauge would merge with.
        self._series_ids: Dict[Tuple[Any, ...], int] = {}
        # Set in a forked child until the metrics it inherited are re-bound to its own segment.
        self.inherited = False
        # Every name a family declared here -> its declaration (rankstat.metrics' one-declaration rule).
        # Kept across a fork: the child re-declares what it inherited, the same declarations.
        self.declarations: Dict[str, Tuple[Any, ...]] = {}

    # --- identity ---------------------------------------------------------------------------------

    def hint_identity(self, role: str, labels: Optional[Mapping[str, Any]] = None) -> None:
        """Who this process is, from a collector about to create metrics. The first hint before the
        segment opens wins; later ones (a radix-cache collector in a scheduler process) are ignored."""
        with self._lock:
            if self._opened or self._hints:
                return
            self._hints = identity_from_labels(role, labels or {})

    def identity(self) -> Dict[str, Any]:
        with self._lock:
            return dict(self._hints) or identity_from_labels("other", {})

    # --- opening ----------------------------------------------------------------------------------

    def open(self) -> int:
        """Opens the segment on first use; the reporter address (0 when metrics are disabled)."""
        if self._opened:
            return self.address
        with self._lock:
            if self._opened:
                return self.address
            self._opened = True
            try:
                self._open_locked()
            except _SegmentUnavailable as e:
                self.error = str(e)
                self.address = 0
                self._start_retries()
                log.warning("rankstat: metrics off in this process until its segment can be created: %s; "
                            "retried every %g-%g s, and what is counted until then is lost", self.error,
                            RETRY_FIRST_S, RETRY_MAX_S)
            except Exception as e:  # never into the engine
                self.error = f"{type(e).__name__}: {e}"
                self.address = 0
                log.warning("rankstat: metrics disabled in this process: %s", self.error)
            return self.address

    # --- retrying a segment that could not be created -------------------------------------------------

    def _start_retries(self) -> None:
        # With self._lock held. One thread per process (a forked child starts its own when it needs one).
        if self.retrying:
            return
        self.retrying = True
        self.detached_since = time.monotonic()
        threading.Thread(target=self._retry_loop, args=(os.getpid(),), name="rankstat-segment-retry",
                         daemon=True).start()

    def _retry_loop(self, pid: int) -> None:
        delay = RETRY_FIRST_S
        while True:
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            if os.getpid() != pid:
                return
            try:
                if self.retry_open():
                    return
            except Exception as e:  # never let the thread die with a traceback on the engine's stderr
                log.debug("rankstat: segment retry failed: %s: %s", type(e).__name__, e)

    def retry_open(self) -> bool:
        """One more try at the segment; True once it is open (or no longer wanted). On success every series
        created meanwhile is registered in it and bound to it, from 0, before `retrying` turns False."""
        from . import metrics  # its lock orders registrations: taken before self._lock, as they do
        with metrics._registration_lock:
            with self._lock:
                if not self.retrying:
                    return True
                if self.address:
                    self.retrying = False
                    return True
                try:
                    self._open_locked()
                except _SegmentUnavailable as e:
                    self.error = str(e)
                    return False
                except Exception as e:
                    self.error = f"{type(e).__name__}: {e}"
                    self.retrying = False
                    log.warning("rankstat: metrics disabled in this process: %s", self.error)
                    return True
                self.error = ""
                waited = time.monotonic() - self.detached_since
            try:
                bound = self._bind_unbound_series(metrics)
            finally:
                self.retrying = False
            log.warning("rankstat: segment opened after %.1f s without one; %d series bound to it from 0 (what "
                        "they counted meanwhile is lost)", waited, bound)
            return True

    def _bind_unbound_series(self, metrics) -> int:
        # With metrics' registration lock held. Series created while there was no segment have address 0
        # and are not detached (their updates are no-ops in C, with no call into Python). They are bound
        # the way a forked child binds what it inherited: detached, then re-registered under their keys by
        # the metric classes' own re-bind (metrics._rebind_inherited), which registers detached series only.
        unbound: List[Any] = []
        for family in families():
            try:
                found = family._series() if hasattr(family, "_series") else (
                    list(family._children.values()) + list(getattr(family, "_removed", {}).values()))
            except Exception:  # a family half-built
                continue
            unbound.extend(x for x in found if not x._reporter_address and not x._detached)
        for series in unbound:
            series._detach()
        with self._lock:
            self.inherited = True
        metrics._rebind_inherited()
        return sum(1 for x in unbound if x._reporter_address != 0)

    def _open_locked(self) -> None:
        from .reporter import Reporter  # the ctypes Reporter owns open/close and the fork rules
        try:
            lib, _layout = n.load_library()
        except n.RankstatError as e:
            raise RuntimeError(str(e)) from None
        if not n.has_declared_series(lib):
            raise RuntimeError(f"{n.library_path()} lacks the declared-series functions "
                               f"({', '.join(n.DECLARED_SERIES_FUNCTIONS)}): it is older than this package")
        ident = self.identity()
        kw = {k: ident[k] for k in _ROLE_KEYS if k in ident}
        reporter = Reporter(series_capacity=SERIES_CAPACITY, bounds_capacity=BOUNDS_CAPACITY,
                            values_capacity=VALUES_CAPACITY, ring_bytes=RING_BYTES, quiet=True, **kw)
        self.reporter = reporter
        if not reporter.is_open:
            if reporter.error_code in (n.ERR_NO_SPACE, n.ERR_IO, n.ERR_PERMISSION):
                raise _SegmentUnavailable(reporter.error or "the segment could not be created")
            raise RuntimeError(reporter.error or "the segment could not be opened")
        self.calls = _Calls(lib)
        from . import _accel
        _accel.bind(lib)
        self.address = reporter.address

    # --- series -----------------------------------------------------------------------------------

    def register(self, kind: int, mode: int, family: str, help_text: str, labelnames: Sequence[str],
                 labelvalues: Sequence[str], bounds: Sequence[float], *, identity_labels: bool = False) -> int:
        """Registers one series; its id, or NO_SERIES (logged, the series' updates are dropped). The series
        is exported with its own labels only, unless `identity_labels` (a Reporter's families by default):
        then the daemon adds the segment's identity labels, and a label equal to one of them is left to it."""
        address = self.open()
        if not address:
            return NO_SERIES
        finite = [b for b in bounds if b != float("inf")]
        flags = n.SERIES_OWN_LABELS_ONLY
        if identity_labels:
            flags = 0
            given = self.reporter.identity_labels if self.reporter is not None else {}
            pairs = [(k, v) for k, v in zip(labelnames, labelvalues) if given.get(k) != v]
            labelnames, labelvalues = [k for k, _ in pairs], [v for _, v in pairs]
        # Texts go by length (never as NUL-terminated strings): a NUL inside a label value or the help is
        # kept, so `a\0b` and `a\0c` stay two series as in prometheus_client.
        spec, _keep = n.series_spec(kind, mode, flags, family.encode(),
                                    help_text.encode("utf-8", "surrogatepass"), [s.encode() for s in labelnames],
                                    [s.encode("utf-8", "surrogatepass") for s in labelvalues], finite)
        out = ctypes.c_uint32(NO_SERIES)
        key = (kind, mode, flags, family, tuple(labelnames), tuple(labelvalues), tuple(finite))
        with self._lock:
            if self.address != address:  # forked meanwhile
                return NO_SERIES
            known = self._series_ids.get(key)
            if known is not None:
                return known
            rc = self.calls.register_series(address, ctypes.byref(spec), ctypes.byref(out))
            if rc == n.OK:
                self._series_ids[key] = out.value
        if rc != n.OK:
            # Never silent: the first refusal of each family is logged with its name, and after ten the
            # thousandth ones; the segment counts them by reason too (the daemon exports the count).
            reason = n.ERROR_NAMES.get(rc, str(rc))
            self.registration_failures += 1
            self.refused_by_reason[reason] = self.refused_by_reason.get(reason, 0) + 1
            first_of_family = family not in self._logged_families
            if first_of_family or self.registration_failures <= 10 or self.registration_failures % 1000 == 0:
                self._logged_families.add(family)
                log.warning("rankstat: cannot register %s%s, its updates are dropped (%d refused so far: %s): "
                            "%s: %s", family, dict(zip(labelnames, labelvalues)), self.registration_failures,
                            ", ".join(f"{k} {v}" for k, v in sorted(self.refused_by_reason.items())), reason,
                            n.last_error(self.reporter.library))
            return NO_SERIES
        return out.value

    # Reads and bucket-level writes for prometheus_client's child internals; `child` is a Value. A child
    # detached by a fork is re-bound first (prometheus_client's get() and inc() re-bind alike), so its
    # stale id never reaches the new segment.

    @staticmethod
    def _address_of(child) -> int:
        address = child._reporter_address
        if not address and child._detached:
            child._rebind()
            address = child._reporter_address
        return address

    def value(self, child) -> float:
        address = self._address_of(child)
        if not address:
            return 0.0
        out = ctypes.c_double(0.0)
        if self.calls.series_value(address, child._series_id, ctypes.byref(out)) != n.OK:
            return 0.0
        return out.value

    def bucket(self, child, index: int) -> float:
        address = self._address_of(child)
        if not address:
            return 0.0
        out = ctypes.c_uint64(0)
        if self.calls.histogram_bucket(address, child._series_id, index, ctypes.byref(out)) != n.OK:
            return 0.0
        return float(out.value)

    def bucket_add(self, child, index: int, count: float) -> None:
        address = self._address_of(child)
        if address and count > 0:
            self.calls.histogram_bucket_add(address, child._series_id, index, int(count))

    def add_sum(self, child, delta: float) -> None:
        address = self._address_of(child)
        if address:
            self.calls.histogram_add_sum(address, child._series_id, float(delta))

    # --- fork -------------------------------------------------------------------------------------

    def take_inherited(self) -> bool:
        """True once in a forked child: the caller re-binds the metrics inherited from the parent (with
        rankstat.metrics' registration lock held)."""
        with self._lock:
            pending, self.inherited = self.inherited, False
            return pending

    def _forget_after_fork(self) -> None:
        # In the child, right after fork(), with no other thread: the parent's segment must be neither
        # written nor closed from here. Dropping the reporter used to close it (its __del__), which marked
        # the parent's header closed: the daemon then retired a parent that was alive and writing.
        self._lock = threading.RLock()
        reporter, self.reporter = self.reporter, None
        if reporter is not None:
            reporter._detach_after_fork()  # rankstat_abandon: unmapped here, untouched there
        self._hints = {}
        self._opened = False
        self.address = 0
        self.error = ""
        self._series_ids = {}
        self.inherited = True
        self.retrying = False  # the parent's retry thread does not exist here; a failed open starts one


class ReporterSegment(Segment):
    """The segment of one rankstat.Reporter, under the metric classes its families create
    (Reporter.counter() and the others): opened by the Reporter, never retried, never re-opened after a
    fork (the Reporter's families are no-ops in a forked child, as the Reporter is). Registrations hold the
    GIL, like every write into the Reporter, so they never run beside another thread's update."""

    def __init__(self, reporter: Any) -> None:
        super().__init__()
        self.reporter = reporter
        self._opened = True
        self.address = reporter.address
        if self.address:
            lib = reporter.library
            self.calls = _Calls(lib)
            from . import _accel
            _accel.bind(lib)
        else:
            self.error = reporter.error or "the reporter is closed"

    def hint_identity(self, role: str, labels: Optional[Mapping[str, Any]] = None) -> None:
        pass  # the Reporter named its identity

    def open(self) -> int:
        return self.address

    def detach(self) -> None:
        """The Reporter is closing or was inherited by a forked child: no new series from here on."""
        self.address = 0


class _SegmentUnavailable(Exception):
    """The segment could not be created for a reason that may pass (no space, descriptors, permissions)."""


def identity_from_labels(role: str, labels: Mapping[str, Any]) -> Dict[str, Any]:
    """Segment identity from a collector's role and SGLang label dict."""

    def rank(name: str) -> Optional[int]:
        v = labels.get(name)
        try:
            return None if v is None or v == "" else int(v)
        except (TypeError, ValueError):
            return None

    out: Dict[str, Any] = {}
    if labels.get("model_name"):
        out["model_name"] = str(labels["model_name"])
    if labels.get("engine_type"):
        out["engine_type"] = str(labels["engine_type"])
    if role == "scheduler":
        tp, pp, ep, dp = rank("tp_rank") or 0, rank("pp_rank") or 0, rank("moe_ep_rank") or 0, rank("dp_rank")
        key = f"tp{tp}-pp{pp}-ep{ep}" + (f"-dp{dp}" if dp is not None else "")
        engine = out.get("engine_type", "unified")
        if engine != "unified":  # a PD pair's prefill and decode schedulers share rank numbers
            key = f"{engine}-{key}"
        out.update(role="scheduler", rank_key=key, tp_rank=tp, pp_rank=pp, moe_ep_rank=ep, dp_rank=dp)
    else:
        out.update(role=role if role in n.ROLES else "other", rank_key=f"pid{os.getpid()}")
    return out


_segment = Segment()
# Families alive in this process, so a forked child can detach and later re-bind every child bound to
# the parent's segment. Each child holds its family, so a child still in use keeps its family here.
_families: "weakref.WeakSet[Any]" = weakref.WeakSet()


def segment() -> Segment:
    return _segment


def track_family(family: Any) -> None:
    _families.add(family)


def families() -> list:
    return list(_families)


def _after_fork_in_child() -> None:
    # Children first: once the reporter is abandoned its address is freed memory, and no child may hold it.
    for family in list(_families):
        try:
            family._detach_children_after_fork()
        except Exception:  # a family half-built when the fork happened
            pass
    _segment._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
