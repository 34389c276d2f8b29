"""Patching an engine's module when the engine imports it, so that installing rankstat at interpreter
start (rankstat._autoload) costs no engine import.

`patch_module(name, patch)` runs `patch(module)` at once if `name` is already imported, and otherwise
right after the module's own code has run, before anyone else gets it. The loader the module would have
had stays in charge of everything else (source, file name, tracebacks)."""

from __future__ import annotations

import importlib.abc
import sys
from types import ModuleType
from typing import Callable, Dict

from . import _fork_locks

Patch = Callable[[ModuleType], object]


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: Patch):
        self._inner, self._patch = inner, patch

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):  # get_source, get_filename, ... for inspect and tracebacks
        return getattr(self._inner, name)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.patches: Dict[str, Patch] = {}

    def find_spec(self, fullname, path, target=None):
        patch = self.patches.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


_lock = _fork_locks.module_lock(globals(), "_lock")  # registering a patch; new in a forked child
_finder = _PatchOnImport()


def patch_module(name: str, patch: Patch) -> None:
    """patch(module `name`) now if it is imported, else when it is (each later import of a module
    removed from sys.modules too). Registering the same name again replaces its patch; idempotent."""
    with _lock:
        _finder.patches[name] = patch
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        module = sys.modules.get(name)
    if module is not None:
        patch(module)
