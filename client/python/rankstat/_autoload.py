"""Interpreter start-up: rankstat under the engines' own metric code, switched on by one environment variable.

    RANKSTAT_SGLANG=1 python -m sglang.launch_server ...     # every SGLang process, spawned ones included
    RANKSTAT_VLLM=1 vllm serve ...                          # every vLLM V1 API-server process

Who runs this: the `rankstat-autoload.pth` start-up file the package installs next to itself (pip, the .deb),
or `sitecustomize.py` at the root of the source tree (`PYTHONPATH=client/python`). Both run one line that
costs a dictionary look-up when neither variable is set and import nothing else; only then do they import
this module and call run() (docs/sglang.md, docs/vllm.md).

What it installs costs no engine import either: an import hook that patches the engine's metric module when
the engine itself imports it (rankstat.sglang.install, rankstat.vllm.install). Every child process started by
spawn or forkserver starts an interpreter of its own and runs this again; a forked child inherits the hook.

An error here must never keep the engine from starting: it is printed once on stderr and the engine runs on
with its own prometheus_client metrics.
"""

from __future__ import annotations

import os
import sys

ENGINES = ("RANKSTAT_SGLANG", "RANKSTAT_VLLM")
_TRUE = ("1", "true", "yes", "on")


def enabled(variable: str) -> bool:
    """Whether the environment variable switches rankstat on (1, true, yes or on; any case)."""
    return os.environ.get(variable, "").strip().lower() in _TRUE


def run() -> None:
    """Installs rankstat for every engine whose variable is set; idempotent."""
    for variable in ENGINES:
        if not enabled(variable):
            continue
        try:
            if variable == "RANKSTAT_SGLANG":
                from . import sglang
                sglang.install()
            else:
                from . import vllm
                vllm.install()
        except Exception as e:  # noqa: BLE001 - the engine must start whatever happens here
            print(f"rankstat: {variable} is set but rankstat could not be installed ({type(e).__name__}: {e}); "
                  f"the engine keeps its own prometheus_client metrics", file=sys.stderr)

