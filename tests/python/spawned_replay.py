"""An engine that replays an oracle trace in a child started with multiprocessing's spawn method, as SGLang
starts its scheduler processes: the child is a fresh interpreter, so rankstat reaches it only through the
start-up file and the environment (RANKSTAT_SGLANG / RANKSTAT_VLLM), never through the parent's state.

    spawned_replay.py ORACLE TRACE BACKEND SUMMARY_JSON HOLD_SECONDS

The child prints ORACLE-READY on stderr after the replay and holds; SUMMARY_JSON gets the replay's
summary (blocks, errors) plus `family_list`: the families left in prometheus_client's multiprocess files
and `child_pid`."""

import json
import multiprocessing
import os
import sys
import tempfile
import time


def replay_in_child(oracle: str, trace_path: str, backend: str, summary_path: str, hold: float) -> None:
    sys.path[:0] = [os.path.join(oracle, "emul"), oracle]
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="spawned-replay-mp-")
    import engine_oracle_emul
    import replay
    with open(trace_path) as f:
        trace = json.load(f)
    engine_oracle_emul.use(trace)
    session = replay.Session(trace, backend)
    session.run()
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    left = replay.families(generate_latest(registry).decode(), own_prefixes=())
    summary = session.summary()
    summary.update(family_list=sorted(left), child_pid=os.getpid(),
                   rankstat_loaded="rankstat" in sys.modules)
    with open(summary_path, "w") as f:
        json.dump(summary, f)
    print("ORACLE-READY", file=sys.stderr, flush=True)
    time.sleep(hold)


def main(argv) -> int:
    oracle, trace_path, backend, summary_path, hold = argv[1:6]
    child = multiprocessing.get_context("spawn").Process(
        target=replay_in_child, args=(oracle, trace_path, backend, summary_path, float(hold)))
    child.start()
    child.join()
    return child.exitcode or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
