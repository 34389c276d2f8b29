"""Packing into reused buffers, for a rankstat.Reporter: a batch of series updates applied with one C call
(UpdateBatch), and scheduler snapshots packed from the library's own field table (SnapshotPacker).

Cost model: a scheduler snapshot is one struct.pack_into into a reused buffer plus one C call; a batch of
series updates is one pack per update plus one C call. Both write through their Reporter under its lock
(and the GIL), and neither raises on a closed one.
"""

from __future__ import annotations

import bisect
import ctypes
import struct
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _native as n

if TYPE_CHECKING:
    from .reporter import Reporter

_UPDATE = struct.Struct("<IIdQd")  # rankstat_update: op, id, value, count, sum_delta
_ENTRY = struct.Struct("<iBBHq")   # per-priority entry: priority, queue, flags, reserved, count
NO_ID = 0xFFFFFFFF  # the id Reporter.register gives a series it could not register: updates skip it


class UpdateBatch:
    """Series updates packed into a reused buffer and applied with one C call (rankstat_apply_updates).
    Not thread-safe: one batch per thread. flush() is called automatically when the buffer is full."""

    __slots__ = ("_apply", "_capacity", "_buffer", "_address", "_count", "_pack")

    def __init__(self, reporter: "Reporter", capacity: int = 64):
        self._apply = reporter.apply_updates
        self._capacity = capacity
        self._buffer = ctypes.create_string_buffer(_UPDATE.size * capacity)
        self._address = ctypes.c_void_p(ctypes.addressof(self._buffer))
        self._count = 0
        self._pack = _UPDATE.pack_into

    def _push(self, op: int, series: int, value: float, count: int, sum_delta: float) -> None:
        if series == NO_ID:
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
        if count:
            self._apply(self._address, count)

    def __enter__(self) -> "UpdateBatch":
        return self

    def __exit__(self, *exc) -> None:
        self.flush()


class SnapshotPacker:
    """Packs scheduler snapshots (SGLang's SchedulerStats fields) into a reused buffer: one
    struct.pack_into and one C call per report. The struct format is built once from the library's own
    field table, so no offset is restated here."""

    def __init__(self, reporter: "Reporter"):
        self._report = reporter.report_scheduler
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
        return self._report(self._address, len(self._buffer), self._entries_address, entries)

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


__all__ = ["SnapshotPacker", "UpdateBatch"]
