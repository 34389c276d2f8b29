#!/usr/bin/env python3
"""Per-call cost of metric updates from Python: rankstat next to prometheus_client multiprocess mode.

    bench/bench_python_calls.py [--build build/release] [--quick] [--json FILE] [--no-oracle | --oracle-only]
                                [--versions C8,...] [--rounds R]

Part 1, the calls SGLang makes per request and per streamed chunk, timed with timeit (best of several
repeats; the median is kept in the JSON), each implementation in its own subprocess (a process holds one
prometheus_client, and multiprocess mode needs PROMETHEUS_MULTIPROC_DIR before the import):
  child inc (counter), child set (gauge), child observe (histogram, 30 buckets like SGLang's inter-token
  latency), and metric.labels(**kw).observe(v) with the tokenizer's labels (model_name, engine_type,
  is_streaming), for
  (a) prometheus_client as /usr/bin/python3 imports it (Debian's python3-prometheus-client, 0.16 on
      Debian 12; its version is printed),
  (b) rankstat with the CPython extension rankstat._fastpath,
  (c) rankstat's pure-Python fallback (RANKSTAT_NO_FASTPATH=1).
  rankstat is measured through rankstat.metrics (Counter/Gauge/Histogram) when that module imports,
  else through the rankstat._accel types directly.
Part 2, SGLang's collector methods: the engine oracle's `replay.py --trace sglang/<c8>.trace.json --time N`
(bench/engine_oracle.py) for every recorded SGLang version, three ways: prometheus_client (as in part 1),
rankstat's plugin (rankstat.sglang:stat_loggers, plus rankstat.sglang:install where the version has no
hooks) and a backend that does nothing (bench/null_backend.py: the engine's floor, what the recorded
metric operations cost with Python methods that do nothing; rankstat's C methods can come out at or below
it). The replay times the methods' metric operations only (the engine's own Python work is not
replayed), so its ratios are larger than with the engine running. The three sides run one after the
other, --rounds times (default 3) in turn, and each call's figure is its best over the rounds (the
machine is shared: one replay process can land on a busy moment).

Targets: part 1, rankstat >= 5x cheaper per call than prometheus_client (issue 11 item 6). Part 2, per
version and hot call (issue 23 item 4): rankstat within 1.3x of the null floor OR >= 10x cheaper than
prometheus_client, whichever it reaches; the table prints both ratios and which one is met. The last
line of stdout is one JSON object (run_bench.py reads it). Uses only the Python standard library.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import engine_oracle
from bench_common import rankstat_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SYSTEM_PYTHON = engine_oracle.SYSTEM_PYTHON

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
    ("prom-system", "prometheus_client (Debian), multiprocess"),
    ("rankstat-fast", "rankstat, C extension"),
    ("rankstat-slow", "rankstat, ctypes fallback"),
]
HOT_METHODS = ["scheduler.log_stats", "scheduler.increment_realtime_tokens", "tokenizer.observe_one_finished_request",
               "tokenizer.observe_time_to_first_token", "tokenizer.observe_inter_token_latency"]
SIDES = ("prom", "rankstat", "null")
TARGET = 5.0  # part 1: prometheus_client / rankstat per child call
# Part 2 (issue 23 item 4), per version and hot call: either bound, whichever is met.
FLOOR_TARGET = 1.3  # rankstat / null backend (the engine's floor) at most this
PROM_TARGET = 10.0  # or prometheus_client / rankstat at least this
TARGET_TEXT = f"<= {FLOOR_TARGET:g}x floor or >= {PROM_TARGET:g}x prom"


def hot_verdict(p, o, z):
    """(met, which): whether rankstat's figure o meets the part-2 target against prometheus_client's p and
    the floor z, and by which bound ("floor", "prom", "both" or "")."""
    by_floor = bool(o and z) and o / z <= FLOOR_TARGET
    by_prom = bool(o and p) and p / o >= PROM_TARGET
    which = "both" if by_floor and by_prom else "floor" if by_floor else "prom" if by_prom else ""
    return by_floor or by_prom, which


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
        import prometheus_client
        from importlib.metadata import version as dist_version
        from prometheus_client import Counter, Gauge, Histogram
        version = dist_version("prometheus_client")  # 0.16 has no __version__
        names = list(LABELS)
        c = Counter("bench_requests_total", "requests", ["model_name"]).labels("m")
        # SGLang's gauges are mostrecent; versions before 0.18 do not have that mode (all: the default).
        mode = "mostrecent" if "mostrecent" in getattr(Gauge, "_MULTIPROC_MODES", ()) else "all"
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
                    child = _accel.Value(reporter.address, sid, self.kind)
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


def shm_dir(prefix):
    return tempfile.mkdtemp(prefix=prefix, dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)


def oracle_part(args, env):
    """SGLang's collector methods replayed from the engine oracle's traces: prometheus_client, the
    rankstat plugin and the null backend, per recorded version."""
    reason = engine_oracle.missing()
    if reason:
        return {"available": False, "reason": reason}
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import rankstat.sglang as s; s.stat_loggers; s.install"],
                           capture_output=True, text=True, timeout=120, env=env)
    if probe.returncode != 0:
        return {"available": False, "reason": "rankstat.sglang.stat_loggers is not available: " +
                (probe.stderr.strip().splitlines() or ["?"])[-1]}
    versions = {}
    wanted = set(args.versions.split(",")) if args.versions else None
    for trace in engine_oracle.sglang_traces():
        name = os.path.basename(trace).split(".")[0]
        if wanted is not None and name not in wanted:
            continue
        runs = {}
        for round_ in range(args.rounds):
            for side in SIDES:
                log(f"oracle {name} round {round_ + 1}/{args.rounds}: replay.py "
                    f"{' '.join(engine_oracle.backend_args(side, trace))} --time {args.oracle_number}")
                shm = shm_dir("bench-calls-oracle-")
                try:
                    side_env = dict(env, RANKSTAT_SHM_DIR=shm, RANKSTAT_INSTANCE="benchoracle") \
                        if side == "rankstat" else env
                    run = engine_oracle.replay_time(trace, side, args.oracle_number, side_env)
                finally:
                    shutil.rmtree(shm, ignore_errors=True)
                run["hot_status"] = {m: engine_oracle.hot_status(run, m) for m in HOT_METHODS}
                kept = runs.get(side)
                if kept is not None and run.get("noop_warnings"):  # a round that measured no-ops spoils all
                    kept["noop_warnings"] = run["noop_warnings"]
                    kept["hot_status"] = run["hot_status"]
                if kept is None:
                    run["rounds_us"] = {m: [t] for m, t in run["times_us"].items()}
                    runs[side] = run
                else:  # the best figure per call over the rounds; every round's kept in rounds_us
                    for m, t in run["times_us"].items():
                        kept["rounds_us"].setdefault(m, []).append(t)
                        kept["times_us"][m] = min(kept["times_us"].get(m, t), t)
        versions[name] = {"hooks": engine_oracle.trace_facts(trace).get("resolve_collector_class") is not None,
                          "args": {side: engine_oracle.backend_args(side, trace) for side in SIDES}, **runs}
    return {"available": True, "number": args.oracle_number, "rounds": args.rounds, "versions": versions}


def hot_us(run, method):
    """A side's figure for a hot call, or None where it is not the engine's recorded path."""
    if run.get("hot_status", {}).get(method) != "ok":
        return None
    return run["times_us"].get(method)


def hot_calls(oracle):
    """(version, its runs, method, (prom, rankstat, null) figures, (met, which)) per hot call some side timed."""
    for name, v in oracle["versions"].items():
        for method in HOT_METHODS:
            if any(method in v[side]["times_us"] for side in SIDES):
                figures = tuple(hot_us(v[side], method) for side in SIDES)
                yield name, v, method, figures, hot_verdict(*figures)


def cell(run, method):
    value = hot_us(run, method)
    if value is not None:
        return fmt(value)
    status = run.get("hot_status", {}).get(method, "not timed")
    if "DIVERGED" in status:
        return "n/a (diverged)"
    if status.startswith("NOOP"):
        return "n/a (no-op: rankstat refused its series)"
    return "n/a (not timed)" if status == "not timed" else "n/a (failed)"


def ratio(a, b):
    return f"{a / b:.1f}x" if a and b else "n/a"


def fmt(value):
    return "-" if value is None else f"{value:.3g}"


def prom_version(results):
    r = next((r for r in results["implementations"] if r["implementation"] == "prom-system"), {})
    return r.get("version") or results.get("prometheus_client", "?")


def table(results):
    by = {r["implementation"]: r for r in results["implementations"]}
    prom = f"prometheus_client {prom_version(results)}"
    lines = []
    header = ["call, best us per call"] + [label for key, label in IMPLEMENTATIONS] + [
        f"fast vs {prom}", f">= {TARGET:g}x", f"fallback vs {prom}"]
    if results["implementations"]:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
    else:
        lines.append("Part 1 (child inc/set/observe, labels(**kw).observe): skipped (--oracle-only)")
    all_met = True
    for key, label, _ in (OPS if results["implementations"] else ()):  # none with --oracle-only
        row = [label]
        best = {}
        for impl, _ in IMPLEMENTATIONS:
            r = by.get(impl, {})
            if "ops" in r:
                best[impl] = r["ops"][key]["best_us"]
                row.append(fmt(best[impl]))
            else:
                row.append("n/a")
        fast, slow, anchor = best.get("rankstat-fast"), best.get("rankstat-slow"), best.get("prom-system")
        met = bool(fast and anchor) and anchor / fast >= TARGET
        all_met = all_met and met
        row += [ratio(anchor, fast), "yes" if met else "**no**", ratio(anchor, slow)]
        lines.append("| " + " | ".join(row) + " |")
    notes = []
    for impl, label in (IMPLEMENTATIONS if results["implementations"] else ()):
        r = by.get(impl, {})
        if "error" in r:
            notes.append(f"{label}: not measured: {r['error'].splitlines()[-1] if r['error'] else '?'}")
        elif impl.startswith("prom-"):
            notes.append(f"{label}: version {r.get('version')} ({r.get('path')}), gauge mode {r.get('gauge_mode')}")
        else:
            notes.append(f"{label}: through {r.get('through')}")
    oracle = results.get("oracle") or {}
    lines.append("")
    if not oracle.get("available"):
        lines.append(f"SGLang's collector methods (engine oracle, replay.py --time): not available: "
                     f"{oracle.get('reason', 'skipped')}")
    else:
        lines.append(f"SGLang's collector methods, the engine oracle's replay.py --time {oracle['number']} (the "
                     f"recorded metric operations only; best of 5 per run, best of {oracle.get('rounds', 1)} "
                     f"run(s) per side, the sides in turn), us per call:")
        lines.append("")
        lines.append(f"| version | method | rankstat | null backend (floor) | {prom} | rankstat / floor | "
                     f"{prom} / rankstat | target | met |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for name, v, method, (p, o, z), (met, which) in hot_calls(oracle):
            all_met = all_met and met
            verdict = f"yes ({'floor and prom' if which == 'both' else which})" if met else "**no**"
            lines.append(f"| {name} | {method} | {cell(v['rankstat'], method)} | {cell(v['null'], method)} | "
                         f"{cell(v['prom'], method)} | {ratio(o, z)} | {ratio(p, o)} | {TARGET_TEXT} | "
                         f"{verdict} |")
        lines.append("")
        lines.append("The floor is Python methods that do nothing: a C extension's methods (rankstat's) can cost "
                     "less than those, so rankstat / floor near or below 1.0 means rankstat adds nothing measurable.")
        for name, v in oracle["versions"].items():
            for side in SIDES:
                run = v[side]
                if run.get("error"):
                    lines.append(f"{name}, {side}: replay failed: {run['error'].splitlines()[-1][:160]}")
                    continue
                failed = run["errors"]
                left = len(run["family_list"]) if side != "prom" else None
                lines.append(f"{name}, {side} ({' '.join(v['args'][side])}): {len(failed)} failed block(s)"
                             + (f" ({'; '.join(e[:120] for e in failed[:3])})" if failed else "")
                             + (f", {left} famil{'y' if left == 1 else 'ies'} left in prometheus_client"
                                if left is not None else ""))
    results["all_targets_met"] = all_met
    return "\n".join(lines), notes


def run_bench_rows(results):
    """Rows for bench/run_bench.py's table (| measurement | rankstat | anchor / limit | ratio | target | met |)."""
    by = {r["implementation"]: r for r in results.get("implementations", [])}
    prom = f"prometheus_client {prom_version(results)}"
    rows = []

    def best(impl, key):
        r = by.get(impl) or {}
        return r["ops"][key]["best_us"] if "ops" in r else None

    for key, label, _ in OPS:
        fast, slow, anchor = best("rankstat-fast", key), best("rankstat-slow", key), best("prom-system", key)
        if fast is None or not anchor:
            rows.append(f"| Python per call (bench_python_calls.py): {label}, us | n/a | n/a | - | >= {TARGET:g}x | "
                        f"**no** |")
            continue
        rows.append(f"| Python per call (bench_python_calls.py): {label}, us (ctypes fallback {fmt(slow)}) | "
                    f"{fmt(fast)} | {prom} {fmt(anchor)} | {anchor / fast:.1f}x faster | >= {TARGET:g}x | "
                    f"{'yes' if anchor / fast >= TARGET else '**no**'} |")
    oracle = results.get("oracle") or {}
    if not oracle.get("available"):
        rows.append(f"| SGLang's log_stats / observe_one_finished_request (engine oracle replay --time) | not "
                    f"available: {oracle.get('reason', '-')} | - | - | >= {TARGET:g}x | - |")
        return rows
    for name, v, method, (p, o, z), (met, which) in hot_calls(oracle):
        rows.append(f"| SGLang {name} {method} (engine oracle replay --time {oracle['number']}, metric "
                    f"operations only), us | {cell(v['rankstat'], method)} | null backend (floor) "
                    f"{cell(v['null'], method)}; {prom} {cell(v['prom'], method)} | {ratio(o, z)} of the floor, "
                    f"{f'{p / o:.1f}x cheaper than prom' if p and o else 'n/a'} | {TARGET_TEXT} | "
                    f"{f'yes ({which})' if met else '**no**'} |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", help="build tree whose librankstat.so and extension to use (default: what the "
                                        "package finds: the newest build)")
    parser.add_argument("--quick", action="store_true", help="tiny iteration counts (a smoke run)")
    parser.add_argument("--json", help="also write the raw figures to this file")
    parser.add_argument("--no-oracle", action="store_true",
                        help="skip part 2 (SGLang's collector methods replayed from the engine oracle)")
    parser.add_argument("--oracle-only", action="store_true", help="skip part 1 (the per-call child operations)")
    parser.add_argument("--versions", help="part 2: only these SGLang trace versions (comma-separated c8 names, "
                                           "e.g. 016d8605,6a7c8a1d)")
    parser.add_argument("--rounds", type=int, default=0,
                        help="part 2: runs per side, in turn; each call's best is kept (default 3; --quick 1)")
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
    args.rounds = args.rounds or (1 if args.quick else 3)
    build = os.path.abspath(args.build) if args.build else None
    env = rankstat_env(build, package_root=ROOT)
    started = time.time()
    results = {"quick": args.quick, "number": args.number, "repeat": args.repeat, "implementations": [],
               "prometheus_client": engine_oracle.prometheus_client_version()[0]}
    for impl, label in IMPLEMENTATIONS:
        if args.oracle_only:
            break
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
