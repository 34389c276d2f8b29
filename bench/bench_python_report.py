#!/usr/bin/env python3
"""Per-report cost from Python: rankstat's drop-in SchedulerMetricsCollector against prometheus_client in
multiprocess mode (the way SGLang publishes today), in the same run, on the same stats.

What one "logged step" is, both ways (SGLang's SchedulerMetricsCollector pattern):
  log_stats      every SchedulerStats field: prometheus_client does gauge.labels(**labels).set(v) per field
                 (48 gauges, plus the 2 x 11 routing-key GaugeHistogram bins); rankstat packs the
                 snapshot into a reused buffer and makes one C call
  + per step     increment_realtime_tokens (decode), increment_decode_cuda_graph_pass,
                 increment_forward_execution_seconds

prometheus_client: python3-prometheus-client (Debian 12 ships 0.16), PROMETHEUS_MULTIPROC_DIR in a
temporary directory, SGLang's five scheduler labels (model_name, engine_type, tp_rank, pp_rank,
moe_ep_rank); gauges in livesum, because 0.16 predates mostrecent (same file layout, same write cost),
num_retracted_reqs / num_paused_reqs in the default `all` as SGLang declares them.
rankstat: librankstat.so (RANKSTAT_LIBRARY, or the build tree), a segment in a temporary directory with a
ring large enough that no record is dropped during the run (checked: drops must stay 0).

    /usr/bin/python3 bench/bench_python_report.py [--iterations N] [--repeats R] [--quick]

Both sides run back to back in every repeat; the table has the median microseconds per operation of
each and the median of the per-repeat ratios, then a JSON line.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "client", "python"))

LABELS = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
          "moe_ep_rank": "0"}
ROUTING_BOUNDS = [1, 2, 3, 5, 7, 10, 20, 50, 100, 200]


def make_stats(sglang_stats, i: int):
    s = sglang_stats.SchedulerStats()
    s.num_running_reqs = sglang_stats.QueueCount(40 + i % 7)
    s.num_queue_reqs = sglang_stats.QueueCount(i % 5)
    s.gen_throughput = 1234.5 + i
    s.cache_hit_rate = 0.42
    s.decode_sum_seq_lens = 80_000 + i
    s.token_usage = 0.61
    s.full_token_usage = 0.61
    s.num_used_tokens = 120_000
    s.kv_available_tokens = 50_000
    s.kv_evictable_tokens = 30_000
    s.kv_used_tokens = 120_000
    s.spec_accept_length = 2.7
    s.spec_accept_rate = 0.57
    s.spec_num_steps = 3
    s.spec_num_draft_tokens = 4
    s.utilization = 0.7
    s.fwd_occupancy = 88.0
    s.new_token_ratio = 0.55
    s.is_cuda_graph = 1
    s.num_unique_running_routing_keys = 6
    s.routing_key_running_req_counts = [3, 1, 8, 2, 1, 1]
    s.routing_key_all_req_counts = [4, 1, 9, 2, 1, 3]
    return s


class PrometheusClientCollector:
    """SGLang's scheduler collector, reduced to what a logged step touches, on prometheus_client."""

    def __init__(self, field_names):
        from prometheus_client import Counter, Gauge
        names = list(LABELS)
        self.labels = dict(LABELS)
        self.gauges = []
        for field in field_names:
            mode = "all" if field in ("num_retracted_reqs", "num_paused_reqs") else "livesum"
            self.gauges.append((field, Gauge(f"sglang:{field}", field, labelnames=names, multiprocess_mode=mode)))
        self.routing = [Gauge(f"sglang:{n}", n, labelnames=names + ["gt", "le"], multiprocess_mode="livesum")
                        for n in ("routing_key_running_req_count", "routing_key_all_req_count")]
        self.bins = [(str(ROUTING_BOUNDS[i - 1] if i else 0), str(b)) for i, b in enumerate(ROUTING_BOUNDS)]
        self.bins.append((str(ROUTING_BOUNDS[-1]), "+Inf"))
        self.realtime = Counter("sglang:realtime_tokens_total", "t", labelnames=names + ["mode"])
        self.cuda_graph = Counter("sglang:cuda_graph_passes_total", "c", labelnames=names + ["mode"])
        self.forward = Counter("sglang:forward_execution_seconds_total", "f", labelnames=names + ["category"])

    def log_stats(self, stats):
        labels = self.labels
        for field, gauge in self.gauges:
            value = getattr(stats, field)
            gauge.labels(**labels).set(getattr(value, "total", value))
        import bisect
        for gauge, counts in zip(self.routing, (stats.routing_key_running_req_counts, stats.routing_key_all_req_counts)):
            bins = [0] * len(self.bins)
            for c in counts:
                bins[bisect.bisect_left(ROUTING_BOUNDS, c)] += 1
            for (gt, le), n in zip(self.bins, bins):
                gauge.labels(**labels, gt=gt, le=le).set(n)

    def step_counters(self):
        self.realtime.labels(**self.labels, mode="decode").inc(64)
        self.cuda_graph.labels(**self.labels, mode="decode_cuda_graph").inc(1)
        self.forward.labels(**self.labels, category="decode").inc(0.012)


def _mean_us(fn, iterations: int) -> float:
    start = time.perf_counter_ns()
    for i in range(iterations):
        fn(i)
    return (time.perf_counter_ns() - start) / iterations / 1000.0


def paired(prom_fn, rs_fn, iterations: int, repeats: int):
    """Both sides measured back to back in every repeat (so a noisy neighbour hits both alike): the median
    microseconds per call of each, and the median of the per-repeat ratios."""
    prom, rs, ratios = [], [], []
    for _ in range(repeats):
        p = _mean_us(prom_fn, iterations)
        r = _mean_us(rs_fn, iterations * 5) if rs_fn is not None else None
        prom.append(p)
        if r is not None:
            rs.append(r)
            ratios.append(p / r)
    return (statistics.median(prom), statistics.median(rs) if rs else None,
            statistics.median(ratios) if ratios else None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="a smoke run for CI: tiny sizes, figures meaningless")
    args = p.parse_args()
    if args.quick:
        args.iterations, args.repeats = 50, 2

    scratch = tempfile.mkdtemp(prefix="rankstat-bench-py-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    try:
        prom_dir = os.path.join(scratch, "prometheus_multiproc")
        shm_dir = os.path.join(scratch, "shm")
        os.makedirs(prom_dir)
        os.makedirs(shm_dir)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = prom_dir  # before prometheus_client is imported
        os.environ["RANKSTAT_SHM_DIR"] = shm_dir
        import rankstat
        from rankstat.sglang import SchedulerMetricsCollector, stats as sglang_stats

        # A ring that holds every record of the run (640-byte slots), so every report is a real append,
        # never a counted drop (which would be cheaper).
        records = 2 * args.iterations * 5 * args.repeats + 2000
        ring = min(1 << 30, 1 << max(20, (records * 640 * 5 // 4).bit_length()))
        collector = SchedulerMetricsCollector(dict(LABELS), instance="bench", ring_bytes=ring)
        if not collector.reporter.is_open:
            print(f"rankstat could not open a segment: {collector.reporter.error}", file=sys.stderr)
            return 1
        fields = [name for name in collector._packer.field_names]
        prom = PrometheusClientCollector(fields)
        stats = [make_stats(sglang_stats, i) for i in range(64)]

        def prom_report(i):
            prom.log_stats(stats[i & 63])

        def prom_step(i):
            prom.log_stats(stats[i & 63])
            prom.step_counters()

        def rs_report(i):
            collector.log_stats(stats[i & 63])

        def rs_step(i):
            collector.log_stats(stats[i & 63])
            collector.increment_realtime_tokens(None, decode_tokens=64)
            collector.increment_decode_cuda_graph_pass(True)
            collector.increment_forward_execution_seconds("decode", 0.012)

        gauge = prom.gauges[0][1]
        child = gauge.labels(**LABELS)
        reporter = collector.reporter
        rs_gauge = reporter.register("gauge", "sglang:bench_gauge")

        for fn in (prom_report, rs_report):  # warm up: first-use registrations, caches
            for i in range(50):
                fn(i)
        n, r = args.iterations, args.repeats
        rows = [
            ("one SchedulerStats report (log_stats)", *paired(prom_report, rs_report, n, r)),
            ("one logged step (log_stats + 3 per-step counters)", *paired(prom_step, rs_step, n, r)),
            ("one gauge set, labels resolved once",
             *paired(lambda i: child.set(i), lambda i: reporter.set(rs_gauge, i), n * 5, r)),
            ("one gauge set with .labels(**labels)", *paired(lambda i: gauge.labels(**LABELS).set(i), None, n * 5, r)),
        ]
        dropped = reporter.dropped_records
        try:
            from importlib.metadata import version
            prom_version = version("prometheus_client")
        except Exception:
            prom_version = "?"
        print(f"prometheus_client {prom_version} (multiprocess, livesum gauges) vs rankstat {rankstat.__version__} "
              f"({rankstat.library_path()}); "
              f"Python {sys.version.split()[0]}; median of {args.repeats} repeats; microseconds per operation")
        print(f"{'operation':52} {'prometheus_client':>18} {'rankstat':>10} {'ratio':>8}")
        out = {}
        for name, p_us, r_us, q in rows:
            ratio = f"{q:.1f}x" if q else "-"
            r_text = f"{r_us:.2f}" if r_us is not None else "-"
            print(f"{name:52} {p_us:18.2f} {r_text:>10} {ratio:>8}")
            out[name] = {"prometheus_client_us": round(p_us, 3),
                         "rankstat_us": None if r_us is None else round(r_us, 3),
                         "ratio": None if q is None else round(q, 1)}
        print(f"rankstat records dropped during the run: {dropped}")
        print(json.dumps({"bench": "python_report", "iterations": args.iterations, "repeats": args.repeats,
                          "dropped_records": dropped, "results": out}))
        reporter.close()
        return 0 if dropped == 0 else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
