#!/usr/bin/env python3
"""A small simulated SGLang-shaped deployment that reports through rankstat.

Processes (fork): one scheduler per rank (--attn-tp x --dp with DP attention, else --attn-tp), a
tokenizer, and with --pd a prefill and a decode scheduler. Each process runs a tiny load model
(load_model.py) and reports its numbers one of two ways:

  --sglang-oracle [DIR] [--sglang-version C8 | --sglang-trace PATH]
                       through SGLang's collector classes as the engine oracle's stand-ins play them
                       (DIR, default $RANKSTAT_ENGINE_ORACLE or ../shared/reference/engine-oracle; the
                       trace of SGLang commit C8, default the newest), with rankstat installed as their
                       backend (rankstat.sglang.install()): SGLang's families, labels and buckets
  (default)            without SGLang: the scheduler's typed snapshot (Reporter.snapshot_packer, one C
                       call per step) and a few tokenizer families declared with rankstat's
                       prometheus_client-compatible classes

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

import sglang_collectors  # noqa: E402  (imports nothing of SGLang until prepare())
from load_model import LoadModel  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shm-dir", default=None, help="segment directory (default: $RANKSTAT_SHM_DIR or /dev/shm)")
    p.add_argument("--sglang-oracle", nargs="?", const="", default=None, metavar="DIR",
                   help="report through SGLang's collectors as the engine oracle's stand-ins play them "
                        "(DIR: the oracle, default $RANKSTAT_ENGINE_ORACLE or ../shared/reference/engine-oracle)")
    p.add_argument("--sglang-version", default=None, metavar="C8",
                   help=f"the SGLang commit whose trace the stand-ins play (default "
                        f"{sglang_collectors.NEWEST_VERSION}, the newest); implies --sglang-oracle")
    p.add_argument("--sglang-trace", default=None, metavar="PATH",
                   help="this trace file instead; implies --sglang-oracle")
    # The oracle's SGLang trees are gone: say so instead of "unrecognized arguments".
    p.add_argument("--sglang-tree", default=None, help=argparse.SUPPRESS)
    p.add_argument("--instance", default="example", help="engine instance id of the deployment")
    p.add_argument("--model-name", default="example/Qwen3-8B")
    p.add_argument("--dp", type=int, default=2, help="DP attention groups")
    p.add_argument("--attn-tp", type=int, default=2, help="attention-TP ranks per DP group")
    p.add_argument("--no-dp-attention", action="store_true", help="independent DP replicas instead")
    p.add_argument("--pd", action="store_true", help="also run a PD prefill/decode pair")
    p.add_argument("--no-priorities", action="store_true")
    p.add_argument("--all-schedulers", action="store_true", help="every rank exports (SGLang's "
                   "--enable-metrics-for-all-schedulers)")
    p.add_argument("--extra-label", action="append", default=[], metavar="NAME=VALUE",
                   help="SGLang's extra_metric_labels (repeatable)")
    p.add_argument("--arrival-rate", type=float, default=12.0, help="requests per second (mean)")
    p.add_argument("--step-seconds", type=float, default=0.02)
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until signalled)")
    p.add_argument("--seed", type=int, default=1)
    # Switches of the former simulator, accepted so existing command lines keep working; the load
    # model has no such features.
    for flag in ("--no-speculative", "--no-hicache", "--no-lora"):
        p.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for option in ("--custom-label",):
        p.add_argument(option, action="append", default=[], help=argparse.SUPPRESS)
    for option in ("--decode-log-interval", "--idle-refresh-seconds"):
        p.add_argument(option, type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.sglang_tree is not None:
        p.error("--sglang-tree: the oracle's SGLang trees are gone; use --sglang-oracle [DIR] (its stand-ins)")
    if args.sglang_oracle is None and (args.sglang_version or args.sglang_trace):
        args.sglang_oracle = ""
    if args.sglang_oracle is not None:
        explicit = bool(args.sglang_oracle or args.sglang_trace)
        args.sglang_oracle = args.sglang_oracle or sglang_collectors.default_oracle()
        emul = os.path.join(args.sglang_oracle, "emul")
        if not os.path.isdir(emul) and not explicit:
            # The oracle is an optional checkout next to the repository: without it this mode has
            # nothing to run, which is not the engine's failure.
            print(f"example engine: skipped: the engine oracle is absent ({emul})", file=sys.stderr)
            raise SystemExit(0)
        args.sglang_trace = args.sglang_trace or sglang_collectors.trace_path(args.sglang_oracle, args.sglang_version)
        for path in (emul, args.sglang_trace):
            if not os.path.exists(path):
                p.error(f"{path} does not exist")
    return args


def _reporters(args):
    if args.sglang_oracle is not None:
        sglang_collectors.prepare(args.sglang_oracle, args.sglang_trace)
        return sglang_collectors.SchedulerCollector, sglang_collectors.TokenizerCollector
    import typed_path
    return typed_path.SchedulerReporter, typed_path.TokenizerReporter


def _stopper():
    flag = {"stop": False}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: flag.update(stop=True))
    return flag


def _tokenizer_main(args, extra, stop_event, finished_queue):
    flag = _stopper()
    _, tokenizer_cls = _reporters(args)
    reporter = tokenizer_cls(model_name=args.model_name, extra_labels=extra)
    while not flag["stop"] and not stop_event.is_set():
        try:
            batch = finished_queue.get(timeout=0.2)
        except Exception:  # queue.Empty
            continue
        for req in batch:
            reporter.finished(req)
    getattr(reporter, "close", lambda: None)()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.shm_dir:
        os.environ["RANKSTAT_SHM_DIR"] = args.shm_dir
    os.environ.setdefault("RANKSTAT_INSTANCE", args.instance)
    extra = dict(item.split("=", 1) for item in args.extra_label)
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    finished = ctx.Queue()
    dp_attention = not args.no_dp_attention
    tp_size = args.attn_tp * args.dp if dp_attention else args.attn_tp
    common = dict(instance=args.instance, model_name=args.model_name, extra_labels=extra, dp_size=args.dp,
                  dp_attention=dp_attention, all_schedulers=args.all_schedulers, priorities=not args.no_priorities)
    ranks = []
    for group in range(args.dp):
        for local in range(args.attn_tp):
            tp_rank = group * args.attn_tp + local if dp_attention else local
            ranks.append(dict(common, engine_type="unified", tp_rank=tp_rank, dp_rank=group, tp_size=tp_size,
                              reports_requests=(local == 0)))
        if not dp_attention:
            break
    if args.pd:
        for mode in ("prefill", "decode"):
            ranks.append(dict(common, engine_type=mode, tp_rank=0, dp_rank=None, tp_size=1, rank_key=f"{mode}-tp0",
                              reports_requests=False))
    procs = []
    for rank in ranks:
        kw = {k: v for k, v in rank.items() if k != "reports_requests"}
        if args.sglang_oracle is not None:  # SGLang's collectors take what SGLang passes them
            kw = {k: kw[k] for k in ("model_name", "engine_type", "tp_rank", "dp_rank", "extra_labels", "priorities")}
        kw["reports_requests"] = rank["reports_requests"]
        name = f"scheduler-{rank.get('rank_key') or 'tp%d' % rank['tp_rank']}"
        procs.append(ctx.Process(target=_scheduler_entry, name=name, args=(args, kw, stop, finished)))
    procs.append(ctx.Process(target=_tokenizer_main, name="tokenizer", args=(args, extra, stop, finished)))

    signalled = {"flag": False}
    for p in procs:
        p.start()
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
    finished.cancel_join_thread()
    return status


def _scheduler_entry(args, kw, stop, finished):
    rank = dict(kw)
    reports = rank.pop("reports_requests")
    _scheduler_main_with(args, rank, reports, stop, finished)


def _scheduler_main_with(args, rank, reports, stop_event, finished_queue):
    flag = _stopper()
    scheduler_cls, _ = _reporters(args)
    reporter = scheduler_cls(**rank)
    model = LoadModel(args.arrival_rate / max(1, args.dp), args.step_seconds, seed=args.seed + rank["tp_rank"])
    while not flag["stop"] and not stop_event.is_set():
        step = model.step()
        reporter.report(step)
        if step.finished and reports:
            finished_queue.put(step.finished)
        time.sleep(args.step_seconds)
    getattr(reporter, "close", lambda: None)()
    finished_queue.cancel_join_thread()


if __name__ == "__main__":
    sys.exit(main())
