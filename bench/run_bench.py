#!/usr/bin/env python3
"""rankstat side by side with Python prometheus_client multiprocess mode, in one run.

    bench/run_bench.py --build build/release [--quick] [--only PART,...] [--sizes N,...] [--json FILE]

Runs every benchmark of bench/ one after the other (never two at once), next to the anchor
(bench/anchor_multiprocess.py), and prints one table with ratios. These machines are shared and noisy:
compare ratios measured in the same run, not absolute times across runs.

  engine side   rankstat_bench_append (C++ Reporter append vs a bare ring, same run);
                bench_python_calls.py (per-call child inc/set/observe and labels(**kw).observe, and
                SGLang's collector methods replayed from the engine oracle's traces, vs the
                prometheus_client /usr/bin/python3 imports and a do-nothing backend, the engine's floor);
                bench_vllm_record.py (vLLM's stat logger, one decode step's record(), replayed the same way);
                the anchor's log_stats (one logged step: one gauge.labels(**labels).set per field)
  scrape        rankstatd with N real writer processes (rankstat_bench_writer, 10 logged steps/s each,
                SGLang's scheduler metric set), scraped by rankstat_bench_scrape 150 ms apart so that
                every rank has logged a step between two scrapes; plain and with Accept-Encoding: gzip;
                next to the anchor's fresh CollectorRegistry + MultiProcessCollector + generate_latest
                (+ gzip.compress) over N rank processes' files;
                bench_vllm_scrape.py (vLLM's stat logger, the engine oracle's stand-in, in 2, 8 and 32
                engine processes: rankstatd's /metrics next to vLLM's API server's generate_latest over a
                MultiProcessCollector)
  freshness     append-to-visible delay of a probe rank while 64 ranks log 100 steps/s
  daemon cost   rankstatd CPU and RSS with 64 ranks logging 100 steps/s for 30 s, scraped every 5 s, after
                one first scrape (timed on its own: it builds what later scrapes reuse);
                again with a fixed 2 ms drain, and again with --aggregate.integrate=none (what the time
                integrals and window gauges cost)
  ingest        records/s drained and applied by one daemon thread (rankstat_bench_ingest)

Uses only the Python standard library (the anchor needs python3-prometheus-client). The engine oracle
(../shared/reference/engine-oracle or $RANKSTAT_ENGINE_ORACLE) is optional: without it those rows say
"not available".
"""

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import types
import urllib.request

from bench_common import Daemon, fmt, median, percentile, proc_cpu_seconds, run_json, wait_for_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
METRIC_SET = os.path.join(HERE, "sglang_scheduler_set.tsv")
# What --only selects from, in the order they run.
PARTS = ("engine", "scrape", "vllm", "freshness", "daemon-cost", "ingest", "breakdown")
PYTHON = sys.executable


def log(message):
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine_description():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "kernel": platform.release(), "mem_gib": round(mem_gib, 1),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"), "load_avg_at_start": os.getloadavg()}


class Writers:
    """N simulated scheduler ranks: one rankstat_bench_writer process per rank (or `per_process` ranks as
    threads of one process each, when asked)."""

    def __init__(self, build, shm_dir, ranks, rate_hz, per_process=1):
        env = dict(os.environ, RANKSTAT_SHM_DIR=shm_dir)
        binary = os.path.join(build, "bench", "rankstat_bench_writer")
        self.processes = []
        self.dropped = None
        for first in range(0, ranks, per_process):
            count = min(per_process, ranks - first)
            self.processes.append(subprocess.Popen(
                [binary, "--metric-set", METRIC_SET, "--first-rank", str(first), "--ranks", str(count),
                 "--rate-hz", str(rate_hz)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in self.processes:
            line = p.stdout.readline().strip()
            if line != "ready":
                self.stop()
                raise RuntimeError(f"writer failed to start: {line} {p.stderr.read()[-1000:]}")

    def stop(self):
        """Stops every writer (once: later calls return the first answer) and returns the records they
        dropped."""
        if self.dropped is not None:
            return self.dropped
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        dropped = 0
        for p in self.processes:
            try:
                out, _ = p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            for token in (out or "").split():
                if token.startswith("dropped="):
                    dropped += int(token.split("=", 1)[1])
        self.dropped = dropped
        return dropped


@contextlib.contextmanager
def daemon_stage(build, shm_dir, flags=()):
    """rankstatd on `shm_dir`, with room for the writers that feed it (`stage.writers`): when the block
    ends, however it ends, the writers and the daemon are stopped and the directory is removed."""
    stage = types.SimpleNamespace(daemon=Daemon(build, shm_dir, flags), writers=None)
    try:
        yield stage
    finally:
        if stage.writers is not None:
            stage.writers.stop()
        stage.daemon.stop()
        shutil.rmtree(shm_dir, ignore_errors=True)


def fresh_dir(base, name):
    path = os.path.join(base, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


# ------------------------------------------------------------------------------------------------ parts


def bench_engine(args):
    out = {}
    log("engine side: C++ append vs the bare ring (rankstat_bench_append)")
    result = subprocess.run([os.path.join(args.build, "bench", "rankstat_bench_append"), "--benchmark_format=json",
                             f"--benchmark_min_time={args.append_min_time}",
                             f"--benchmark_repetitions={args.repetitions}"],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError("rankstat_bench_append failed: " + result.stderr[-2000:])
    data = json.loads(result.stdout)
    per = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        if "per_append" in b:  # seconds per append
            ns = b["per_append"] * 1e9
        elif "ns_per_append" in b:
            ns = b["ns_per_append"]
        else:
            continue
        name = "/".join(part for part in b["name"].split("/") if part != "manual_time" and not part.startswith("min_time:"))
        per.setdefault(name, []).append(ns)
    out["append_ns"] = {name: median(values) for name, values in per.items()}
    out["append_runs"] = per

    log("engine side: the anchor's log_stats (anchor_multiprocess.py step)")
    out["anchor_step"] = run_json([PYTHON, os.path.join(HERE, "anchor_multiprocess.py"), "step", "--iterations",
                                   str(args.step_iterations), "--repeats", str(args.repetitions + 2)], timeout=600)

    log("engine side: per-call cost from Python next to prometheus_client (bench_python_calls.py)")
    argv = [PYTHON, os.path.join(HERE, "bench_python_calls.py"), "--build", args.build] + (["--quick"] if args.quick else [])
    out["python_calls"] = run_json(argv, timeout=1800)

    log("engine side: vLLM's stat logger, record() per engine step, replayed (bench_vllm_record.py)")
    argv = [PYTHON, os.path.join(HERE, "bench_vllm_record.py"), "--build", args.build] + (["--quick"] if args.quick else [])
    out["vllm_record"] = run_json(argv, timeout=900)
    return out


def bench_scrape(args, base):
    rows = []
    for ranks in args.sizes:
        row = {"ranks": ranks}
        per_process = 1
        shm_dir = fresh_dir(base, f"scrape-{ranks}")
        log(f"scrape: rankstatd with {ranks} writer process(es)")
        with daemon_stage(args.build, shm_dir) as stage:
            try:
                stage.writers = Writers(args.build, shm_dir, ranks, 10, per_process)
            except (OSError, RuntimeError) as error:  # the machine cannot hold this many processes
                log(f"  {ranks} processes failed ({error}); falling back to 16 ranks per process as threads")
                per_process = 16
                stage.writers = Writers(args.build, fresh_dir(base, f"scrape-{ranks}"), ranks, 10, per_process)
            row["ranks_per_writer_process"] = per_process
            wait_for_ranks(stage.daemon, ranks)
            time.sleep(0.5)
            scrape = os.path.join(args.build, "bench", "rankstat_bench_scrape")
            for mode in ("plain", "gzip"):
                argv = [scrape, "latency", "--address", stage.daemon.address, "--count", str(args.scrapes),
                        "--interval-ms", "150"] + (["--gzip"] if mode == "gzip" else [])
                row[f"rankstat_{mode}"] = run_json(argv, timeout=600)
            row["writer_drops"] = stage.writers.stop()
        log(f"scrape: anchor with {ranks} rank process(es)")
        anchor_scrapes = max(2, min(args.scrapes, int(400 / max(ranks, 1)) + 2))
        row["anchor"] = run_json([PYTHON, os.path.join(HERE, "anchor_multiprocess.py"), "--tmp", base, "scrape",
                                  "--ranks", str(ranks), "--scrapes", str(anchor_scrapes), "--warmup", "1"],
                                 timeout=1800)
        rows.append(row)
    return rows


def bench_vllm_scrape(args):
    log("scrape: vLLM's stat logger (stand-in) in several engine processes, both ways (bench_vllm_scrape.py)")
    argv = [PYTHON, os.path.join(HERE, "bench_vllm_scrape.py"), "--build", args.build] + (["--quick"] if args.quick else [])
    return run_json(argv, timeout=3600)


def proc_rss_mib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def daemon_knows_flag(build, flag):
    result = subprocess.run([os.path.join(build, "daemon", "rankstatd"), "--help"], capture_output=True, text=True)
    return flag in result.stdout


def bench_daemon_cost(args, base, flags=(), freshness=True):
    ranks = args.cost_ranks
    shm_dir = fresh_dir(base, "cost")
    log(f"daemon cost: {ranks} ranks at 100 Hz for {args.cost_seconds} s, scraped every {args.cost_scrape_s} s (gzip)"
        f"{', rankstatd ' + ' '.join(flags) if flags else ''}")
    out = {"ranks": ranks, "rate_hz": 100, "seconds": args.cost_seconds, "flags": list(flags)}
    with daemon_stage(args.build, shm_dir, flags) as stage:
        daemon = stage.daemon
        stage.writers = Writers(args.build, shm_dir, ranks, 100)
        wait_for_ranks(daemon, ranks)
        time.sleep(args.settle_seconds)
        pid = daemon.process.pid
        # The first /metrics after start builds what later scrapes reuse (series storage, pre-rendered
        # heads, body buffers): a one-time cost, reported on its own row and kept out of the steady state
        # that the target is about (a sidecar runs for days, scraped every few seconds).
        cpu_first, t_first = proc_cpu_seconds(pid), time.monotonic()
        request = urllib.request.Request(f"http://{daemon.address}/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        out["first_scrape"] = {"wall_ms": 1000 * (time.monotonic() - t_first),
                               "cpu_ms": 1000 * (proc_cpu_seconds(pid) - cpu_first)}
        scrape = os.path.join(args.build, "bench", "rankstat_bench_scrape")
        scrapes = max(1, int(args.cost_seconds // args.cost_scrape_s))
        scraper = subprocess.Popen([scrape, "latency", "--address", daemon.address, "--count", str(scrapes),
                                    "--interval-ms", str(int(args.cost_scrape_s * 1000)), "--gzip"],
                                   stdout=subprocess.PIPE, text=True)
        cpu0, t0 = proc_cpu_seconds(pid), time.monotonic()
        rss = []
        while time.monotonic() - t0 < args.cost_seconds:
            time.sleep(min(1.0, args.cost_seconds))
            rss.append(proc_rss_mib(pid))
        cpu1, t1 = proc_cpu_seconds(pid), time.monotonic()
        scraper.communicate(timeout=60)
        out.update({"cpu_percent_of_core": 100 * (cpu1 - cpu0) / (t1 - t0), "rss_mib_max": max(rss),
                    "rss_mib_hwm": proc_rss_mib(pid, "VmHWM"), "scrapes": scrapes,
                    "scrape_every_s": args.cost_scrape_s})
        if freshness:
            log(f"freshness: probe rank next to {ranks} ranks at 100 Hz, back-to-back scrapes")
            out["freshness"] = run_json([scrape, "freshness", "--address", daemon.address, "--seconds",
                                         str(args.freshness_seconds)], timeout=600,
                                        env=dict(os.environ, RANKSTAT_SHM_DIR=shm_dir))
        out["writer_drops"] = stage.writers.stop()
    return out


def bench_freshness_small(args, base):
    shm_dir = fresh_dir(base, "fresh1")
    log("freshness: probe rank alone")
    with daemon_stage(args.build, shm_dir) as stage:
        return run_json([os.path.join(args.build, "bench", "rankstat_bench_scrape"), "freshness", "--address",
                         stage.daemon.address, "--seconds", str(args.freshness_seconds)], timeout=600,
                        env=dict(os.environ, RANKSTAT_SHM_DIR=shm_dir))


def bench_ingest(args, flags=()):
    log(f"ingest: records/s drained by one daemon thread (rankstat_bench_ingest {' '.join(flags)})")
    return run_json([os.path.join(args.build, "bench", "rankstat_bench_ingest"), "--rounds",
                     str(args.repetitions * 3), *flags], timeout=600)


def bench_breakdown(args):
    ranks = 32 if not args.quick else 2
    log(f"scrape pipeline breakdown at {ranks} ranks (rankstat_bench_render)")
    return run_json([os.path.join(args.build, "bench", "rankstat_bench_render"), "--metric-set", METRIC_SET,
                     "--ranks", str(ranks), "--rounds", str(max(3, args.scrapes))], timeout=600)


# ------------------------------------------------------------------------------------------------ table


def verdict(ok):
    return "yes" if ok else "**no**"


def make_table(results):
    lines = ["| measurement | rankstat | anchor / limit | ratio | target | met |", "|---|---|---|---|---|---|"]
    if "engine" in results:
        engine_rows(results, lines)
    if "scrape" in results:
        scrape_rows(results, lines)
    if results.get("vllm_scrape"):
        import bench_vllm_scrape
        lines.extend(bench_vllm_scrape.run_bench_rows(results["vllm_scrape"]))
    cost_rows(results, lines)
    return "\n".join(lines)


def engine_rows(results, lines):
    engine = results["engine"]
    append = engine["append_ns"]
    reporter = append.get("BM_ReporterAppendSchedulerSnapshot/daemon_like_consumer:1")
    bare = append.get("BM_PhysicalLimitBareRing/daemon_like_consumer:1")
    if reporter and bare:
        lines.append(f"| C++ append of one scheduler snapshot (632 B record), daemon-like consumer, ns | {fmt(reporter)} | "
                     f"bare ring {fmt(bare)} | {reporter / bare:.2f}x the limit | <= 2x | {verdict(reporter <= 2 * bare)} |")
    full = append.get("BM_ReporterAppendSchedulerSnapshot/daemon_like_consumer:0")
    bare_full = append.get("BM_PhysicalLimitBareRing/daemon_like_consumer:0")
    if full and bare_full:
        lines.append(f"| C++ append, daemon absent (ring full: counted drop), ns | {fmt(full)} | bare ring {fmt(bare_full)} | "
                     f"{full / bare_full:.2f}x the limit | - | - |")
    floor = append.get("BM_TimerFloor")
    if floor:
        lines.append(f"| timing floor included in both append figures above (2 clock reads per burst of 8), ns | "
                     f"{fmt(floor)} | - | - | - | - |")
    if engine.get("python_calls"):
        import bench_python_calls
        lines.extend(bench_python_calls.run_bench_rows(engine["python_calls"]))
    vllm = engine.get("vllm_record") or {}
    if vllm:
        import bench_vllm_record
        lines.extend(bench_vllm_record.run_bench_rows(vllm))
    anchor_step = engine["anchor_step"]
    step_us = anchor_step["log_stats_us_median"]
    lines.append(f"| anchor (anchor_multiprocess.py): one logged step of this metric set, {anchor_step['gauges_per_step']} x "
                 f"gauge.labels(**labels).set(v), us | - | {fmt(step_us)} | - | - | - |")
    lines.append(f"| anchor: Gauge.set alone / with .labels(), us | - | {fmt(anchor_step['gauge_set_us_median'])} / "
                 f"{fmt(anchor_step['gauge_labels_set_us_median'])} | - | - | - |")



def scrape_rows(results, lines):
    by_ranks = {}
    for row in results["scrape"]:
        n = row["ranks"]
        threads = row.get("ranks_per_writer_process", 1)
        label = f"{n} rank{'s' if n > 1 else ''}" + (f" ({threads} per process, as threads)" if threads > 1 else "")
        anchor = row["anchor"]
        for mode in ("plain", "gzip"):
            ours = row[f"rankstat_{mode}"]
            ms = median(ours["ms"])
            theirs = median(anchor["plain_ms" if mode == "plain" else "gzip_ms"])
            by_ranks.setdefault(mode, {})[n] = ms
            target, ok = "-", None
            if n == 32:
                target, ok = ">= 50x", theirs / ms >= 50
            if n == 256:
                target, ok = "<= 20 ms", ms <= 20
            lines.append(f"| scrape, {label}, {mode}: median ms (p90) | {fmt(ms)} ({fmt(percentile(ours['ms'], 90))}) | "
                         f"{fmt(theirs)} | {theirs / ms:.0f}x faster | {target} | {'-' if ok is None else verdict(ok)} |")
        plain = row["rankstat_plain"]
        gz = row["rankstat_gzip"]
        lines.append(f"| scrape, {label}: size text / gzip, KiB (sample lines) | {plain['text_bytes'] / 1024:,.0f} / "
                     f"{gz['wire_bytes'] / 1024:,.0f} ({plain['sample_lines']:,}) | {anchor['text_bytes'] / 1024:,.0f} / "
                     f"{anchor['gzip_bytes'] / 1024:,.0f} ({anchor['sample_lines']:,}) | "
                     f"gzip {gz['wire_bytes'] / anchor['gzip_bytes']:.2f}x the anchor's | - | - |")
    for mode in ("plain", "gzip"):
        points = by_ranks.get(mode, {})
        ns = sorted(points)
        if len(ns) >= 2 and ns[0] < ns[-1]:
            small = [n for n in ns if n >= 8] or ns
            lo, hi = small[0], ns[-1]
            growth = (points[hi] / points[lo]) / (hi / lo)
            lines.append(f"| scrape cost growth {lo} -> {hi} ranks, {mode} (1.0 = linear) | {growth:.2f} | - | - | "
                         f"<= 1 (linear or better) | {verdict(growth <= 1.0)} |")



def cost_rows(results, lines):
    cost = results.get("daemon_cost")
    if cost:
        for label, fresh_run in ((f"{cost['ranks']} ranks at 100 Hz", cost.get("freshness")),
                                 ("probe rank alone", results.get("freshness_alone"))):
            if not fresh_run:
                continue
            direct = fresh_run["direct_ms"]
            p50, p99 = percentile(direct, 50), percentile(direct, 99)
            lines.append(f"| freshness, {label}: append, then a gzip scrape: p50 / p99 ms to the response showing it "
                         f"({len(direct)} appends, {fresh_run['direct_late']} not in the first scrape) | {fmt(p50)} / "
                         f"{fmt(p99)} | - | p99 {p99 / 10:.2f}x the target | p99 <= 10 ms | {verdict(p99 <= 10)} |")
            along = fresh_run["ms"]
            lines.append(f"| freshness, {label}: appends at random moments, another client scraping back to back "
                         f"(plain; includes waiting for the scrape in flight): p50 / p99 ms ({len(along)} appends, "
                         f"{fresh_run['missed']} never seen) | {fmt(percentile(along, 50))} / {fmt(percentile(along, 99))} "
                         f"| - | - | - | - |")
        cpu = cost["cpu_percent_of_core"]
        rss = cost["rss_mib_hwm"]
        lines.append(f"| rankstatd CPU, {cost['ranks']} ranks x 100 Hz for {cost['seconds']:g} s, scraped every "
                     f"{cost['scrape_every_s']:g} s, "
                     f"% of a core | {fmt(cpu)} | - | {cpu:.2f}x the target | <= 1 % | "
                     f"{verdict(cpu <= 1)} |")
        lines.append(f"| rankstatd RSS, same run, MiB (peak) | {fmt(rss)} | - | {rss / 64:.2f}x the target | <= 64 MiB | "
                     f"{verdict(rss <= 64)} |")
        first = cost.get("first_scrape")
        if first:
            lines.append(f"| the first /metrics after start, before that run (builds the series storage and pre-rendered "
                         f"heads later scrapes reuse; not in the CPU above): wall / CPU ms | {fmt(first['wall_ms'])} / "
                         f"{fmt(first['cpu_ms'])} | - | - | - | - |")
        # The same load with one setting changed: CPU against the paced default run above.
        for key, what, ratio_words in (
                ("daemon_cost_fixed_poll", "pacing off: fixed 2 ms drain", "paced drains use"),
                ("daemon_cost_integrals_off", "time integrals and window gauges off", "integrals on use")):
            other = results.get(key)
            if not other:
                continue
            cpu_other = other["cpu_percent_of_core"]
            lines.append(f"| rankstatd CPU, same load, {what} ({' '.join(other['flags'])}), % of a core | "
                         f"{fmt(cpu_other)} | - | "
                         f"{f'{ratio_words} {cpu / cpu_other:.2f}x this' if cpu_other > 0 else '-'} | - | - |")
        load = cost["ranks"] * 100
    else:
        load = 6400
    ingest = results.get("ingest")
    if ingest:
        rate = median(ingest["records_per_second"])
        lines.append(f"| ingest, records/s drained and applied by one daemon thread | {rate:,.0f} | load of 64 ranks x 100 Hz "
                     f"= {load:,} | {rate / load:,.0f}x headroom | - | - |")
        with_integrals = results.get("ingest_integrals")
        if with_integrals:
            rate_on = median(with_integrals["records_per_second"])
            extra_ns = 1e9 / rate_on - 1e9 / rate
            lines.append(f"| ingest, same, with time integrals and 15 s window extrema of the default gauges "
                         f"(--integrals), records/s | {rate_on:,.0f} | - | {extra_ns:+.0f} ns per record | - | - |")
    breakdown = results.get("breakdown")
    if breakdown:
        b = breakdown
        lines.append(f"| scrape pipeline at {b['ranks']} ranks, in process, ms: aggregate + serialize + gzip, prometheus-cpp "
                     f"path vs cached path | {fmt(b['cached_aggregate_ms'])} + {fmt(b['cached_render_ms'])} + "
                     f"{fmt(b['cached_gzip_ms'])} | {fmt(b['reference_aggregate_ms'])} + "
                     f"{fmt(b['reference_serialize_ms'])} + {fmt(b['reference_gzip_ms'])} | "
                     f"{(b['reference_aggregate_ms'] + b['reference_serialize_ms'] + b['reference_gzip_ms']) / max(1e-9, b['cached_aggregate_ms'] + b['cached_render_ms'] + b['cached_gzip_ms']):.1f}x | - | - |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every part (CI)")
    parser.add_argument("--json", help="also write every raw figure to this file")
    parser.add_argument("--tmp", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")
    parser.add_argument("--only-daemon-cost", action="store_true",
                        help="only the daemon cost runs (paced, fixed 2 ms drain, integrals off); --only daemon-cost")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to run, of: {', '.join(PARTS)} (default: all); e.g. to compare "
                             "two builds of the daemon: --only scrape,daemon-cost --sizes 64,256")
    parser.add_argument("--sizes", help="rank counts of the scrape part, comma-separated (default 1,8,32,64,256)")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    args.parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if args.only_daemon_cost:
        args.parts = {"daemon-cost"}
    unknown = args.parts - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; known: {', '.join(PARTS)}")
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else None
    if args.quick:
        args.sizes, args.scrapes, args.repetitions = [1, 2], 2, 1
        args.append_min_time, args.step_iterations = 0.001, 50
        args.cost_ranks, args.cost_seconds, args.freshness_seconds = 2, 1.0, 0.5
        args.cost_scrape_s, args.settle_seconds = 0.5, 0.2
    else:
        args.sizes, args.scrapes, args.repetitions = [1, 8, 32, 64, 256], 15, 3
        # Manual time counts only the timed bursts (~0.5 us per iteration) while each paced iteration also
        # sleeps (~0.15 ms here): 0.05 s of timed appends is ~100,000 bursts and ~15 s of wall time per
        # repetition of each paced case; 0.005-0.02 s gave medians that moved by tens of percent per run.
        args.append_min_time, args.step_iterations = 0.05, 2000
        args.cost_ranks, args.cost_seconds, args.freshness_seconds = 64, 30.0, 10.0
        args.cost_scrape_s, args.settle_seconds = 5.0, 2.0  # 5 s: SGLang's example Prometheus scrape_interval
    if sizes:
        args.sizes = sizes

    base = os.path.join(args.tmp, f"rankstat-bench-{os.getpid()}")
    os.makedirs(base, exist_ok=True)
    started = time.time()
    results = {"machine": machine_description(), "quick": args.quick}
    try:
        if "engine" in args.parts:
            results["engine"] = bench_engine(args)
        if "scrape" in args.parts:
            results["scrape"] = bench_scrape(args, base)
        if "vllm" in args.parts:
            results["vllm_scrape"] = bench_vllm_scrape(args)
        if "freshness" in args.parts:
            results["freshness_alone"] = bench_freshness_small(args, base)
        if "daemon-cost" in args.parts:
            results["daemon_cost"] = bench_daemon_cost(args, base, freshness="freshness" in args.parts)
            # The same load with pacing off (a drain every 2 ms, the fastest pace): what pacing saves.
            results["daemon_cost_fixed_poll"] = bench_daemon_cost(args, base, ["--shm.poll-interval-max=2ms"],
                                                                  freshness=False)
            # The same load without the time integrals and window gauges (docs/metrics.md): what they cost.
            # (A build from before them has no such flag: it is then compared as it is.)
            if daemon_knows_flag(args.build, "--aggregate.integrate"):
                results["daemon_cost_integrals_off"] = bench_daemon_cost(args, base, ["--aggregate.integrate=none"],
                                                                         freshness=False)
        if "ingest" in args.parts:
            results["ingest"] = bench_ingest(args)
            results["ingest_integrals"] = bench_ingest(args, ["--integrals"])
        if "breakdown" in args.parts:
            results["breakdown"] = bench_breakdown(args)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results["seconds"] = time.time() - started
    m = results["machine"]
    table = make_table(results)
    print(f"rankstat benchmarks side by side with prometheus_client multiprocess mode "
          f"({'quick smoke run' if args.quick else 'full run'}, {results['seconds']:.0f} s)")
    print(f"machine: {m['nproc']} CPUs, {m['cpu_model']}, kernel {m['kernel']}, {m['mem_gib']} GiB; {m['date']}; "
          f"load average at start {m['load_avg_at_start'][0]:.2f}")
    if "engine" in results:
        anchor_mode = results["engine"]["anchor_step"]["gauge_mode"]
        print(f"anchor: Python {m['python']}, prometheus_client {results['engine']['anchor_step']['prometheus_client']}, "
              f"gauges in {anchor_mode} "
              f"mode (mostrecent needs >= 0.18), SGLang scheduler metric set of bench/sglang_scheduler_set.tsv")
    print()
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
