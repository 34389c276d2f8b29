"""Where the package looks for its native parts: librankstat.so (rankstat._native) and the extension
rankstat._fastpath (rankstat._accel). One search, so both find files in the same places in the same order:

  1. the file named by an environment variable (RANKSTAT_LIBRARY, RANKSTAT_FASTPATH);
  2. files inside this package (a wheel or an install that ships them);
  3. rankstat/<file> under the sys.path entries (the extension only: PYTHONPATH=<build>/client/pyext);
  4. a build tree around the package, <repo>/build/<preset>/<file>, newest first. Sanitizer presets
     (asan-ubsan, tsan) are skipped: their files cannot be loaded into a plain interpreter, whose
     sanitizer runtime would have to come first; name one through the variable instead.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import List, Sequence

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# <repo>/client/python/rankstat -> <repo>
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(PACKAGE_DIR)))


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:  # removed between the glob and the sort (a build running now)
        return 0.0


def in_build_trees(patterns: Sequence[str]) -> List[str]:
    """Files matching `patterns` (relative to a build directory) in <repo>/build/*, newest first, sanitizer
    builds skipped."""
    found: List[str] = []
    for build in glob.glob(os.path.join(REPO_DIR, "build", "*")):
        if "san" in os.path.basename(build):
            continue
        for pattern in patterns:
            found.extend(glob.glob(os.path.join(build, pattern)))
    found.sort(key=_mtime, reverse=True)
    return found


def candidate_paths(variable: str, *, in_package: Sequence[str] = (), under_sys_path: Sequence[str] = (),
                    in_build: Sequence[str] = ()) -> List[str]:
    """The files to try, in the order of the module docstring, each once. Patterns are glob patterns:
    `in_package` relative to this package, `under_sys_path` relative to <entry>/rankstat, `in_build` relative
    to a build directory."""
    out: List[str] = []
    named = os.environ.get(variable)
    if named:
        out.append(named)
    for pattern in in_package:
        out.extend(sorted(glob.glob(os.path.join(PACKAGE_DIR, pattern))))
    if under_sys_path:
        for entry in sys.path:
            directory = os.path.join(os.path.abspath(entry or "."), "rankstat")
            if directory == PACKAGE_DIR:  # the package itself: `in_package` covers it
                continue
            for pattern in under_sys_path:
                out.extend(glob.glob(os.path.join(directory, pattern)))
    out.extend(in_build_trees(in_build))
    unique: List[str] = []
    for path in out:
        if path not in unique:
            unique.append(path)
    return unique
