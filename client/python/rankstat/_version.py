"""The package's version, from the project's one version source: the VERSION file at the repository's
root, which CMake reads for the daemon, the CLI and the library. An installed package carries a copy of it
beside this module (setup.py, the CMake install and the Debian package put it there); a source tree on
PYTHONPATH reads the repository's own."""

import os

_HERE = os.path.dirname(os.path.realpath(__file__))


def _read() -> str:
    for path in (os.path.join(_HERE, "VERSION"), os.path.join(_HERE, "..", "..", "..", "VERSION")):
        try:
            with open(path) as f:
                return f.readline().strip()
        except OSError:
            continue
    return "0+unknown"


__version__ = _read()
