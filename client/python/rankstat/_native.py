"""Loading librankstat.so and declaring its C ABI for ctypes.

Where the library comes from, in order:
  1. the path in $RANKSTAT_LIBRARY;
  2. librankstat.so next to this package (a wheel or an install that ships it);
  3. a build tree around the package: <repo>/build/*/client/librankstat.so, newest first;
  4. the system loader (librankstat.so.0 / librankstat.so on the library path).

After loading, the layout the library writes is checked: its major version must be the one this
package was written for, and its layout hash must be one this package knows, because the package
packs records itself. Offsets are never restated here: they come from rankstat_scheduler_field and
rankstat_scheduler_aux_field.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Optional, Tuple

from . import _find, _fork_locks

# The contract this package packs: layout major 3 (declared series, length-delimited texts), and the
# layout hashes it has been checked against (tests/python checks that the library built from this tree is
# one of them).
LAYOUT_MAJOR = 3
KNOWN_LAYOUT_HASHES = frozenset({0x4A172CC6AD94F4A3})

# Error codes (rankstat.h).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_NO_SPACE = 2
ERR_PERMISSION = 3
ERR_IO = 4
ERR_RING_FULL = 5
ERR_OVERSIZE = 6
ERR_CLOSED = 7
ERR_REGISTRY_FULL = 8

ERROR_NAMES = {
    OK: "ok",
    ERR_INVALID_ARGUMENT: "invalid_argument",
    ERR_NO_SPACE: "no_space",
    ERR_PERMISSION: "permission",
    ERR_IO: "io",
    ERR_RING_FULL: "ring_full",
    ERR_OVERSIZE: "oversize",
    ERR_CLOSED: "closed",
    ERR_REGISTRY_FULL: "registry_full",
}

ROLE_SCHEDULER = 1
ROLE_TOKENIZER = 2
ROLE_DETOKENIZER = 3
ROLE_OTHER = 4
ROLES = {"scheduler": ROLE_SCHEDULER, "tokenizer": ROLE_TOKENIZER, "detokenizer": ROLE_DETOKENIZER,
         "other": ROLE_OTHER}

RANK_UNSET = -1

FLAG_PRIORITY_SCHEDULING = 1
FLAG_ALL_SCHEDULERS_METRICS = 2
FLAG_DP_ATTENTION = 4

# Gauge aggregation modes (RANKSTAT_MODE_*), under prometheus_client's multiprocess_mode names.
GaugeMode = Literal["all", "liveall", "sum", "livesum", "min", "livemin", "max", "livemax", "mostrecent",
                    "livemostrecent"]
GAUGE_MODES: Dict[str, int] = {
    "all": 0, "liveall": 1, "sum": 2, "livesum": 3, "min": 4, "livemin": 5, "max": 6, "livemax": 7,
    "mostrecent": 8, "livemostrecent": 9,
}
# The modes whose gauge is a last value: inc()/dec() are refused there, as prometheus_client refuses them.
MOST_RECENT_MODES = frozenset({"mostrecent", "livemostrecent"})

REPORT_UNSPECIFIED = 0
REPORT_PREFILL = 1
REPORT_DECODE = 2
REPORT_IDLE = 3


class ReportKind(enum.IntEnum):
    """report_kind of a scheduler snapshot (RANKSTAT_REPORT_*): which derived values the report owns."""

    UNSPECIFIED = REPORT_UNSPECIFIED  #: every value is taken as given
    PREFILL = REPORT_PREFILL  #: owns cache_hit_rate; gen_throughput keeps the last decode value
    DECODE = REPORT_DECODE  #: owns gen_throughput; cache_hit_rate keeps the last prefill value
    IDLE = REPORT_IDLE  #: an idle refresh: gen_throughput falls to 0

GROUP_LORA = 0x1
GROUP_HICACHE = 0x2
GROUP_STREAMING_SESSIONS = 0x4
GROUP_SPECULATIVE = 0x8
GROUP_DISAGGREGATION = 0x10
GROUP_ROUTING_KEYS = 0x20

QUEUE_RUNNING = 0
QUEUE_WAITING = 1
QUEUE_PREFILL_BOOTSTRAP = 2
QUEUE_PREFILL_INFLIGHT = 3
QUEUE_DECODE_PREALLOC = 4
QUEUE_DECODE_TRANSFER = 5
PRIORITY_IS_NONE = 1

OP_COUNTER_ADD = 1
OP_GAUGE_SET = 2
OP_HISTOGRAM_OBSERVE = 3

SERIES_WITHOUT_IDENTITY_LABELS = 1  # kSeriesWithoutIdentityLabels: only the series' own labels

# Declared series (rankstat_register_series): the series kinds every module of the package (and the C
# extension, through rankstat.h) uses; nothing else restates them.
KIND_COUNTER = 1
KIND_GAUGE = 2
KIND_HISTOGRAM = 3
KIND_SUMMARY = 4
SERIES_OWN_LABELS_ONLY = 1
SERIES_TEXT_LENGTHS = 2  # every text of the spec is given by its length: NUL bytes pass through
KIND_NAMES = {KIND_COUNTER: "counter", KIND_GAUGE: "gauge", KIND_HISTOGRAM: "histogram", KIND_SUMMARY: "summary"}


class RankstatError(RuntimeError):
    """A rankstat call failed; `code` is the RANKSTAT_* error code."""

    def __init__(self, message: str, code: int = ERR_IO):
        super().__init__(message)
        self.code = code


class RankstatLibraryError(RankstatError):
    """librankstat.so could not be found or loaded."""


class RankstatLayoutError(RankstatError):
    """The library writes a layout this package does not know how to pack."""


class Identity(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("role", ctypes.c_uint32),
        ("instance", ctypes.c_char_p),
        ("rank_key", ctypes.c_char_p),
        ("model_name", ctypes.c_char_p),
        ("engine_type", ctypes.c_char_p),
        ("tp_rank", ctypes.c_int32),
        ("pp_rank", ctypes.c_int32),
        ("dp_rank", ctypes.c_int32),
        ("moe_ep_rank", ctypes.c_int32),
        ("attn_tp_rank", ctypes.c_int32),
        ("attn_dp_rank", ctypes.c_int32),
        ("attn_cp_rank", ctypes.c_int32),
        ("tp_size", ctypes.c_int32),
        ("pp_size", ctypes.c_int32),
        ("dp_size", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("extra_label_count", ctypes.c_uint32),
        ("extra_label_names", ctypes.POINTER(ctypes.c_char_p)),
        ("extra_label_values", ctypes.POINTER(ctypes.c_char_p)),
    ]


class Geometry(ctypes.Structure):
    """rankstat_geometry: the segment's capacities; zero fields take the library's defaults."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("series_capacity", ctypes.c_uint32),
        ("ring_bytes", ctypes.c_uint64),
        ("bounds_capacity", ctypes.c_uint32),
        ("values_capacity", ctypes.c_uint32),
        # Appended with layout 3.0: bytes of the text area (family names, label lists, help texts);
        # 0 gives the library's default per series.
        ("text_capacity", ctypes.c_uint32),
    ]


class Permissions(ctypes.Structure):
    """rankstat_permissions: where and how the segment file is created (rankstat_open_ex)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("mode", ctypes.c_uint32),
        ("group", ctypes.c_char_p),
        ("shm_dir", ctypes.c_char_p),
    ]


class SeriesSpec(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", ctypes.c_uint32),
        ("mode", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("family", ctypes.c_char_p),
        ("help", ctypes.c_char_p),
        ("label_count", ctypes.c_uint32),
        ("bound_count", ctypes.c_uint32),
        ("label_names", ctypes.POINTER(ctypes.c_char_p)),
        ("label_values", ctypes.POINTER(ctypes.c_char_p)),
        ("bounds", ctypes.POINTER(ctypes.c_double)),
        # Appended with layout 3 (read with SERIES_TEXT_LENGTHS).
        ("family_length", ctypes.c_size_t),
        ("help_length", ctypes.c_size_t),
        ("label_name_lengths", ctypes.POINTER(ctypes.c_size_t)),
        ("label_value_lengths", ctypes.POINTER(ctypes.c_size_t)),
    ]


def series_spec(kind: int, mode: int, flags: int, family: bytes, help_text: bytes, names: List[bytes],
                values: List[bytes], bounds: List[float]) -> Tuple[SeriesSpec, tuple]:
    """A SeriesSpec whose texts are all passed by pointer and length (SERIES_TEXT_LENGTHS), so a NUL inside
    a label value or the help reaches the segment. The texts are copied into one buffer the spec points
    into; keep the returned tuple alive until the call returns."""
    texts = [family, help_text] + [t for pair in zip(names, values) for t in pair]
    blob = ctypes.create_string_buffer(b"".join(texts), sum(len(t) for t in texts) + 1)
    base = ctypes.addressof(blob)
    starts = []
    at = 0
    for t in texts:
        starts.append(base + at)
        at += len(t)
    count = len(names)
    name_ptrs = (ctypes.c_void_p * max(count, 1))(*starts[2::2])
    value_ptrs = (ctypes.c_void_p * max(count, 1))(*starts[3::2])
    name_lengths = (ctypes.c_size_t * max(count, 1))(*[len(t) for t in names])
    value_lengths = (ctypes.c_size_t * max(count, 1))(*[len(t) for t in values])
    arr = (ctypes.c_double * max(len(bounds), 1))(*bounds)
    spec = SeriesSpec()
    spec.struct_size = ctypes.sizeof(SeriesSpec)
    spec.kind = kind
    spec.mode = mode
    spec.flags = flags | SERIES_TEXT_LENGTHS
    spec.family = ctypes.cast(starts[0], ctypes.c_char_p)
    spec.help = ctypes.cast(starts[1], ctypes.c_char_p)
    spec.label_count = count
    spec.bound_count = len(bounds)
    spec.label_names = ctypes.cast(name_ptrs, ctypes.POINTER(ctypes.c_char_p))
    spec.label_values = ctypes.cast(value_ptrs, ctypes.POINTER(ctypes.c_char_p))
    spec.bounds = ctypes.cast(arr, ctypes.POINTER(ctypes.c_double))
    spec.family_length = len(family)
    spec.help_length = len(help_text)
    spec.label_name_lengths = ctypes.cast(name_lengths, ctypes.POINTER(ctypes.c_size_t))
    spec.label_value_lengths = ctypes.cast(value_lengths, ctypes.POINTER(ctypes.c_size_t))
    return spec, (blob, name_ptrs, value_ptrs, name_lengths, value_lengths, arr)


@dataclass(frozen=True)
class SnapshotField:
    name: str
    offset: int
    kind: str  # struct format character: q (int64), d (double), I (uint32), Q (uint64)
    count: int = 1


@dataclass(frozen=True)
class Layout:
    major: int
    minor: int
    hash: int
    snapshot_bytes: int
    scalar_fields: Tuple[SnapshotField, ...]
    aux_fields: Dict[str, SnapshotField]
    routing_key_bounds: Tuple[float, ...]
    priority_count_bytes: int
    max_priority_counts: int


def _declare(lib: ctypes.CDLL) -> None:
    c_void_p, c_uint32, c_uint64, c_int, c_double = (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64,
                                                     ctypes.c_int, ctypes.c_double)
    c_char_pp = ctypes.POINTER(ctypes.c_char_p)
    u32p = ctypes.POINTER(ctypes.c_uint32)
    protos: Dict[str, Tuple[Any, List[Any]]] = {
        "rankstat_identity_init": (None, [ctypes.POINTER(Identity)]),
        "rankstat_open": (c_int, [ctypes.POINTER(Identity), ctypes.POINTER(Geometry), ctypes.POINTER(c_void_p)]),
        "rankstat_open_ex": (c_int, [ctypes.POINTER(Identity), ctypes.POINTER(Geometry), ctypes.POINTER(Permissions),
                                     ctypes.POINTER(c_void_p)]),
        "rankstat_close": (None, [c_void_p]),
        "rankstat_last_error": (ctypes.c_char_p, []),
        "rankstat_report_scheduler": (c_int, [c_void_p, c_void_p, c_uint32, c_void_p, c_uint32]),
        "rankstat_heartbeat": (c_int, [c_void_p]),
        "rankstat_register_counter": (c_int, [c_void_p, ctypes.c_char_p, c_uint32, c_char_pp, c_char_pp, u32p]),
        "rankstat_register_gauge": (c_int, [c_void_p, ctypes.c_char_p, c_uint32, c_uint32, c_char_pp, c_char_pp,
                                            u32p]),
        "rankstat_register_histogram": (c_int, [c_void_p, ctypes.c_char_p, c_uint32, c_char_pp, c_char_pp,
                                                ctypes.POINTER(c_double), c_uint32, u32p]),
        "rankstat_counter_add": (c_int, [c_void_p, c_uint32, c_double]),
        "rankstat_gauge_set": (c_int, [c_void_p, c_uint32, c_double]),
        "rankstat_histogram_observe": (c_int, [c_void_p, c_uint32, c_double]),
        "rankstat_histogram_observe_many": (c_int, [c_void_p, c_uint32, c_double, c_uint64, c_double]),
        "rankstat_apply_updates": (c_int, [c_void_p, c_void_p, c_uint32, u32p]),
        "rankstat_dropped_records": (c_uint64, [c_void_p]),
        "rankstat_layout_major": (c_uint32, []),
        "rankstat_layout_minor": (c_uint32, []),
        "rankstat_layout_hash": (c_uint64, []),
        "rankstat_scheduler_snapshot_bytes": (c_uint32, []),
        "rankstat_scheduler_field": (c_int, [c_uint32, ctypes.POINTER(ctypes.c_char_p), u32p, u32p]),
        "rankstat_scheduler_aux_field": (c_int, [c_uint32, ctypes.POINTER(ctypes.c_char_p), u32p, u32p, u32p]),
        "rankstat_routing_key_bounds": (c_int, [ctypes.POINTER(ctypes.POINTER(c_double)), u32p]),
        "rankstat_priority_count_bytes": (c_uint32, []),
        "rankstat_max_priority_counts": (c_uint32, []),
        "rankstat_identity_label": (c_int, [c_void_p, c_uint32, ctypes.POINTER(ctypes.c_char_p),
                                            ctypes.POINTER(ctypes.c_char_p)]),
    }
    # Declared series (layout 2): a library without them still serves the typed snapshot path, so their
    # absence is reported by has_declared_series() instead of failing the load.
    optional: Dict[str, Tuple[Any, List[Any]]] = {
        "rankstat_register_series": (c_int, [c_void_p, ctypes.POINTER(SeriesSpec), u32p]),
        "rankstat_gauge_add": (c_int, [c_void_p, c_uint32, c_double]),
        "rankstat_series_value": (c_int, [c_void_p, c_uint32, ctypes.POINTER(c_double)]),
        "rankstat_histogram_bucket": (c_int, [c_void_p, c_uint32, c_uint32, ctypes.POINTER(c_uint64)]),
        "rankstat_histogram_bucket_add": (c_int, [c_void_p, c_uint32, c_uint32, c_uint64]),
        "rankstat_histogram_add_sum": (c_int, [c_void_p, c_uint32, c_double]),
        # Releasing a forked child's copy of the parent's reporter (rankstat.reporter.Reporter._abandon).
        "rankstat_abandon": (None, [c_void_p]),
        # Why the segment went under another name than its identity's (a live writer or another user held it).
        "rankstat_segment_note": (ctypes.c_char_p, [c_void_p]),
    }
    for name, (restype, argtypes) in optional.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
    missing = []
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name, None)
        if fn is None:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise RankstatLibraryError(f"{lib._name} lacks {', '.join(missing)}: it is older than this package")


def _read_layout(lib: ctypes.CDLL) -> Layout:
    name = ctypes.c_char_p()
    offset = ctypes.c_uint32()
    kind = ctypes.c_uint32()
    count = ctypes.c_uint32()
    scalars: List[SnapshotField] = []
    index = 0
    while lib.rankstat_scheduler_field(index, ctypes.byref(name), ctypes.byref(offset), ctypes.byref(kind)) == OK:
        fmt = {1: "q", 2: "d"}.get(kind.value)
        if fmt is None:
            raise RankstatLayoutError(f"scheduler field {name.value!r} has unknown type {kind.value}")
        scalars.append(SnapshotField((name.value or b"").decode(), offset.value, fmt))
        index += 1
    aux: Dict[str, SnapshotField] = {}
    index = 0
    while lib.rankstat_scheduler_aux_field(index, ctypes.byref(name), ctypes.byref(offset), ctypes.byref(kind),
                                           ctypes.byref(count)) == OK:
        fmt = {3: "I", 4: "Q"}.get(kind.value)
        if fmt is None:
            raise RankstatLayoutError(f"scheduler member {name.value!r} has unknown type {kind.value}")
        member = (name.value or b"").decode()
        aux[member] = SnapshotField(member, offset.value, fmt, count.value)
        index += 1
    bounds_ptr = ctypes.POINTER(ctypes.c_double)()
    n_bounds = ctypes.c_uint32()
    lib.rankstat_routing_key_bounds(ctypes.byref(bounds_ptr), ctypes.byref(n_bounds))
    bounds = tuple(bounds_ptr[i] for i in range(n_bounds.value))
    return Layout(
        major=lib.rankstat_layout_major(),
        minor=lib.rankstat_layout_minor(),
        hash=lib.rankstat_layout_hash(),
        snapshot_bytes=lib.rankstat_scheduler_snapshot_bytes(),
        scalar_fields=tuple(scalars),
        aux_fields=aux,
        routing_key_bounds=bounds,
        priority_count_bytes=lib.rankstat_priority_count_bytes(),
        max_priority_counts=lib.rankstat_max_priority_counts(),
    )


def candidate_paths() -> List[str]:
    """Where load_library() looks, in order (the system loader is tried last, by name): rankstat._find's
    search, the one the extension's loader uses too."""
    return _find.candidate_paths("RANKSTAT_LIBRARY", in_package=["librankstat.so*"],
                                 in_build=[os.path.join("client", "librankstat.so")])


_lock = _fork_locks.module_lock(globals(), "_lock")  # loading the library; new in a forked child

_lib: Optional[ctypes.CDLL] = None
_layout: Optional[Layout] = None
_path: Optional[str] = None


def _check_layout(layout: Layout, path: str) -> None:
    if layout.major != LAYOUT_MAJOR:
        raise RankstatLayoutError(
            f"{path} writes layout {layout.major}.{layout.minor} (hash {layout.hash:#018x}); this rankstat "
            f"package packs layout major {LAYOUT_MAJOR}: the layout major must match", ERR_INVALID_ARGUMENT)
    if KNOWN_LAYOUT_HASHES and layout.hash not in KNOWN_LAYOUT_HASHES and os.environ.get("RANKSTAT_ACCEPT_LAYOUT_HASH", "").lower() not in (
            f"{layout.hash:#x}", f"{layout.hash:x}", f"{layout.hash:#018x}"):
        known = ", ".join(f"{h:#018x}" for h in sorted(KNOWN_LAYOUT_HASHES))
        raise RankstatLayoutError(
            f"{path} writes layout {layout.major}.{layout.minor} with hash {layout.hash:#018x}, which this "
            f"rankstat package has not been checked against (known: {known}); update "
            f"rankstat/_native.py:KNOWN_LAYOUT_HASHES after checking, or set RANKSTAT_ACCEPT_LAYOUT_HASH",
            ERR_INVALID_ARGUMENT)
    if layout.priority_count_bytes != 16:
        raise RankstatLayoutError(f"{path}: per-priority entries are {layout.priority_count_bytes} bytes, not 16")
    for needed in ("report_kind", "priority_count", "groups", "routing_key_running_req_counts",
                   "routing_key_all_req_counts"):
        if needed not in layout.aux_fields:
            raise RankstatLayoutError(f"{path} does not describe the snapshot member {needed!r}")


def load_library() -> Tuple[ctypes.CDLL, Layout]:
    """Loads (once per process) and checks librankstat.so; raises RankstatLibraryError or
    RankstatLayoutError."""
    global _lib, _layout, _path
    with _lock:
        if _lib is not None and _layout is not None:
            return _lib, _layout
        errors = []
        for path in candidate_paths():
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                errors.append(f"{path}: {e}")
                if path == os.environ.get("RANKSTAT_LIBRARY"):
                    raise RankstatLibraryError(f"RANKSTAT_LIBRARY={path} cannot be loaded: {e}") from e
                continue
            _declare(lib)
            layout = _read_layout(lib)
            _check_layout(layout, path)
            _lib, _layout, _path = lib, layout, path
            return lib, layout
        for name in ("librankstat.so.0", "librankstat.so", ctypes.util.find_library("rankstat")):
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                errors.append(f"{name}: {e}")
                continue
            _declare(lib)
            layout = _read_layout(lib)
            _check_layout(layout, name)
            _lib, _layout, _path = lib, layout, name
            return lib, layout
        raise RankstatLibraryError(
            "librankstat.so not found (set RANKSTAT_LIBRARY to its path); tried: " + "; ".join(errors or ["nothing"]))


DECLARED_SERIES_FUNCTIONS = ("rankstat_register_series", "rankstat_gauge_add", "rankstat_series_value",
                             "rankstat_histogram_bucket", "rankstat_histogram_bucket_add",
                             "rankstat_histogram_add_sum")


def has_declared_series(lib: ctypes.CDLL) -> bool:
    """Whether the library offers the declared-series functions metric classes need."""
    return all(hasattr(lib, name) for name in DECLARED_SERIES_FUNCTIONS)


def raw_function(lib: ctypes.CDLL, name: str):
    """A second handle on a C function, returning int and without argtypes: call it with ctypes.c_void_p
    objects for pointers and Python ints for uint32 arguments only (no per-call conversion)."""
    fn = type(getattr(lib, name))((name, lib))
    fn.restype = ctypes.c_int
    return fn


def library_path() -> Optional[str]:
    """The path of the loaded library (None before the first load)."""
    return _path


def last_error(lib: ctypes.CDLL) -> str:
    text = lib.rankstat_last_error()
    return text.decode("utf-8", "replace") if text else ""
