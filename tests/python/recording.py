"""Test support: a Reporter that records what would reach the C ABI instead of writing a segment.

It keeps the real packing code (SnapshotPacker, UpdateBatch) and decodes the bytes they hand to the C
entry points, using the library's own field table, so the tests see exactly what would be appended."""

import ctypes
import struct
import threading
from typing import Any, Dict, List, Tuple

import rankstat
from rankstat import _native as n
from rankstat.reporter import Reporter


class RecordingReporter(Reporter):
    def __init__(self, identity_labels: Dict[str, str], attention=(0, 0, 0)):
        # No segment: only what the packers and collectors use.
        self._lib, self._layout = rankstat.load_library()
        self._handle = 1
        self._h = ctypes.c_void_p(1)
        self._lock = threading.Lock()
        self.error = ""
        self.role = "scheduler"
        self.identity_labels = dict(identity_labels)
        self._series = {}
        self._families = {}
        self.attention = attention
        self.registered: List[Tuple[int, str, str, Tuple, Tuple, str]] = []
        self.ops: List[Tuple] = []
        self.reports: List[Tuple[bytes, bytes]] = []
        self._c_add = lambda h, i, v: self.ops.append(("add", i, v))
        self._c_set = lambda h, i, v: self.ops.append(("set", i, v))
        self._c_observe = lambda h, i, v: self.ops.append(("observe", i, v, 1, v))
        self._c_observe_many = lambda h, i, v, c, s: self.ops.append(("observe", i, v, c, s))
        self._c_apply = self._apply
        self._c_report = self._record_report
        self.apply_calls = 0

    def close(self):
        self._handle = None  # there is no segment behind the fake handle

    def register(self, kind, family, labels=(), *, mode="mostrecent", buckets=(), identity_labels=True):
        pairs = tuple((str(k), str(v)) for k, v in labels)
        key = (kind, family, pairs, mode if kind == "gauge" else "", tuple(buckets), identity_labels)
        if key in self._series:
            return self._series[key]
        series = len(self.registered)
        self.registered.append((series, kind, family, pairs, tuple(float(b) for b in buckets), mode))
        self._series[key] = series
        return series

    def _apply(self, handle, address, count, applied):
        self.apply_calls += 1
        raw = ctypes.string_at(address.value, 32 * count)
        for i in range(count):
            op, series, value, samples, sum_delta = struct.unpack_from("<IIdQd", raw, 32 * i)
            if op == n.OP_COUNTER_ADD:
                self.ops.append(("add", series, value))
            elif op == n.OP_GAUGE_SET:
                self.ops.append(("set", series, value))
            else:
                self.ops.append(("observe", series, value, samples, sum_delta))
        return n.OK

    def _record_report(self, handle, address, size, entries_address, entries):
        self.reports.append((ctypes.string_at(address.value, size), ctypes.string_at(entries_address.value, 16 * entries)))
        return n.OK

    # --- reading back ---

    def series(self, family: str, **labels: str) -> int:
        wanted = tuple(sorted(labels.items()))
        found = [s for s in self.registered if s[2] == family and tuple(sorted(s[3])) == wanted]
        if len(found) != 1:
            raise AssertionError(f"{family}{labels}: {len(found)} matching series in {self.registered}")
        return found[0][0]

    def families(self) -> List[str]:
        return sorted({s[2] for s in self.registered})

    def ops_of(self, series: int) -> List[Tuple]:
        return [op for op in self.ops if op[1] == series]

    def total(self, family: str, **labels: str) -> float:
        return sum(op[2] for op in self.ops_of(self.series(family, **labels)) if op[0] == "add")

    def field(self, report: int, name: str) -> Any:
        snapshot, _ = self.reports[report]
        for f in self._layout.scalar_fields:
            if f.name == name:
                return struct.unpack_from("<" + f.kind, snapshot, f.offset)[0]
        aux = self._layout.aux_fields[name]
        return struct.unpack_from(f"<{aux.count}{aux.kind}", snapshot, aux.offset) if aux.count > 1 else \
            struct.unpack_from("<" + aux.kind, snapshot, aux.offset)[0]

    def entries(self, report: int) -> List[Tuple[int, Any, int]]:
        """(queue, priority or None, count) per per-priority entry."""
        _, raw = self.reports[report]
        out = []
        for i in range(len(raw) // 16):
            priority, queue, flags, _, count = struct.unpack_from("<iBBHq", raw, 16 * i)
            out.append((queue, None if flags & n.PRIORITY_IS_NONE else priority, count))
        return out


SCHEDULER_LABELS = {"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0",
                    "priority": "", "dp_rank": "0"}
TOKENIZER_LABELS = {"model_name": "m", "engine_type": "unified", "priority": "", "tenant": ""}
