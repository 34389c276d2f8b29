"""How rankstat gets under an engine's own metric code, shared by rankstat.sglang and rankstat.vllm: the
engine keeps building and updating its metrics; rankstat only changes which classes it builds them from.

* METRIC_CLASSES: prometheus_client's class name -> rankstat's class, the one table both adapters use.
* prometheus_classes_swapped(): inside the block, prometheus_client's module attributes are rankstat's
  classes (for engine code that looks them up at call time). Reentrant, under one lock; a fork in the
  middle of a swap leaves the child with prometheus_client's own classes and a fresh lock.
* constructing_in_segment(): wraps an engine constructor so it first names the process's segment (role and
  identity labels), then runs with the classes swapped.
* mark_wrapper() / is_wrapper(): wrappers remember what they wrap, so patching twice is a no-op."""

from __future__ import annotations

import functools
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from . import backend
from .metrics import Counter, Gauge, Histogram, Summary

METRIC_CLASSES: Dict[str, type] = {"Counter": Counter, "Gauge": Gauge, "Histogram": Histogram, "Summary": Summary}
# The engines' metric-class hook attributes ("_counter_cls", ...) and the class each takes.
CLASS_HOOKS: Dict[str, type] = {"_" + name.lower() + "_cls": cls for name, cls in METRIC_CLASSES.items()}

_WRAPS = "__rankstat_wraps__"
_swap_lock = threading.RLock()
_swap_originals: Dict[str, Any] = {}  # prometheus_client's own classes while the outermost swap lasts


@contextmanager
def prometheus_classes_swapped() -> Iterator[None]:
    """prometheus_client's Counter/Gauge/Histogram/Summary are rankstat's inside the block. Other threads
    building prometheus_client metrics meanwhile get rankstat's too."""
    import prometheus_client
    with _swap_lock:
        saved = {name: getattr(prometheus_client, name) for name in METRIC_CLASSES}
        outermost = not _swap_originals
        if outermost:
            _swap_originals.update(saved)
        try:
            for name, cls in METRIC_CLASSES.items():
                setattr(prometheus_client, name, cls)
            yield
        finally:
            for name, cls in saved.items():
                setattr(prometheus_client, name, cls)
            if outermost:
                _swap_originals.clear()


def _after_fork_in_child() -> None:
    # Only the forking thread exists in the child. If it holds the swap (or nobody does), it restores the
    # classes itself; if another thread was inside a swap, it never will: prometheus_client gets its own
    # classes back and the lock is new, or the child's first swap would hang.
    global _swap_lock
    if _swap_lock.acquire(blocking=False):
        _swap_lock.release()
        return
    module = sys.modules.get("prometheus_client")
    if module is not None:
        for name, cls in _swap_originals.items():
            setattr(module, name, cls)
    _swap_originals.clear()
    _swap_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def mark_wrapper(wrapper: Callable, original: Callable) -> Callable:
    setattr(wrapper, _WRAPS, original)
    return wrapper


def is_wrapper(fn: Any) -> bool:
    return hasattr(fn, _WRAPS)


LabelsOf = Callable[[Callable, Tuple[Any, ...], Mapping[str, Any]], Mapping[str, Any]]


def constructing_in_segment(init: Callable, role: str, labels_of: Optional[LabelsOf] = None) -> Callable:
    """`init` (an engine collector's or logger's constructor) naming the process's segment first — `role`,
    and the identity labels `labels_of(init, args, kwargs)` finds in its arguments — then running with
    prometheus_client's classes swapped for rankstat's."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        labels = labels_of(init, args, kwargs) if labels_of is not None else {}
        backend.segment().hint_identity(role, labels)
        with prometheus_classes_swapped():
            init(self, *args, **kwargs)
    return mark_wrapper(__init__, init)


def swapping(method: Callable) -> Callable:
    """`method` running with prometheus_client's classes swapped for rankstat's."""
    @functools.wraps(method)
    def swapped(self, *args, **kwargs):
        with prometheus_classes_swapped():
            return method(self, *args, **kwargs)
    return mark_wrapper(swapped, method)
