#!/usr/bin/env python3
"""The anchor: Python prometheus_client in multiprocess mode, the way SGLang uses it.

One process per scheduler rank, each holding SGLang's scheduler metric set (bench/sglang_scheduler_set.tsv:
the SchedulerStats gauges, the constants, counters and histograms with SGLang's buckets, labelled
model_name, engine_type, tp_rank, pp_rank, moe_ep_rank). Gauges use SGLang's modes: mostrecent, or
livesum where the installed prometheus_client predates mostrecent (< 0.18; Debian 12 ships 0.16; the
scrape reads the files the same way); num_retracted_reqs and num_paused_reqs keep the default `all`.

    anchor_multiprocess.py step   [--iterations N]
        The engine-side cost of one logged scheduler step: SGLang's log_stats, one
        gauge.labels(**labels).set(value) per SchedulerStats field. Also Gauge.set alone and with .labels().
    anchor_multiprocess.py scrape --ranks N --scrapes K [--warmup W]
        Forks N rank processes; each registers the metric set, logs a few steps, and exits (the scrape reads
        only their files, so live or exited makes no difference to its cost). Then K scrapes exactly as
        SGLang's /metrics does it: a fresh CollectorRegistry + MultiProcessCollector + generate_latest, and
        gzip.compress of that output as prometheus_client does when the client accepts gzip.

Each prints one JSON object on stdout. Only the standard library and prometheus_client are used.
"""

import argparse
import gzip
import json
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SET = os.path.join(HERE, "sglang_scheduler_set.tsv")
BASE_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def load_set(path):
    rows = []
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            kind, family, mode, labels, buckets, source = line.rstrip("\n").split("\t")
            label_name, label_values = None, [None]
            if labels != "-":
                label_name, values = labels.split("=", 1)
                label_values = values.split("|")
            rows.append({
                "kind": kind, "family": family, "mode": mode, "label": label_name, "values": label_values,
                "buckets": [float(b) for b in buckets.split(",")] if buckets != "-" else None, "source": source,
            })
    return rows


def gauge_mode(prometheus_client, mode):
    modes = getattr(prometheus_client.Gauge, "_MULTIPROC_MODES", frozenset())
    if mode == "mostrecent" and "mostrecent" not in modes:
        return "livesum"
    return mode


class SchedulerStats:
    """Stand-in for SGLang's SchedulerStats dataclass: one attribute per snapshot gauge."""

    def __init__(self, fields, rng):
        for field in fields:
            setattr(self, field, rng.random() * 1000 if rng else 0.0)


class AnchorScheduler:
    """SGLang's SchedulerMetricsCollector reduced to what the benchmark exercises."""

    def __init__(self, prometheus_client, rows, tp_rank):
        self.labels = {"model_name": MODEL, "engine_type": "unified", "tp_rank": tp_rank, "pp_rank": 0,
                       "moe_ep_rank": 0}
        self.gauges = []  # (field, Gauge) fed by log_stats
        self.constants = []
        self.counters = []  # (Counter, own label name, values)
        self.histograms = []
        for row in rows:
            name = row["family"]
            doc = "SGLang " + name.split(":", 1)[1].replace("_", " ") + "."
            labelnames = list(BASE_LABELS) + ([row["label"]] if row["label"] else [])
            if row["kind"] == "gauge":
                metric = prometheus_client.Gauge(name, doc, labelnames=labelnames, registry=None,
                                                 multiprocess_mode=gauge_mode(prometheus_client, row["mode"]))
                if row["source"] == "snapshot":
                    self.gauges.append((name.split(":", 1)[1], metric))
                else:
                    self.constants.append((metric, row["label"], row["values"]))
            elif row["kind"] == "counter":
                metric = prometheus_client.Counter(name, doc, labelnames=labelnames, registry=None)
                self.counters.append((metric, row["label"], row["values"]))
            else:
                metric = prometheus_client.Histogram(name, doc, labelnames=labelnames, registry=None,
                                                     buckets=row["buckets"])
                self.histograms.append((metric, row["label"], row["values"], row["buckets"][-1]))

    def _log_gauge(self, gauge, data):
        gauge.labels(**self.labels).set(data)

    def log_stats(self, stats):
        # SGLang: one self._log_gauge(self.<family>, stats.<field>) per SchedulerStats field.
        for field, gauge in self.gauges:
            self._log_gauge(gauge, getattr(stats, field))

    def emit_constants(self, rng):
        for metric, label, values in self.constants:
            for value in values:
                extra = {label: value} if label else {}
                metric.labels(**self.labels, **extra).set(round(rng.random() * 100, 3))

    def step(self, rng):
        for metric, label, values in self.counters:
            for value in values:
                extra = {label: value} if label else {}
                metric.labels(**self.labels, **extra).inc(float(int(rng.random() * 512)))
        for metric, label, values, top in self.histograms:
            for value in values:
                extra = {label: value} if label else {}
                metric.labels(**self.labels, **extra).observe(top * 10 ** (-4 * rng.random()))


def median(values):
    s = sorted(values)
    return s[len(s) // 2]


def run_step(args):
    directory = tempfile.mkdtemp(prefix="rankstat-anchor-step-", dir=args.tmp)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        import prometheus_client
        rows = load_set(args.metric_set)
        scheduler = AnchorScheduler(prometheus_client, rows, 0)
        rng = random.Random(1)
        stats = SchedulerStats([f for f, _ in scheduler.gauges], rng)
        scheduler.emit_constants(rng)
        scheduler.log_stats(stats)
        per_call = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(args.iterations):
                scheduler.log_stats(stats)
            per_call.append((time.perf_counter() - start) / args.iterations * 1e6)
        gauge = scheduler.gauges[0][1]
        child = gauge.labels(**scheduler.labels)
        set_alone, set_labels = [], []
        n = args.iterations * 20
        for _ in range(args.repeats):
            start = time.perf_counter()
            for i in range(n):
                child.set(i)
            set_alone.append((time.perf_counter() - start) / n * 1e6)
            start = time.perf_counter()
            for i in range(n):
                gauge.labels(**scheduler.labels).set(i)
            set_labels.append((time.perf_counter() - start) / n * 1e6)
        print(json.dumps({
            "prometheus_client": prometheus_client.__version__ if hasattr(prometheus_client, "__version__") else
            _version(), "gauge_mode": gauge_mode(prometheus_client, "mostrecent"),
            "gauges_per_step": len(scheduler.gauges), "log_stats_us": per_call,
            "log_stats_us_median": median(per_call), "gauge_set_us_median": median(set_alone),
            "gauge_labels_set_us_median": median(set_labels),
        }))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _version():
    try:
        from importlib.metadata import version
        return version("prometheus_client")
    except Exception:  # noqa: BLE001 - a version string is informative only
        return "unknown"


def child_rank(rows, rank, steps):
    import prometheus_client
    scheduler = AnchorScheduler(prometheus_client, rows, rank)
    rng = random.Random(rank)
    stats = SchedulerStats([f for f, _ in scheduler.gauges], rng)
    scheduler.emit_constants(rng)
    for _ in range(steps):
        scheduler.log_stats(stats)
        scheduler.step(rng)


def run_scrape(args):
    directory = tempfile.mkdtemp(prefix="rankstat-anchor-", dir=args.tmp)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        import prometheus_client
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.multiprocess import MultiProcessCollector
        rows = load_set(args.metric_set)
        running = set()
        started = time.perf_counter()
        for rank in range(args.ranks):
            while len(running) >= args.parallel:
                pid, status = os.wait()
                running.discard(pid)
                if status != 0:
                    raise SystemExit(f"anchor rank process failed with status {status}")
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    child_rank(rows, rank, args.steps)
                except BaseException:  # noqa: BLE001 - report and exit the child, never return into the parent
                    import traceback
                    traceback.print_exc()
                    code = 1
                os._exit(code)
            running.add(pid)
        while running:
            pid, status = os.wait()
            running.discard(pid)
            if status != 0:
                raise SystemExit(f"anchor rank process failed with status {status}")
        setup_seconds = time.perf_counter() - started
        files = len([f for f in os.listdir(directory) if f.endswith(".db")])

        plain_ms, gzip_ms, compress_ms = [], [], []
        output = b""
        compressed = b""
        for i in range(args.warmup + args.scrapes):
            start = time.perf_counter()
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            output = generate_latest(registry)
            generated = time.perf_counter()
            compressed = gzip.compress(output)  # what prometheus_client's exposition does for gzip
            done = time.perf_counter()
            if i >= args.warmup:
                plain_ms.append((generated - start) * 1e3)
                compress_ms.append((done - generated) * 1e3)
                gzip_ms.append((done - start) * 1e3)
        text = output.decode()
        lines = sum(1 for line in text.split("\n") if line and not line.startswith("#"))
        print(json.dumps({
            "ranks": args.ranks, "files": files, "setup_seconds": setup_seconds, "text_bytes": len(output),
            "gzip_bytes": len(compressed), "sample_lines": lines, "plain_ms": plain_ms, "gzip_ms": gzip_ms,
            "compress_ms": compress_ms, "gauge_mode": gauge_mode(prometheus_client, "mostrecent"),
        }))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metric-set", default=DEFAULT_SET)
    parser.add_argument("--tmp", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                        help="where the multiprocess directory is created (tmpfs, as SGLang deployments use)")
    sub = parser.add_subparsers(dest="command", required=True)
    step = sub.add_parser("step")
    step.add_argument("--iterations", type=int, default=2000)
    step.add_argument("--repeats", type=int, default=5)
    scrape = sub.add_parser("scrape")
    scrape.add_argument("--ranks", type=int, required=True)
    scrape.add_argument("--scrapes", type=int, default=5)
    scrape.add_argument("--warmup", type=int, default=1)
    scrape.add_argument("--steps", type=int, default=3, help="logged steps per rank before it exits")
    scrape.add_argument("--parallel", type=int, default=max(1, os.cpu_count() or 1))
    args = parser.parse_args()
    if args.command == "step":
        run_step(args)
    else:
        run_scrape(args)


if __name__ == "__main__":
    sys.exit(main())
