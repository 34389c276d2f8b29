#!/usr/bin/env python3
"""vLLM's real stat logger, per engine step: `StatLoggerManager.record()` on prometheus_client multiprocess
mode vs on rankstat (`rankstat.vllm.stat_logger()`), same machine, same run.

The logger is vLLM's own code from the vLLM oracle (../shared/reference/vllm-oracle: loggers.py and
stats.py at a vLLM commit, runnable without vLLM). Each side runs in its own process: the oracle's
drive.py builds the StatLoggerManager exactly as AsyncLLM does (scenario `full`: two engines, spec
decoding, LoRA, a KV consumer), then this script times one decode step's `record()` (2 requests, 3 new
tokens each, a spec-decode draft, scheduler stats with KV usage), the stats objects built outside the
timed region. Prints one JSON line; `--table` prints a table.

    /usr/bin/python3 bench/bench_vllm_record.py --build build/release [--quick] [--table]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
ORACLE = os.path.join(os.path.dirname(SOURCE), "shared", "reference", "vllm-oracle")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def run_driver(backend: str, engines: str = "0,1") -> dict:
    """drive.py's module body, run in this process as its command line would run it (it builds the
    StatLoggerManager as AsyncLLM does, for the given engine indexes, and exercises it); its globals."""
    drive = os.path.join(ORACLE, "drive.py")
    sys.argv = [drive, "--scenario", "full", "--backend", backend, "--engines", engines, "--quiet"]
    namespace = {"__name__": "__main__", "__file__": drive}
    with open(drive) as f:
        code = compile(f.read(), drive, "exec")
    try:
        exec(code, namespace)  # noqa: S102 - the oracle's own driver, run as its command line would
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f"drive.py failed with {e.code}")
    return namespace


def decode_steps(g: dict, base: float = 5000.0):
    """one_step(k): the stats of one decode step at step k (2 requests, 3 new tokens each, a spec-decode
    draft, scheduler stats with KV usage), built with the oracle's own stats classes (`g`: run_driver's)."""
    full = g["FULL"]
    lora_states = g["LoRARequestStates"](log_stats=full)
    ids = ["bench-a", "bench-b"]
    states = {i: g["RequestStateStats"](arrival_time=base) for i in ids}
    for i in ids:
        lora_states.request_waiting(i, None)

    def one_step(k: int):
        it = g["IterationStats"]()
        it.iteration_timestamp = base + 0.01 * k
        spec = g["SpecDecodingStats"].new(3) if full else None
        for i in ids:
            out = g["NS"](request_id=i, new_token_ids=[1, 2, 3], prefill_stats=None, num_nans_in_logits=0,
                          events=None)
            it.update_from_output(out, base + 0.01 * k, False, states[i], lora_states, None)
            if spec is not None:
                spec.observe_draft(3, 2)
        s = g["SchedulerStats"](num_running_reqs=2, num_waiting_reqs=0, kv_cache_usage=0.2)
        if spec is not None:
            s.spec_decoding_stats = spec
        return s, it

    return one_step


def measure(backend: str, iterations: int, repeats: int) -> dict:
    """Runs in the child: drive.py's module body (which builds and exercises the manager), then the timing."""
    g = run_driver(backend)
    manager = g["manager"]
    one_step = decode_steps(g)

    best = None
    for _ in range(repeats):
        steps = [one_step(k) for k in range(iterations)]
        start = time.perf_counter()
        for s, it in steps:
            manager.record(s, it, None, engine_idx=0)
        per = (time.perf_counter() - start) / iterations * 1e6
        best = per if best is None else min(best, per)
    return {"record_us": best}


def run_child(backend: str, build: str, iterations: int, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "client", "python"))
    library = os.path.join(build, "client", "librankstat.so")
    if os.path.exists(library):
        env["RANKSTAT_LIBRARY"] = library
    with tempfile.TemporaryDirectory(prefix="rankstat-bench-vllm-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK)
                                     else None) as shm:
        env["RANKSTAT_SHM_DIR"] = shm
        proc = subprocess.run([PYTHON, os.path.abspath(__file__), "--child", backend, "--iterations", str(iterations),
                               "--repeats", str(repeats)], env=env, cwd=ORACLE, capture_output=True, text=True,
                              timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(SOURCE, "build", "release"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--iterations", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=0)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    iterations = args.iterations or (50 if args.quick else 2000)
    repeats = args.repeats or (2 if args.quick else 7)
    if args.child:
        print(json.dumps(measure(args.child, iterations, repeats)))
        return 0
    if not os.path.isfile(os.path.join(ORACLE, "drive.py")):
        print(json.dumps({"available": False, "reason": f"the vLLM oracle is absent: {ORACLE}"}))
        return 0
    prom = run_child("prom", args.build, iterations, repeats)
    ours = run_child("plugin:rankstat.vllm:stat_logger", args.build, iterations, repeats)
    ratio = prom["record_us"] / ours["record_us"]
    result = {"available": True, "iterations": iterations, "repeats": repeats,
              "prometheus_client_us": prom["record_us"], "rankstat_us": ours["record_us"], "ratio": ratio}
    if args.table:
        print("| vLLM StatLoggerManager.record(), one decode step (scenario full), us | rankstat | "
              "prometheus_client 0.25.0 multiprocess | ratio | target |")
        print("|---|---|---|---|---|")
        print(f"| record() | {ours['record_us']:.2f} | {prom['record_us']:.2f} | {ratio:.1f}x cheaper | >= 5x |")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
