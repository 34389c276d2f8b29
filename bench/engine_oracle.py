"""The engine oracle as the Python benchmarks use it: where it is, how its replay.py is run and read, and
the one adjustment Debian's prometheus_client needs to play the incumbent.

The oracle (../shared/reference/engine-oracle, or $RANKSTAT_ENGINE_ORACLE) holds traces of what SGLang's
and vLLM's own metric code did to prometheus_client objects, `replay.py`, which re-performs a trace
against a backend (with `--time N`: the hot methods' metric operations, timed), and `emul/`, stand-ins
at the engines' module paths. Nothing of it is copied here: the benchmarks run it.

Debian 12's prometheus_client (0.16) predates the gauge modes `mostrecent` and `livemostrecent` that
SGLang and vLLM ask for, and refuses them. `--setup engine_oracle:older_gauge_modes` makes its Gauge
write them as `all` and `liveall`: one value per process in the process's own file, the same write
(`mostrecent` adds a timestamp next to the value in 0.18+); the modes differ in how the scrape merges
the files. Only the prometheus_client side of a benchmark gets it.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
OLDER_MODES = {"mostrecent": "all", "livemostrecent": "liveall"}
PROM_SETUP = "engine_oracle:older_gauge_modes"


def oracle_dir():
    return os.environ.get("RANKSTAT_ENGINE_ORACLE") or os.path.join(os.path.dirname(ROOT), "shared", "reference",
                                                                    "engine-oracle")


def missing():
    """Why the oracle cannot be used here (None when it can)."""
    path = oracle_dir()
    if not os.path.isfile(os.path.join(path, "replay.py")):
        return f"the engine oracle is absent ({path}; set RANKSTAT_ENGINE_ORACLE)"
    return None


def prometheus_client_version(python=SYSTEM_PYTHON):
    """The version of the prometheus_client `python` imports (0.16 has no __version__)."""
    code = ("import importlib.metadata as m, os, prometheus_client as p; "
            "print(m.version('prometheus_client'), os.path.dirname(p.__file__))")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    if result.returncode != 0:
        return None, None
    version, _, path = result.stdout.strip().partition(" ")
    return version, path


def older_gauge_modes():
    """replay.py --setup for prometheus_client < 0.18: gauges asked for mostrecent/livemostrecent are
    written as all/liveall (see the module docstring). Nothing to do on a version that has the modes."""
    import prometheus_client
    gauge = prometheus_client.Gauge
    if "mostrecent" in getattr(gauge, "_MULTIPROC_MODES", ()) or getattr(gauge, "_older_modes", False):
        return
    init = gauge.__init__

    def __init__(self, *args, multiprocess_mode="all", **kwargs):
        init(self, *args, multiprocess_mode=OLDER_MODES.get(multiprocess_mode, multiprocess_mode), **kwargs)

    gauge.__init__ = __init__
    gauge._older_modes = True


def sglang_traces():
    folder = os.path.join(oracle_dir(), "sglang")
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".trace.json"))


def trace_facts(path):
    with open(path) as f:
        return json.load(f)["facts"]


def backend_args(side, trace):
    """replay.py's --backend/--setup for one side ("prom", "rankstat", "null") of an engine's trace."""
    facts = trace_facts(trace)
    if side == "prom":
        return ["--backend", "prom", "--setup", PROM_SETUP]
    module = {"rankstat": "rankstat." + facts["engine"], "null": "null_backend"}[side]
    if facts["engine"] == "vllm":
        return ["--backend", f"plugin:{module}:stat_logger"]
    out = ["--backend", f"plugin:{module}:stat_loggers"]
    if facts.get("resolve_collector_class") is None:  # SGLang before the hooks: the adapter swaps the classes
        out += ["--setup", f"{module}:install"]
    return out


def replay_time(trace, side, number, env, hot=()):
    """One `replay.py --trace T --time N` of one side, in its own process: {"times_us": {name: us},
    "failed_blocks": {block: outcome}, "returncode", "errors", "summary_line", "error", ...}."""
    argv = [SYSTEM_PYTHON, os.path.join(oracle_dir(), "replay.py"), "--trace", trace, "--quiet",
            "--time", str(number), *backend_args(side, trace)]
    for name in hot:
        argv += ["--hot", name]
    env = dict(env)
    # bench/ for engine_oracle's setup and null_backend; client/python (rankstat) only where it is used.
    path = [HERE] + ([os.path.join(ROOT, "client", "python")] if side == "rankstat" else [])
    env["PYTHONPATH"] = os.pathsep.join(path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    fd, summary_path = tempfile.mkstemp(prefix="bench-replay-", suffix=".json")
    os.close(fd)
    try:
        result = subprocess.run(argv + ["--json", summary_path], capture_output=True, text=True, timeout=1800,
                                env=env)
        try:
            with open(summary_path) as f:
                summary = json.load(f)
        except (OSError, ValueError):
            summary = {}
    finally:
        os.unlink(summary_path)
    times = {}
    for line in result.stderr.splitlines():
        m = re.match(r"ORACLE-TIME (\S+) ([0-9.eE+-]+) us", line)
        if m:
            times[m.group(1)] = float(m.group(2))
    out = {"times_us": times, "returncode": result.returncode, "errors": summary.get("errors", []),
           "issues": len(summary.get("issues", [])), "families": len(summary.get("family_list", [])),
           # what a plugin left in prometheus_client (on the prometheus_client side: everything)
           "family_list": summary.get("family_list", []) if side != "prom" else [],
           "summary_line": next((line for line in result.stderr.splitlines() if line.startswith("# REPLAY ")), ""),
           "blocks": len(summary.get("blocks", [])),
           "failed_blocks": {b["name"]: b["status"] for b in summary.get("blocks", []) if b["status"] != "ok"}}
    # rankstat's own warnings: a process whose metrics are disabled, or whose series were refused, times
    # no-op updates, which must not pass for a figure (NOOP_MARKERS; the benchmarks print n/a instead).
    out["noop_warnings"] = [line for line in result.stderr.splitlines()
                            if line.startswith("rankstat:") and any(m in line for m in NOOP_MARKERS)][:5]
    if not times:
        out["error"] = result.stderr.strip()[-1500:] or f"replay.py exited {result.returncode}"
    return out


NOOP_MARKERS = ("metrics disabled", "cannot register", "updates are dropped")


def hot_status(run, name, first_block=None):
    """Whether a timed hot call is a figure of the engine's recorded path: "ok", or why not. The timing
    re-runs the call's recorded operations without checking what the backend answers, so a call whose
    block failed in the replay (raised, or DIVERGED) would time a path the engine did not take."""
    if name not in run["times_us"]:
        return "not timed"
    if run.get("noop_warnings"):
        return "NOOP: " + run["noop_warnings"][0][:200]
    if not run["blocks"]:
        return "no replay summary"
    return run["failed_blocks"].get(first_block or name.partition("#")[0], "ok")
