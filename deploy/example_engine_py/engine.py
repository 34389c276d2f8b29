#!/usr/bin/env python3
"""A small simulated SGLang deployment that reports every SGLang metric family through rankstat.

Processes (fork):
  tokenizer      the tokenizer manager / HTTP front end (TokenizerMetricsCollector, HttpMetrics,
                 func_latency); with --pd it also fronts the PD pair
  scheduler xN   tp_size = attn_tp x dp scheduler ranks with DP attention: in each DP group attention-TP
                 rank 0 simulates and reports, the other ranks replay its calls into their own segments
                 (rankstatd exports them only with --all-schedulers, as SGLang)
  pd prefill     with --pd: a PD prefill server's scheduler (engine_type prefill, rank key prefill-tp0)
  pd decode      with --pd: a PD decode server's scheduler (engine_type decode, rank key decode-tp0)

Segments go to --shm-dir (else $RANKSTAT_SHM_DIR, else /dev/shm). Runs until SIGTERM / SIGINT or
--duration seconds, then stops every process and exits 0.

    PYTHONPATH=client/python python3 deploy/example_engine_py/engine.py --shm-dir /dev/shm --pd
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if importlib.util.find_spec("rankstat") is None:  # from a checkout without PYTHONPATH: the package next door
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python"))

from scheduler_sim import RankConfig, SimulatedRank, run_mirror  # noqa: E402
from tokenizer_sim import Frontend, FrontendConfig  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shm-dir", default=None, help="segment directory (default: $RANKSTAT_SHM_DIR or /dev/shm)")
    p.add_argument("--instance", default="example", help="engine instance id of the unified deployment")
    p.add_argument("--model-name", default="example/Qwen3-8B")
    p.add_argument("--dp", type=int, default=2, help="DP attention groups")
    p.add_argument("--attn-tp", type=int, default=2, help="attention-TP ranks per DP group")
    p.add_argument("--no-dp-attention", action="store_true", help="independent DP replicas instead")
    p.add_argument("--pd", action="store_true", help="also run a PD prefill/decode pair")
    p.add_argument("--no-priorities", action="store_true")
    p.add_argument("--no-speculative", action="store_true")
    p.add_argument("--no-hicache", action="store_true")
    p.add_argument("--no-lora", action="store_true")
    p.add_argument("--all-schedulers", action="store_true", help="every rank exports (SGLang's "
                   "--enable-metrics-for-all-schedulers)")
    p.add_argument("--extra-label", action="append", default=[], metavar="NAME=VALUE",
                   help="SGLang's extra_metric_labels (repeatable)")
    p.add_argument("--custom-label", action="append", default=[], metavar="NAME",
                   help="an allowed tokenizer custom label (repeatable); requests carry values for it")
    p.add_argument("--arrival-rate", type=float, default=12.0, help="requests per second (mean)")
    p.add_argument("--step-seconds", type=float, default=0.02)
    p.add_argument("--decode-log-interval", type=int, default=10)
    p.add_argument("--idle-refresh-seconds", type=float, default=30.0)
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until signalled)")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


class StopFlag:
    """The shared stop event plus a local flag. A signal handler must not touch the multiprocessing Event
    (the interrupted code may hold its lock): it only sets the local flag."""

    def __init__(self, event):
        self.event = event
        self.local = False

    def is_set(self) -> bool:
        return self.local or self.event.is_set()


def _child_setup(stop):
    flag = StopFlag(stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: setattr(flag, "local", True))
    return flag


def _let_go(queues):
    # At exit a process waits until what it put in a queue reached the pipe; once the readers stopped
    # (shutdown) nobody drains it, so do not wait: the simulation's in-flight messages do not matter.
    for q in queues:
        if q is not None:
            q.cancel_join_thread()


def _scheduler_main(cfg, inbox, outbox, balance, mirrors, to_decode, stop):
    stop = _child_setup(stop)
    try:
        SimulatedRank(cfg, inbox, outbox, balance, mirrors, to_decode).run(stop)
    finally:
        _let_go([outbox, to_decode, *mirrors])


def _mirror_main(cfg, inbox, stop):
    stop = _child_setup(stop)
    run_mirror(cfg, inbox, stop)


def _frontend_main(cfg, dp_queues, outputs, pd_queue, stop):
    stop = _child_setup(stop)
    try:
        Frontend(cfg, dp_queues, outputs, pd_queue).run(stop)
    finally:
        _let_go([*dp_queues, pd_queue])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.shm_dir:
        os.environ["RANKSTAT_SHM_DIR"] = args.shm_dir
    extra = dict(item.split("=", 1) for item in args.extra_label)
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    outputs = ctx.Queue()
    dp_attention = not args.no_dp_attention
    tp_size = args.attn_tp * args.dp if dp_attention else args.attn_tp
    common = dict(model_name=args.model_name, priorities=not args.no_priorities, speculative=not args.no_speculative,
                  hicache=not args.no_hicache, lora=not args.no_lora, all_schedulers=args.all_schedulers,
                  extra_labels=extra, step_seconds=args.step_seconds, decode_log_interval=args.decode_log_interval,
                  idle_refresh_seconds=args.idle_refresh_seconds, seed=args.seed)
    balance = None
    if dp_attention:
        balance = {"tokens": ctx.Array("q", args.dp, lock=False),
                   "pairs": ctx.Array("q", args.dp, lock=False), "mode": ctx.Array("i", args.dp, lock=False)}
    procs = []
    dp_queues = []
    for group in range(args.dp):
        inbox = ctx.Queue()
        dp_queues.append(inbox)
        mirror_queues = []
        for local in range(1, args.attn_tp):
            tp_rank = group * args.attn_tp + local if dp_attention else local
            cfg = RankConfig(mode="unified", instance=args.instance, tp_rank=tp_rank, dp_rank=group, tp_size=tp_size,
                             dp_size=args.dp, dp_attention=dp_attention, **common)
            q = ctx.Queue()
            mirror_queues.append(q)
            procs.append(ctx.Process(target=_mirror_main, args=(cfg, q, stop), name=f"scheduler-tp{tp_rank}"))
        tp_rank = group * args.attn_tp if dp_attention else 0
        cfg = RankConfig(mode="unified", instance=args.instance, tp_rank=tp_rank, dp_rank=group, tp_size=tp_size,
                         dp_size=args.dp, dp_attention=dp_attention, **common)
        procs.append(ctx.Process(target=_scheduler_main, name=f"scheduler-tp{tp_rank}",
                                 args=(cfg, inbox, outputs, balance, mirror_queues, None, stop)))
    pd_queue = None
    if args.pd:
        pd_queue = ctx.Queue()
        handoff = ctx.Queue()
        for mode, inbox, to_decode in (("prefill", pd_queue, handoff), ("decode", handoff, None)):
            # One instance for the whole deployment: the pair's ranks get their own rank keys, and their
            # series differ from the unified ones by engine_type.
            cfg = RankConfig(mode=mode, instance=args.instance, rank_key=f"{mode}-tp0", tp_rank=0, dp_rank=None,
                             tp_size=1, dp_size=1, dp_attention=False, **common)
            procs.append(ctx.Process(target=_scheduler_main, name=f"pd-{mode}",
                                     args=(cfg, inbox, outputs, None, [], to_decode, stop)))
    fcfg = FrontendConfig(model_name=args.model_name, instance=args.instance, priorities=not args.no_priorities,
                          arrival_rate=args.arrival_rate, extra_labels=extra, custom_labels=list(args.custom_label),
                          pd_instance_prefill=args.instance if args.pd else None,
                          pd_instance_decode=args.instance if args.pd else None, seed=args.seed)
    procs.append(ctx.Process(target=_frontend_main, name="tokenizer", args=(fcfg, dp_queues, outputs, pd_queue, stop)))

    signalled = {"flag": False}
    for p in procs:
        p.start()
    # Installed after the children started: they set up their own handlers.
    signal.signal(signal.SIGTERM, lambda *_: signalled.update(flag=True))
    signal.signal(signal.SIGINT, lambda *_: signalled.update(flag=True))
    deadline = time.monotonic() + args.duration if args.duration > 0 else None
    status = 0
    while not signalled["flag"]:
        if deadline is not None and time.monotonic() >= deadline:
            break
        dead = [p for p in procs if not p.is_alive()]
        if dead:
            print(f"example engine: {dead[0].name} exited with {dead[0].exitcode}; stopping", file=sys.stderr)
            status = 1
            break
        time.sleep(0.1)
    stop.set()
    deadline = time.monotonic() + 10
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=2)
    for q in [outputs] + dp_queues + ([pd_queue] if pd_queue is not None else []):
        q.cancel_join_thread()
    return status


if __name__ == "__main__":
    sys.exit(main())
