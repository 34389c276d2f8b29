#!/usr/bin/env python3
"""Per-call cost of metric updates from Python: rankstat next to prometheus_client multiprocess mode.

    bench/bench_python_calls.py [--build build/release] [--quick] [--json FILE] [--no-oracle]

Part 1, the calls SGLang makes per request and per streamed chunk, timed with timeit (best of several
repeats; the median is kept in the JSON), each implementation in its own subprocess (a process holds one
prometheus_client, and multiprocess mode needs PROMETHEUS_MULTIPROC_DIR before the import):
  child inc (counter), child set (gauge), child observe (histogram, 30 buckets like SGLang's inter-token
  latency), and metric.labels(**kw).observe(v) with the tokenizer's labels (model_name, engine_type,
  is_streaming), for
  (a) prometheus_client 0.25.0 (the oracle's vendored copy, ../shared/reference/sglang-oracle/vendor),
  (b) Debian's prometheus_client (0.16, /usr/lib/python3/dist-packages),
  (c) rankstat with the CPython extension rankstat._fastpath,
  (d) rankstat's pure-Python fallback (RANKSTAT_NO_FASTPATH=1).
  rankstat is measured through rankstat.metrics (Counter/Gauge/Histogram) when that module imports,
  else through the rankstat._accel types directly.
Part 2, SGLang's real collector code: the oracle driver's --time N (drive.py runs the tree's real
metrics_collector.py) with --backend prom and with the rankstat plugin, per tree, ratios per hot method.

Target (issue 11 item 6): rankstat >= 5x cheaper per call than both prometheus_client versions, and for
log_stats and observe_one_finished_request. The last line of stdout is one JSON object (run_bench.py
reads it). Uses only the Python standard library.
"""

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
ORACLE = os.path.join(SHARED, "reference", "sglang-oracle")
VENDORED = os.path.join(ORACLE, "vendor", "prometheus_client-0.25.0")
SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
SYSTEM_DIST = "/usr/lib/python3/dist-packages"

# SGLang's tokenizer labels for a request-level histogram (stream_labels in observe_one_finished_request).
LABELS = {"model_name": "Qwen/Qwen3-8B", "engine_type": "unified", "is_streaming": "true"}
# 30 finite bounds, the shape of SGLang's inter-token-latency buckets.
BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
           0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0]
OPS = [
    ("inc", "counter child inc()", "c.inc()"),
    ("set", "gauge child set(v)", "g.set(3.0)"),
    ("observe", "histogram child observe(v) (30 buckets)", "h.observe(0.05)"),
    ("labels_observe", "histogram labels(**kw).observe(v) (model_name, engine_type, is_streaming)",
     "hf.labels(**kw).observe(0.05)"),
]
IMPLEMENTATIONS = [
    ("prom-0.25.0", "prometheus_client 0.25.0 (vendored), multiprocess"),
    ("prom-system", "prometheus_client (Debian), multiprocess"),
    ("rankstat-fast", "rankstat, C extension"),
    ("rankstat-slow", "rankstat, ctypes fallback"),
]
HOT_METHODS = ["scheduler.log_stats", "scheduler.increment_realtime_tokens", "tokenizer.observe_one_finished_request",
               "tokenizer.observe_time_to_first_token", "tokenizer.observe_inter_token_latency"]
TARGET_METHODS = ("scheduler.log_stats", "tokenizer.observe_one_finished_request")
TARGET = 5.0


def log(message):
    print(f"[bench_python_calls {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- workers


def time_ops(namespace, number, repeat):
    import timeit
    out = {}
    for key, _, stmt in OPS:
        runs = [t / number * 1e6 for t in timeit.repeat(stmt, globals=namespace, number=number, repeat=repeat)]
        out[key] = {"best_us": min(runs), "median_us": statistics.median(runs)}
    return out


def worker_prometheus(which, number, repeat):
    mpdir = tempfile.mkdtemp(prefix="bench-calls-mp-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = mpdir
    try:
        if which == "prom-0.25.0":
            sys.path.insert(0, VENDORED)
        import prometheus_client
        from prometheus_client import Counter, Gauge, Histogram
        version = getattr(prometheus_client, "__version__", None)
        if version is None:
            try:
                from importlib.metadata import version as dist_version
                version = dist_version("prometheus_client")
            except Exception:
                version = "unknown"
        if which == "prom-0.25.0":
            version = "0.25.0"
        names = list(LABELS)
        c = Counter("bench_requests_total", "requests", ["model_name"]).labels("m")
        # SGLang's gauges are mostrecent; Debian's 0.16 predates that mode (all: the default).
        mode = "mostrecent" if which == "prom-0.25.0" else "all"
        g = Gauge("bench_queue", "queue", ["model_name"], multiprocess_mode=mode).labels("m")
        hf = Histogram("bench_latency_seconds", "latency", names, buckets=BUCKETS)
        h = hf.labels(**LABELS)
        result = time_ops({"c": c, "g": g, "h": h, "hf": hf, "kw": dict(LABELS)}, number, repeat)
        return {"implementation": which, "version": version, "path": os.path.dirname(prometheus_client.__file__),
                "gauge_mode": mode, "ops": result}
    finally:
        shutil.rmtree(mpdir, ignore_errors=True)


def worker_rankstat(which, number, repeat):
    shm = tempfile.mkdtemp(prefix="bench-calls-shm-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    os.environ["RANKSTAT_SHM_DIR"] = shm
    os.environ.setdefault("RANKSTAT_INSTANCE", "benchcalls")
    try:
        import rankstat
        from rankstat import _accel
        lib, _ = rankstat.load_library()
        through = "rankstat.metrics"
        try:
            from rankstat import metrics
        except Exception as e:  # the metric classes not there (yet): measure the _accel types directly
            metrics = None
            log(f"rankstat.metrics unavailable ({type(e).__name__}: {e}); measuring rankstat._accel directly")
        if metrics is not None:
            names = list(LABELS)
            c = metrics.Counter("bench_requests_total", "requests", ["model_name"]).labels("m")
            g = metrics.Gauge("bench_queue", "queue", ["model_name"], multiprocess_mode="mostrecent").labels("m")
            hf = metrics.Histogram("bench_latency_seconds", "latency", names, buckets=BUCKETS)
            h = hf.labels(**LABELS)
            reporter = None
        else:
            through = "rankstat._accel"
            from rankstat.reporter import Reporter
            _accel.bind(lib)
            reporter = Reporter(role="other", instance="benchcalls", strict=True)
            kinds = {1: "counter", 2: "gauge", 3: "histogram"}

            class Family(_accel.Family):
                def __init__(self, name, labelnames, kind):
                    self.name, self.kind = name, kind
                    self._labelnames = tuple(labelnames)
                    self._children = {}

                def _new_child(self, key):
                    sid = reporter.register(kinds[self.kind], self.name, list(zip(self._labelnames, key)),
                                            mode="mostrecent", buckets=BUCKETS)
                    child = _accel.Value(reporter._handle, sid, self.kind)
                    self._children[key] = child
                    return child

            c = Family("bench_requests_total", ["model_name"], 1).labels("m")
            g = Family("bench_queue", ["model_name"], 2).labels("m")
            hf = Family("bench_latency_seconds", list(LABELS), 3)
            h = hf.labels(**LABELS)
        if _accel.FAST != (which == "rankstat-fast"):
            raise RuntimeError(f"{which}: rankstat._accel.FAST is {_accel.FAST} ({_accel.FASTPATH_ERROR})")
        if getattr(c, "_reporter_address", 1) == 0:
            raise RuntimeError(f"{which}: the series were not registered (no segment): the figures would be no-ops")
        result = time_ops({"c": c, "g": g, "h": h, "hf": hf, "kw": dict(LABELS)}, number, repeat)
        if reporter is not None:
            reporter.close()
        return {"implementation": which, "through": through, "fast": _accel.FAST,
                "extension": _accel.FASTPATH_PATH, "library": rankstat.library_path(), "ops": result}
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def run_worker(args):
    if args.worker.startswith("prom-"):
        out = worker_prometheus(args.worker, args.number, args.repeat)
    else:
        out = worker_rankstat(args.worker, args.number, args.repeat)
    print(json.dumps(out))
    return 0


# ------------------------------------------------------------------------------------------- driver


def library_env(build):
    """Environment for rankstat subprocesses: the package from this tree, the build's library and extension."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "client", "python") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if build:
        library = os.path.join(build, "client", "librankstat.so")
        if os.path.exists(library):
            env["RANKSTAT_LIBRARY"] = library
        found = sorted(glob.glob(os.path.join(build, "client", "pyext", "rankstat", "_fastpath*.so")))
        if found:
            env["RANKSTAT_FASTPATH"] = found[0]
    return env


def measure(which, args, env):
    argv = [SYSTEM_PYTHON, os.path.abspath(__file__), "--worker", which, "--number", str(args.number), "--repeat",
            str(args.repeat)]
    env = dict(env)
    env.pop("RANKSTAT_NO_FASTPATH", None)
    if which == "rankstat-slow":
        env["RANKSTAT_NO_FASTPATH"] = "1"
    if which.startswith("prom-"):
        env.pop("PYTHONPATH", None)  # the system prometheus_client must not be shadowed
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    if result.returncode != 0:
        return {"implementation": which, "error": (result.stderr.strip() or result.stdout.strip())[-1500:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def oracle_trees():
    return sorted(glob.glob(os.path.join(ORACLE, "trees", "*")))


def tree_has_hooks(tree):
    for path in glob.glob(os.path.join(tree, "python", "**", "metrics_collector.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            if "_counter_cls" in f.read():
                return True
    return False


def run_oracle(tree, backend_args, env, number):
    argv = [SYSTEM_PYTHON, os.path.join(ORACLE, "drive.py"), "--tree", tree, "--quiet", "--time", str(number),
            *backend_args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    times = {}
    for line in result.stderr.splitlines():
        m = re.match(r"ORACLE-TIME (\S+) ([0-9.eE+-]+) us", line)
        if m:
            times[m.group(1)] = float(m.group(2))
    summary = next((line for line in result.stderr.splitlines() if line.startswith("# ORACLE ")), "")
    out = {"times_us": times, "returncode": result.returncode, "summary": summary}
    if result.returncode != 0 or not times:
        out["error"] = result.stderr.strip()[-1500:]
    return out


def oracle_part(args, env):
    """SGLang's real collector methods, prometheus_client vs the rankstat plugin, per tree."""
    if not os.path.exists(os.path.join(ORACLE, "drive.py")):
        return {"available": False, "reason": f"the SGLang oracle is absent ({os.path.relpath(ORACLE, ROOT)})"}
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import rankstat.sglang as s; s.stat_loggers; s.install"],
                           capture_output=True, text=True, timeout=120, env=env)
    if probe.returncode != 0:
        return {"available": False, "reason": "rankstat.sglang.stat_loggers is not available: " +
                (probe.stderr.strip().splitlines() or ["?"])[-1]}
    trees = {}
    for tree in oracle_trees():
        name = os.path.basename(tree)
        hooks = tree_has_hooks(tree)
        plugin = ["--backend", "plugin:rankstat.sglang:stat_loggers"]
        if not hooks:  # SGLang before the stat-logger hooks: the adapter swaps the metric classes
            plugin += ["--setup", "rankstat.sglang:install"]
        shm = tempfile.mkdtemp(prefix="bench-calls-oracle-",
                               dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        try:
            log(f"oracle {name}: --backend prom --time {args.oracle_number}")
            prom_env = dict(env)
            prom_env.pop("PYTHONPATH", None)
            prom = run_oracle(tree, ["--backend", "prom"], prom_env, args.oracle_number)
            log(f"oracle {name}: {' '.join(plugin)} --time {args.oracle_number}")
            ours = run_oracle(tree, plugin, dict(env, RANKSTAT_SHM_DIR=shm, RANKSTAT_INSTANCE="benchoracle"),
                              args.oracle_number)
        finally:
            shutil.rmtree(shm, ignore_errors=True)
        trees[name] = {"hooks": hooks, "prom": prom, "rankstat": ours, "plugin_args": plugin}
    return {"available": True, "number": args.oracle_number, "trees": trees}


def fmt(value):
    return "-" if value is None else f"{value:.3g}"


def table(results):
    by = {r["implementation"]: r for r in results["implementations"]}
    lines = []
    header = ["call, best us per call"] + [label for key, label in IMPLEMENTATIONS] + [
        "fast vs 0.25.0", "fast vs Debian", f">= {TARGET:g}x", "fallback vs 0.25.0"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    all_met = True
    for key, label, _ in OPS:
        row = [label]
        best = {}
        for impl, _ in IMPLEMENTATIONS:
            r = by.get(impl, {})
            if "ops" in r:
                best[impl] = r["ops"][key]["best_us"]
                row.append(fmt(best[impl]))
            else:
                row.append("n/a")
        fast = best.get("rankstat-fast")
        ratios = []
        for anchor in ("prom-0.25.0", "prom-system"):
            if fast and best.get(anchor):
                ratios.append(best[anchor] / fast)
                row.append(f"{best[anchor] / fast:.1f}x")
            else:
                row.append("n/a")
        met = bool(ratios) and fast is not None and all(r >= TARGET for r in ratios)
        all_met = all_met and met
        row.append("yes" if met else "**no**")
        slow = best.get("rankstat-slow")
        row.append(f"{best['prom-0.25.0'] / slow:.1f}x" if slow and best.get("prom-0.25.0") else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    notes = []
    for impl, label in IMPLEMENTATIONS:
        r = by.get(impl, {})
        if "error" in r:
            notes.append(f"{label}: not measured: {r['error'].splitlines()[-1] if r['error'] else '?'}")
        elif impl.startswith("prom-"):
            notes.append(f"{label}: version {r.get('version')}, gauge mode {r.get('gauge_mode')}")
        else:
            notes.append(f"{label}: through {r.get('through')}")
    oracle = results.get("oracle") or {}
    lines.append("")
    if not oracle.get("available"):
        lines.append(f"SGLang's real collector methods (oracle --time): not available: {oracle.get('reason', 'skipped')}")
    else:
        lines.append(f"SGLang's real collector methods (oracle drive.py --time {oracle['number']}), best us per call:")
        lines.append("")
        lines.append("| tree | method | prometheus_client 0.25.0 | rankstat | ratio | target | met |")
        lines.append("|---|---|---|---|---|---|---|")
        for name, t in oracle["trees"].items():
            prom, ours = t["prom"]["times_us"], t["rankstat"]["times_us"]
            if t["rankstat"].get("error") and not ours:
                lines.append(f"| {name} | (rankstat plugin failed: "
                             f"{t['rankstat']['error'].splitlines()[-1][:120] if t['rankstat']['error'] else '?'}) "
                             f"| - | - | - | - | - |")
                all_met = False
                continue
            for method in HOT_METHODS:
                if method not in prom and method not in ours:
                    continue
                p, o = prom.get(method), ours.get(method)
                ratio = p / o if p and o else None
                target = method in TARGET_METHODS
                met = ratio is not None and ratio >= TARGET
                if target:
                    all_met = all_met and met
                lines.append(f"| {name} | {method} | {fmt(p)} | {fmt(o)} | "
                             f"{f'{ratio:.1f}x' if ratio else 'n/a'} | {f'>= {TARGET:g}x' if target else '-'} | "
                             f"{('yes' if met else '**no**') if target else '-'} |")
        lines.append("")
        for name, t in oracle["trees"].items():
            summary = t["rankstat"].get("summary", "")
            leaked = re.search(r"families=(\d+)", summary)
            failed = re.search(r"non_ok_calls=(\{.*\})", summary)
            lines.append(f"{name}, rankstat run: {leaked.group(1) if leaked else '?'} families still in prometheus_client "
                         f"(timed as part of the rankstat figures), failed calls {failed.group(1) if failed else '?'}")
    results["all_targets_met"] = all_met
    return "\n".join(lines), notes


def run_bench_rows(results):
    """Rows for bench/run_bench.py's table (| measurement | rankstat | anchor / limit | ratio | target | met |)."""
    by = {r["implementation"]: r for r in results.get("implementations", [])}
    rows = []

    def best(impl, key):
        r = by.get(impl) or {}
        return r["ops"][key]["best_us"] if "ops" in r else None

    for key, label, _ in OPS:
        fast, slow = best("rankstat-fast", key), best("rankstat-slow", key)
        anchors = [(name, best(impl, key)) for impl, name in (("prom-0.25.0", "0.25.0"), ("prom-system", "Debian"))]
        anchors = [(name, value) for name, value in anchors if value]
        if fast is None or not anchors:
            rows.append(f"| Python per call (bench_python_calls.py): {label}, us | n/a | n/a | - | >= {TARGET:g}x | "
                        f"**no** |")
            continue
        ratios = [value / fast for _, value in anchors]
        rows.append(f"| Python per call (bench_python_calls.py): {label}, us (ctypes fallback {fmt(slow)}) | "
                    f"{fmt(fast)} | prometheus_client {' / '.join(f'{n} {fmt(v)}' for n, v in anchors)} | "
                    f"{' / '.join(f'{r:.1f}x' for r in ratios)} faster | >= {TARGET:g}x | "
                    f"{'yes' if min(ratios) >= TARGET else '**no**'} |")
    oracle = results.get("oracle") or {}
    if not oracle.get("available"):
        rows.append(f"| SGLang's real log_stats / observe_one_finished_request (oracle --time) | not available: "
                    f"{oracle.get('reason', '-')} | - | - | >= {TARGET:g}x | pending |")
        return rows
    for name, t in oracle["trees"].items():
        prom, ours = t["prom"]["times_us"], t["rankstat"]["times_us"]
        for method in TARGET_METHODS:
            p, o = prom.get(method), ours.get(method)
            ratio = p / o if p and o else None
            rows.append(f"| SGLang {name} real {method} (oracle --time {oracle['number']}), us | {fmt(o)} | "
                        f"prometheus_client 0.25.0 {fmt(p)} | {f'{ratio:.1f}x faster' if ratio else 'n/a'} | "
                        f">= {TARGET:g}x | {'yes' if ratio is not None and ratio >= TARGET else '**no**'} |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", help="build tree whose librankstat.so and extension to use (default: what the "
                                        "package finds: the newest build)")
    parser.add_argument("--quick", action="store_true", help="tiny iteration counts (a smoke run)")
    parser.add_argument("--json", help="also write the raw figures to this file")
    parser.add_argument("--no-oracle", action="store_true", help="skip part 2 (SGLang's real collectors)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--number", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(args)
    if args.quick:
        args.number, args.repeat, args.oracle_number = 2000, 3, 50
    else:
        args.number, args.repeat, args.oracle_number = 200000, 7, 2000
    build = os.path.abspath(args.build) if args.build else None
    env = library_env(build)
    started = time.time()
    results = {"quick": args.quick, "number": args.number, "repeat": args.repeat, "implementations": []}
    for impl, label in IMPLEMENTATIONS:
        if impl == "prom-0.25.0" and not os.path.isdir(VENDORED):
            log(f"skipping {label}: {os.path.relpath(VENDORED, ROOT)} is absent")
            results["implementations"].append({"implementation": impl, "error": "the vendored copy is absent"})
            continue
        log(f"{label}: {args.number} calls x {args.repeat} repeats per operation")
        results["implementations"].append(measure(impl, args, env))
    results["oracle"] = {"available": False, "reason": "--no-oracle"} if args.no_oracle else oracle_part(args, env)
    results["seconds"] = time.time() - started
    text, notes = table(results)
    print(f"Python per-call cost: rankstat vs prometheus_client multiprocess mode "
          f"({'quick smoke run' if args.quick else 'full run'}, {results['seconds']:.0f} s, "
          f"{args.number} calls x {args.repeat} repeats, best of the repeats; {os.path.basename(SYSTEM_PYTHON)} "
          f"{sys.version.split()[0]})")
    for note in notes:
        print(f"  {note}")
    print()
    print(text)
    print()
    print(f"all targets met: {'yes' if results['all_targets_met'] else 'no'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
