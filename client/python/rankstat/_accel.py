"""The per-call hot path of rankstat's metric classes: the CPython extension rankstat._fastpath when it can
be loaded, else its pure-Python twin rankstat._slowpath (same names, behaviour and messages).

    from rankstat._accel import Family, Value, bind, FAST

- bind(lib): `lib` is the ctypes CDLL of librankstat.so; call it once before the first update.
- Value(reporter_address, series_id, kind): one series (kind 1 counter, 2 gauge, 3 histogram, 4 summary)
  with inc / dec / set / observe; reporter_address 0 or None makes every update a no-op.
- Cell(child, index): one bucket (index >= 0) or the sum (index -1) of a histogram or summary series
  with a C inc(); subclass it for the reads (rankstat._child_values' `_Bucket`, `_Sum`).
- Family: subclass it; set `_labelnames` and `_children` in __init__ and define `_new_child(key)`, called
  by `labels()` on a miss with the tuple of str label values (register the series, store the child in
  `_children[key]`, return it; take a lock there if several threads may label the same family).

Where the extension comes from, in order (RANKSTAT_NO_FASTPATH=1 skips them all):
  1. rankstat/_fastpath*.so inside this package (a wheel or an install that ships it);
  2. the file named by $RANKSTAT_FASTPATH (CTest sets it to the extension of the build under test);
  3. rankstat/_fastpath*.so under any sys.path entry (PYTHONPATH=<build>/client/pyext);
  4. a build tree around the package: <repo>/build/*/client/pyext/rankstat/_fastpath*.so, newest first,
     sanitizer builds skipped (rankstat._find: the search _native.py finds librankstat.so with).
The series kinds (KIND_*) are rankstat._native's, re-exported.
FAST says which one is in use; FASTPATH_PATH where the extension came from, FASTPATH_ERROR why it is not
used.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import Any, List, Optional

from . import _find
from ._native import KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM, KIND_SUMMARY
_MODULE = __package__ + "._fastpath" if __package__ else "rankstat._fastpath"


def _disabled() -> bool:
    return os.environ.get("RANKSTAT_NO_FASTPATH", "") not in ("", "0")


def candidate_paths() -> List[str]:
    """Extension files _accel tries after the in-package import, in order (rankstat._find's search, the one
    the library's loader uses too)."""
    names = ["_fastpath" + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    return _find.candidate_paths("RANKSTAT_FASTPATH", under_sys_path=names,
                                 in_build=[os.path.join("client", "pyext", "rankstat", name) for name in names])


def _load_file(path: str):
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[_MODULE] = module
    return module


# What this package calls on the extension's Value beyond the updates; an extension built from an older
# tree lacks some (the fork re-binding), and is passed over for the next candidate or the Python twin.
_REQUIRED_VALUE_METHODS = ("_detach", "_bind", "_rebind")


def _checked(module):
    missing = ["Value." + m for m in _REQUIRED_VALUE_METHODS if not hasattr(module.Value, m)]
    if not hasattr(module, "Cell"):  # the histogram internals' C cells came later
        missing.append("Cell")
    if missing:
        raise ImportError(f"{getattr(module, '__file__', module)} lacks {', '.join(missing)}: "
                          f"it is older than this package")
    return module


def _load_fastpath():
    """(module, path, error): the extension, or None and the reasons it could not be loaded."""
    if _disabled():
        return None, None, "RANKSTAT_NO_FASTPATH is set"
    errors = []
    try:
        from . import _fastpath  # type: ignore[attr-defined]
        return _checked(_fastpath), getattr(_fastpath, "__file__", None), None
    except ImportError as e:
        errors.append(f"in the package: {e}")
    for path in candidate_paths():
        try:
            return _checked(_load_file(path)), path, None
        except (ImportError, OSError) as e:
            errors.append(f"{path}: {e}")
    return None, None, "; ".join(errors)


_impl, FASTPATH_PATH, FASTPATH_ERROR = _load_fastpath()
FAST: bool = _impl is not None
if _impl is None:
    from . import _slowpath as _impl  # noqa: F811

# The C types or their pure-Python twins, chosen at import: typed Any, since which one is known at run time only.
Family: Any = _impl.Family
Value: Any = _impl.Value
Cell: Any = _impl.Cell
bind = _impl.bind
bound = _impl.bound
implementation = _impl  # the module in use: rankstat._fastpath or rankstat._slowpath

__all__ = ["Cell", "FAST", "FASTPATH_ERROR", "FASTPATH_PATH", "Family", "KIND_COUNTER", "KIND_GAUGE", "KIND_HISTOGRAM",
           "KIND_SUMMARY", "Value", "bind", "bound", "implementation"]


def fastpath_module() -> Optional[object]:
    """The extension module if it can be loaded (whatever RANKSTAT_NO_FASTPATH says), else None; for tests and
    benchmarks that compare the two implementations in one process."""
    if _impl is not None and FAST:
        return _impl
    if _MODULE in sys.modules:
        return sys.modules[_MODULE]
    try:
        from . import _fastpath  # type: ignore[attr-defined]
        return _fastpath
    except ImportError:
        pass
    for path in candidate_paths():
        try:
            return _load_file(path)
        except (ImportError, OSError):
            continue
    return None
