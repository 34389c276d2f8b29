"""Module-level locks a forked child gets new: only the forking thread exists in the child, so a lock
another thread held at the fork would stay held there forever.

    _lock = _fork_locks.module_lock(globals(), "_lock")

The module's global is replaced in the child (a `with _lock:` in that module reads the new one); code that
holds the lock object itself across a fork keeps the parent's. Modules whose fork handling does more than
renew a lock (rankstat.backend, rankstat.reporter, rankstat._class_swap) register their own handlers.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict


def module_lock(namespace: Dict[str, Any], name: str, factory: Callable[[], Any] = threading.Lock) -> Any:
    """`factory()` stored as namespace[name] now and again, a new one, in every forked child; returns the
    first one (assign it to the same name, so readers and type checkers see the global)."""

    def renew() -> None:
        namespace[name] = factory()

    renew()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=renew)
    return namespace[name]
