#!/usr/bin/env python3
"""vLLM's stat logger, per engine step: one decode step's `record()` on prometheus_client multiprocess mode,
on rankstat (`rankstat.vllm.stat_logger()`) and on a backend that does nothing (bench/null_backend.py, the
engine's floor), same machine, same run.

The engine oracle (bench/engine_oracle.py) recorded what vLLM's own PrometheusStatLogger did to its
metrics as AsyncLLM drove it (scenario `full`: two engines, spec decoding, LoRA, a KV consumer, perf
stats). Each side is one `replay.py --trace vllm/13cbd441-full.trace.json --time N` in its own process:
the replay re-performs the whole trace through the stand-in logger with that backend plugged into its
hooks, then times engine 0's decode step (`record#1`: 2 requests, 3 new tokens each, a preemption, a
spec-decode draft), best of 5. Only the step's metric operations are timed, pre-decoded: vLLM's own Python
work around them is not in the figure, so the ratio is larger than with vLLM's code running (the oracle's
README compares the two). prometheus_client is the one
/usr/bin/python3 imports (Debian's 0.16: gauges vLLM asks to be mostrecent are written as all, see
engine_oracle.py). The three sides run in turn, --rounds times (default 3; --quick 1), and each side's
figure is its best over the rounds (the machine is shared). Target (issue 23 item 4): rankstat within 1.3x
of the null floor or >= 10x cheaper than prometheus_client, whichever it reaches (`met` and `met_by` in the
JSON). Prints one JSON line; `--table` prints a table. Skips, with a message, where the oracle is absent.

    /usr/bin/python3 bench/bench_vllm_record.py --build build/release [--quick] [--table] [--iterations N]
                                                [--rounds R]
"""

import argparse
import json
import os
import sys
import tempfile

import engine_oracle
from bench_common import rankstat_env

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
TRACE = os.path.join("vllm", "13cbd441-full.trace.json")
HOT = "record#1"
HOT_BLOCK = "simulate engine 0"   # the trace's block holding engine 0's records
SIDES = (("prom", "prometheus_client"), ("rankstat", "rankstat"), ("null", "null backend"))
KEYS = {"prom": "prometheus_client_us", "rankstat": "rankstat_us", "null": "null_us"}  # the JSON's figures
FLOOR_TARGET = 1.3  # rankstat / null backend at most this
PROM_TARGET = 10.0  # or prometheus_client / rankstat at least this
TARGET_TEXT = f"<= {FLOOR_TARGET:g}x floor or >= {PROM_TARGET:g}x prom"



def run(build, number, rounds=1):
    trace = os.path.join(engine_oracle.oracle_dir(), TRACE)
    version, _ = engine_oracle.prometheus_client_version()
    out = {"available": True, "iterations": number, "rounds": rounds, "trace": TRACE, "hot": HOT,
           "prometheus_client": version, "runs": {}}
    for _ in range(rounds):
        for side, _ in SIDES:
            with tempfile.TemporaryDirectory(prefix="rankstat-bench-vllm-",
                                             dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None) as shm:
                env = dict(rankstat_env(build), RANKSTAT_SHM_DIR=shm)
                r = engine_oracle.replay_time(trace, side, number, env, hot=[HOT])
            r["hot_status"] = engine_oracle.hot_status(r, HOT, HOT_BLOCK)
            r["args"] = engine_oracle.backend_args(side, trace)
            kept = out["runs"].get(side)
            if kept is None or (r["hot_status"] == "ok" and (kept["hot_status"] != "ok" or r["times_us"][HOT] <
                                                             kept["times_us"][HOT])):
                r["rounds_us"] = (kept or {}).get("rounds_us", [])
                kept = out["runs"][side] = r
            kept["rounds_us"].append(r["times_us"].get(HOT))
            if r["hot_status"].startswith("NOOP"):  # a round that measured no-ops spoils the side's figure
                kept["hot_status"], kept["noop_warnings"] = r["hot_status"], r["noop_warnings"]
    for side, _ in SIDES:
        r = out["runs"][side]
        out[KEYS[side]] = r["times_us"][HOT] if r["hot_status"] == "ok" else None
    prom, ours, floor = out["prometheus_client_us"], out["rankstat_us"], out["null_us"]
    out["ratio"] = prom / ours if prom and ours else None
    out["floor_ratio"] = ours / floor if ours and floor else None
    by_floor = out["floor_ratio"] is not None and out["floor_ratio"] <= FLOOR_TARGET
    by_prom = out["ratio"] is not None and out["ratio"] >= PROM_TARGET
    out["target"] = TARGET_TEXT
    out["met"] = by_floor or by_prom
    out["met_by"] = "both" if by_floor and by_prom else "floor" if by_floor else "prom" if by_prom else ""
    return out


def cell(result, side):
    r = result["runs"][side]
    if r["hot_status"] == "ok":
        return f"{r['times_us'][HOT]:.2f}"
    if r["hot_status"].startswith("NOOP"):
        return "n/a (no-op: rankstat refused its series)"
    return "n/a (diverged)" if "DIVERGED" in r["hot_status"] else "n/a (failed)"


def print_table(result):
    prom, ours, floor = result["prometheus_client_us"], result["rankstat_us"], result["null_us"]

    def ratio(a, b):
        return f"{a / b:.1f}x" if a and b else "n/a"

    print(f"| vLLM record(), engine 0's decode step (replay.py --time {result['iterations']}, {HOT}, metric "
          f"operations only, best of {result.get('rounds', 1)} run(s) per side), us | rankstat | null backend "
          f"(floor) | prometheus_client {result['prometheus_client']} multiprocess | rankstat / floor | "
          f"prometheus_client / rankstat | target | met |")
    print("|---|---|---|---|---|---|---|---|")
    met = f"yes ({'floor and prom' if result['met_by'] == 'both' else result['met_by']})" if result["met"] \
        else "**no**"
    print(f"| record() | {cell(result, 'rankstat')} | {cell(result, 'null')} | {cell(result, 'prom')} | "
          f"{ratio(ours, floor)} | {ratio(prom, ours)} cheaper | {result['target']} | {met} |")
    for side, label in SIDES:
        r = result["runs"][side]
        failed = r["errors"]
        print(f"{label} ({' '.join(r['args'])}): {len(failed)} failed block(s)"
              + (f" ({'; '.join(e[:120] for e in failed[:3])})" if failed else "")
              + (f"; {r['error'].splitlines()[-1][:160]}" if r.get("error") else ""))


def run_bench_rows(result):
    """Rows for bench/run_bench.py's table (| measurement | rankstat | anchor / limit | ratio | target | met |)."""
    if not result.get("available"):
        return [f"| vLLM's stat logger: record() per step | not available: {result.get('reason', '-')} | - | - | "
                f"{TARGET_TEXT} | - |"]

    def fmt(value):
        return "n/a" if value is None else f"{value:.3g}"

    prom, ours, floor = result["prometheus_client_us"], result["rankstat_us"], result.get("null_us")
    ratio, floor_ratio = result.get("ratio"), result.get("floor_ratio")
    verdict = f"yes ({result.get('met_by')})" if result.get("met") else "**no**"
    return [f"| vLLM's stat logger (bench_vllm_record.py, engine oracle replay --time {result['iterations']}, metric "
            f"operations only, best of {result.get('rounds', 1)}): one decode step's record(), two engines, spec "
            f"decoding, LoRA, us | {fmt(ours)} | null backend (floor) {fmt(floor)}; prometheus_client "
            f"{result.get('prometheus_client')} {fmt(prom)} | "
            f"{f'{floor_ratio:.1f}x' if floor_ratio else 'n/a'} of the floor, "
            f"{f'{ratio:.1f}x cheaper than prom' if ratio else 'n/a'} | {TARGET_TEXT} | "
            f"{verdict} |"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(SOURCE, "build", "release"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--iterations", type=int, default=0, help="replay.py --time N (2000; --quick 50)")
    ap.add_argument("--rounds", type=int, default=0, help="runs per side, in turn, best kept (3; --quick 1)")
    args = ap.parse_args()
    number = args.iterations or (50 if args.quick else 2000)
    reason = engine_oracle.missing()
    if reason:
        print(json.dumps({"available": False, "reason": reason}))
        return 0
    result = run(os.path.abspath(args.build), number, args.rounds or (1 if args.quick else 3))
    if args.table:
        print_table(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
