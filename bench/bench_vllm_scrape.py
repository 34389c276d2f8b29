#!/usr/bin/env python3
"""vLLM's /metrics at 2, 8 and 32 engine processes: rankstatd against prometheus_client multiprocess mode,
same machine, same run.

Every engine process runs vLLM's stat logger as the engine oracle's stand-in (bench/engine_oracle.py:
`emul/` on sys.path, ENGINE_ORACLE_TRACE the trace of vLLM 13cbd441, scenario `full`: spec decoding, LoRA,
a KV consumer, perf stats), used live for one engine index of the process's own (engine="0" .. "N-1", as
N data-parallel engines): `PrometheusStatLogger(cfg, engine_indexes=[k])` twice (the recorded run built
a throw-away logger first, and the stand-in plays the recorded instances in creation order; the second
one's constructor unregisters the first one's collectors, as vLLM's does), `log_engine_initialized()`,
then --steps calls of `record(None, None, engine_idx=k)`, each replaying engine 0's recorded records with
engine label k (a prefill, a decode with a preemption, a decode that finishes requests, then the idle
record again and again, which still adds to the perf counters and sets the gauges), and then one such
record every --step-ms while it is scraped. Per N, once each way, never both at once:

  rankstat           the processes log through rankstat.vllm.stat_logger() into segments of a private shm
                     directory; a rankstatd of the build serves /metrics on a loopback ephemeral port and
                     rankstat_bench_scrape times --scrapes scrapes over one kept-alive HTTP connection,
                     --interval-ms apart, plain and then with Accept-Encoding: gzip.
  prometheus_client  the processes log through the stand-in's own PrometheusStatLogger on the
                     prometheus_client /usr/bin/python3 imports (Debian's 0.16, whose gauges cannot be
                     mostrecent: written as all, see engine_oracle.py), all into one
                     PROMETHEUS_MULTIPROC_DIR; a scraper process does what vLLM's API server does on
                     /metrics: one CollectorRegistry with a MultiProcessCollector (vLLM's
                     get_prometheus_registry() in multiprocess mode), then per scrape generate_latest
                     (plain) and gzip.compress of it (gzip, as prometheus_client's exposition does), timed
                     in process, without HTTP; --scrapes scrapes, --interval-ms apart.

Both sides get one untimed scrape of each kind first. Sizes: bytes of one scrape, plain and gzip; vLLM's
families and sample lines in it (rankstatd also serves its own rankstat_* and process_* families, counted
apart), and whether the two sides serve the same vLLM series (names and labels; the pid label left out,
which prometheus_client 0.16 adds to the gauges it writes as all). Prints one JSON line; `--table` prints
a table. Skips, with a message, where the engine oracle is absent.

    /usr/bin/python3 bench/bench_vllm_scrape.py --build build/release [--quick] [--table] [--engines 2,8,32]
"""

import argparse
import gzip
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import engine_oracle
from bench_common import Daemon, fmt, median, percentile, proc_cpu_seconds, run_json, wait_for_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
PYTHON = engine_oracle.SYSTEM_PYTHON
TRACE = os.path.join("vllm", "13cbd441-full.trace.json")
RANKSTAT_BACKEND = "rankstat"
DAEMON_OWN_PREFIXES = ("rankstat_", "process_")
# What rankstatd derives from a gauge <g> (docs/metrics.md): <g>_time_weighted_seconds_total, <g>_window_max/min.
DERIVED_SUFFIXES = ("_time_weighted_seconds_total", "_time_weighted_seconds", "_window_max", "_window_min")


def log(message):
    print(f"[bench-vllm-scrape {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- the engines


def engine_process(args) -> int:
    """One engine process: vLLM's logger (the oracle's stand-in, used live) for engine index --engine,
    writing into PROMETHEUS_MULTIPROC_DIR (prometheus_client) or this process's rankstat segment, then one
    record every --step-ms until stdin closes."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = args.mpdir  # before prometheus_client is imported
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.join(engine_oracle.oracle_dir(), "emul"))
    import engine_oracle_emul
    engine_oracle_emul.active()  # the trace named by ENGINE_ORACLE_TRACE (the parent sets it)
    if args.engine_process == RANKSTAT_BACKEND:
        import rankstat.vllm
        logger_class = rankstat.vllm.stat_logger()
    else:
        engine_oracle.older_gauge_modes()
        from vllm.v1.metrics.loggers import PrometheusStatLogger as logger_class
    config = engine_oracle_emul.Opaque("VllmConfig")
    logger_class(config, engine_indexes=[args.engine])  # the recorded run's throw-away first logger
    logger = logger_class(config, engine_indexes=[args.engine])
    logger.log_engine_initialized()
    k = 0
    for _ in range(args.steps):
        logger.record(None, None, engine_idx=args.engine)
        k += 1
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], args.step_ms / 1000.0)
        if readable and not sys.stdin.readline():
            break  # the parent closed stdin: stop
        logger.record(None, None, engine_idx=args.engine)
        k += 1
    fast = None
    if args.engine_process == RANKSTAT_BACKEND:
        from rankstat import _accel
        fast = bool(_accel.FAST)
    print(json.dumps({"engine": args.engine, "steps": k, "fastpath": fast,
                      "live_errors": sum(engine_oracle_emul.LIVE_ERRORS.values()),
                      "live_error_kinds": sorted(engine_oracle_emul.LIVE_ERRORS)[:5]}), flush=True)
    return 0


class Engines:
    """N engine processes of one backend, each with its own engine index."""

    def __init__(self, backend, count, env, mpdir, logs, steps, step_ms, timeout=600):
        self.processes = []
        self.logs = []
        for engine in range(count):
            log_path = os.path.join(logs, f"engine-{engine}.log")
            self.logs.append(log_path)
            with open(log_path, "w") as log_file:
                self.processes.append(subprocess.Popen(
                    [PYTHON, os.path.abspath(__file__), "--engine-process", backend, "--engine", str(engine),
                     "--mpdir", mpdir, "--steps", str(steps), "--step-ms", str(step_ms)],
                    env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file,
                    text=True))
        deadline = time.monotonic() + timeout
        try:
            for engine, p in enumerate(self.processes):
                ready = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]
                line = p.stdout.readline().strip() if ready else "(no answer in time)"
                if line != "ready":
                    if p.poll() is None:
                        p.kill()
                    p.wait()
                    said = (line + "\n" + p.stdout.read())[-3000:]
                    raise RuntimeError(f"engine {engine} did not start: {said}\n{self.log_tail(engine)}")
        except BaseException:
            self.stop()
            raise

    def log_tail(self, engine):
        with open(self.logs[engine]) as f:
            return f.read()[-2000:]

    def stop(self):
        """Closes every engine's stdin, waits a bounded time (then kills); the engines' final reports."""
        for p in self.processes:
            try:
                p.stdin.close()
            except OSError:
                pass
        reports = []
        deadline = time.monotonic() + 60
        for p in self.processes:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            out = p.stdout.read()  # one line: the pipe never filled
            p.stdout.close()
            lines = [line for line in (out or "").splitlines() if line.startswith("{")]
            reports.append(json.loads(lines[-1]) if lines and p.returncode == 0 else None)
        self.processes = []
        return reports


# ------------------------------------------------------------------------------------------- the scrapes


def prom_scraper(args) -> int:
    """vLLM's API server's /metrics on prometheus_client, timed in process: one registry as vLLM's
    get_prometheus_registry() makes it in multiprocess mode (a CollectorRegistry with a
    MultiProcessCollector), generate_latest per scrape, gzip.compress of it for gzip."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = args.prom_scraper
    sys.dont_write_bytecode = True
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    plain_ms, gzip_ms, plain_cpu, gzip_cpu = [], [], [], []
    output = compressed = b""
    for i in range(1 + args.scrapes):  # the first one untimed
        time.sleep(args.interval_ms / 1000.0)
        start, cpu_start = time.perf_counter(), time.process_time()
        output = generate_latest(registry)
        generated, cpu_generated = time.perf_counter(), time.process_time()
        compressed = gzip.compress(output)
        done, cpu_done = time.perf_counter(), time.process_time()
        if i:
            plain_ms.append((generated - start) * 1e3)
            gzip_ms.append((done - start) * 1e3)
            plain_cpu.append((cpu_generated - cpu_start) * 1e3)
            gzip_cpu.append((cpu_done - cpu_start) * 1e3)
    with open(args.text_out, "wb") as f:
        f.write(output)
    files = len([name for name in os.listdir(args.prom_scraper) if name.endswith(".db")])
    from importlib.metadata import version
    print(json.dumps({"plain_ms": plain_ms, "gzip_ms": gzip_ms, "plain_cpu_ms": sum(plain_cpu) / len(plain_cpu),
                      "gzip_cpu_ms": sum(gzip_cpu) / len(gzip_cpu), "text_bytes": len(output),
                      "gzip_bytes": len(compressed), "files": files, "version": version("prometheus_client")}))
    return 0


def exposition_summary(text: str) -> dict:
    """vLLM's families and samples in one exposition, the daemon's own counted apart (its rankstat_* and
    process_* families, and the time integrals and window gauges it derives from vLLM's gauges,
    docs/metrics.md); sample keys (name and labels but pid) for comparing the two sides."""
    lines = text.splitlines()
    declared = {line.split(None, 3)[2] for line in lines if line.startswith("# TYPE ")}

    def own(name):
        if name.startswith(DAEMON_OWN_PREFIXES):
            return "own"
        for suffix in DERIVED_SUFFIXES:
            if name.endswith(suffix) and name[:-len(suffix)] in declared:
                return "derived"
        return None

    counts = {"vllm_families": 0, "vllm_samples": 0, "own_families": 0, "own_samples": 0, "derived_families": 0,
              "derived_samples": 0}
    keys = set()
    for line in lines:
        if line.startswith("# TYPE "):
            counts[f"{own(line.split(None, 3)[2]) or 'vllm'}_families"] += 1
        elif line and not line.startswith("#"):
            key = line.rsplit(" ", 1)[0]
            kind = own(key.split("{", 1)[0])
            counts[f"{kind or 'vllm'}_samples"] += 1
            if kind is None:
                keys.add(re.sub(r'(?<=[{,])pid="\d+",?|,pid="\d+"(?=})', "", key).replace("{}", ""))
    counts["keys"] = keys
    return counts


def fetch(address: str, accept_gzip: bool) -> bytes:
    request = urllib.request.Request(f"http://{address}/metrics",
                                     headers={"Accept-Encoding": "gzip"} if accept_gzip else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
    return gzip.decompress(body) if accept_gzip else body


def engine_env(args, extra):
    env = dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "client", "python"),
               ENGINE_ORACLE_TRACE=os.path.join(engine_oracle.oracle_dir(), TRACE), PYTHONDONTWRITEBYTECODE="1",
               **extra)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    library = os.path.join(args.build, "client", "librankstat.so")
    if os.path.exists(library):
        env["RANKSTAT_LIBRARY"] = library
    pyext = os.path.join(args.build, "client", "pyext", "rankstat")
    if os.path.isdir(pyext):
        found = sorted(name for name in os.listdir(pyext) if name.startswith("_fastpath") and name.endswith(".so"))
        if found:
            env["RANKSTAT_FASTPATH"] = os.path.join(pyext, found[0])
    return env


def scrape_rankstat(args, base, engines) -> dict:
    shm = os.path.join(base, f"shm-{engines}")
    mpdir = os.path.join(base, f"mp-rankstat-{engines}")
    logs = os.path.join(base, f"logs-rankstat-{engines}")
    for path in (shm, mpdir, logs):
        os.makedirs(path)
    log(f"rankstat: {engines} engine processes, rankstatd serving /metrics")
    daemon = Daemon(args.build, shm)
    group = None
    out = {}
    try:
        group = Engines(RANKSTAT_BACKEND, engines, engine_env(args, {"RANKSTAT_SHM_DIR": shm, "TMPDIR": base}),
                        mpdir, logs, args.steps, args.step_ms)
        wait_for_ranks(daemon, engines)
        fetch(daemon.address, False)
        fetch(daemon.address, True)
        scrape = os.path.join(args.build, "bench", "rankstat_bench_scrape")
        for mode in ("plain", "gzip"):
            argv = [scrape, "latency", "--address", daemon.address, "--count", str(args.scrapes), "--interval-ms",
                    str(args.interval_ms)] + (["--gzip"] if mode == "gzip" else [])
            cpu = proc_cpu_seconds(daemon.process.pid)
            out[mode] = run_json(argv, timeout=900)
            # The daemon's whole CPU time over the scrapes (its drains between them included), per scrape.
            out[mode]["cpu_ms"] = (proc_cpu_seconds(daemon.process.pid) - cpu) * 1e3 / args.scrapes
        out["summary"] = exposition_summary(fetch(daemon.address, False).decode())
        out["segments"] = len([name for name in os.listdir(shm) if name.startswith("rankstat.")])
        reports = group.stop()
        group = None
        out["engine_steps"] = [r["steps"] if r else None for r in reports]
        out["fastpath"] = all(r and r["fastpath"] for r in reports)
        out["live_errors"] = sum(r["live_errors"] for r in reports if r)
        out["left_in_prometheus_client"] = len([n for n in os.listdir(mpdir) if n.endswith(".db")])
    finally:
        try:
            if group is not None:
                group.stop()
        finally:
            daemon.stop()
            for path in (shm, mpdir, logs):
                shutil.rmtree(path, ignore_errors=True)
    return out


def scrape_prometheus_client(args, base, engines) -> dict:
    mpdir = os.path.join(base, f"mp-prom-{engines}")
    logs = os.path.join(base, f"logs-prom-{engines}")
    for path in (mpdir, logs):
        os.makedirs(path)
    log(f"prometheus_client: {engines} engine processes, one PROMETHEUS_MULTIPROC_DIR")
    group = None
    try:
        group = Engines("prom", engines, engine_env(args, {"TMPDIR": base}), mpdir, logs, args.steps, args.step_ms)
        text_out = os.path.join(logs, "exposition.txt")
        out = run_json([PYTHON, os.path.abspath(__file__), "--prom-scraper", mpdir, "--scrapes", str(args.scrapes),
                        "--interval-ms", str(args.interval_ms), "--text-out", text_out], timeout=1800,
                       env=engine_env(args, {}))
        with open(text_out) as f:
            out["summary"] = exposition_summary(f.read())
        reports = group.stop()
        group = None
        out["engine_steps"] = [r["steps"] if r else None for r in reports]
        out["live_errors"] = sum(r["live_errors"] for r in reports if r)
    finally:
        try:
            if group is not None:
                group.stop()
        finally:
            for path in (mpdir, logs):
                shutil.rmtree(path, ignore_errors=True)
    return out


def run(args) -> dict:
    tmp = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    base = tempfile.mkdtemp(prefix="rankstat-bench-vllm-scrape-", dir=tmp)
    rows = []
    try:
        for engines in args.engines:
            ours = scrape_rankstat(args, base, engines)
            theirs = scrape_prometheus_client(args, base, engines)
            a, b = ours["summary"].pop("keys"), theirs["summary"].pop("keys")
            rows.append({"engines": engines, "rankstat": ours, "prometheus_client": theirs, "same_series": a == b,
                         "series_only_rankstat": len(a - b), "series_only_prometheus_client": len(b - a)})
            if a != b:
                log(f"{engines} engines: series differ, e.g. rankstat only {sorted(a - b)[:3]}, "
                    f"prometheus_client only {sorted(b - a)[:3]}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {"available": True, "scrapes": args.scrapes, "interval_ms": args.interval_ms, "steps": args.steps,
            "step_ms": args.step_ms, "trace": TRACE, "rows": rows}


# ------------------------------------------------------------------------------------------- the table


def run_bench_rows(result):
    """Rows for bench/run_bench.py's table (| measurement | rankstat | anchor / limit | ratio | target | met |)."""
    if not result.get("available"):
        return [f"| vLLM's /metrics at 2, 8 and 32 engine processes (bench_vllm_scrape.py) | not available | "
                f"{result.get('reason', '-')} | - | - | - |"]
    rows = []
    for row in result["rows"]:
        n, ours, theirs = row["engines"], row["rankstat"], row["prometheus_client"]
        for mode in ("plain", "gzip"):
            mine, prom = ours[mode]["ms"], theirs[f"{mode}_ms"]
            rows.append(f"| vLLM's /metrics (bench_vllm_scrape.py), {n} engine processes, {mode}: median / p99 ms | "
                        f"{fmt(median(mine))} / {fmt(percentile(mine, 99))} | prometheus_client "
                        f"{theirs.get('version', '?')} "
                        f"{fmt(median(prom))} / {fmt(percentile(prom, 99))} | "
                        f"{median(prom) / median(mine):.1f}x faster (median) | - | - |")
        cpu = [ours["plain"]["cpu_ms"], ours["gzip"]["cpu_ms"], theirs["plain_cpu_ms"], theirs["gzip_cpu_ms"]]
        less = " / ".join(f"{prom / mine:.1f}x" if mine > 0 else "n/a" for mine, prom in zip(cpu[:2], cpu[2:]))
        rows.append(f"| vLLM's /metrics, {n} engine processes: CPU per scrape, plain / gzip, ms (rankstatd: all its "
                    f"CPU over the scrapes, drains included, in 10 ms ticks; prometheus_client: the scraper's) | "
                    f"{fmt(cpu[0])} / {fmt(cpu[1])} | {fmt(cpu[2])} / {fmt(cpu[3])} | {less} less CPU | - | - |")
        s, t = ours["summary"], theirs["summary"]
        rows.append(f"| vLLM's /metrics, {n} engine processes: size text / gzip, KiB (vLLM families, sample lines; "
                    f"rankstatd's own lines + the lines of its integrals and window gauges of vLLM's gauges) | "
                    f"{ours['plain']['text_bytes'] / 1024:,.0f} / "
                    f"{ours['gzip']['wire_bytes'] / 1024:,.0f} ({s['vllm_families']}, {s['vllm_samples']:,}; "
                    f"+{s['own_samples']} + {s.get('derived_samples', 0)}) | {theirs['text_bytes'] / 1024:,.0f} / {theirs['gzip_bytes'] / 1024:,.0f} "
                    f"({t['vllm_families']}, {t['vllm_samples']:,}) | "
                    f"same vLLM series (pid aside): {'yes' if row['same_series'] else '**no**'} | - | - |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(SOURCE, "build", "release"))
    ap.add_argument("--quick", action="store_true", help="2 engine processes, a few scrapes: a smoke run (CI)")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--engines", default=None, help="engine process counts, comma-separated (2,8,32)")
    ap.add_argument("--scrapes", type=int, default=0, help="timed scrapes per side and mode (101)")
    ap.add_argument("--interval-ms", type=int, default=150, help="between two scrapes")
    ap.add_argument("--steps", type=int, default=0, help="record() calls of each engine before the scrapes (200)")
    ap.add_argument("--step-ms", type=int, default=100, help="one record() per engine this often while scraped")
    ap.add_argument("--engine-process", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--engine", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--mpdir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--prom-scraper", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--text-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.engine_process:
        return engine_process(args)
    if args.prom_scraper:
        return prom_scraper(args)
    args.build = os.path.abspath(args.build)
    args.engines = [int(n) for n in (args.engines or ("2" if args.quick else "2,8,32")).split(",")]
    args.scrapes = args.scrapes or (3 if args.quick else 101)
    args.steps = args.steps or (5 if args.quick else 200)
    reason = engine_oracle.missing()
    if reason:
        print(json.dumps({"available": False, "reason": reason}))
        return 0
    result = run(args)
    if args.table:
        print("| measurement | rankstat | prometheus_client / anchor | ratio | target | met |")
        print("|---|---|---|---|---|---|")
        print("\n".join(run_bench_rows(result)))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
