#!/usr/bin/env python3
"""A lifecycle stress run: many engine processes and threads writing through the metric classes, forks,
kill -9 of writers, SIGKILL restarts of rankstatd, a second engine with the same rank names, in a small
tmpfs. At the end the counter rankstatd serves must equal what the processes are known to have counted, and
no scraped counter may ever have gone down.

    RANKSTAT_DAEMON=build/dev/daemon/rankstatd RANKSTAT_LIBRARY=build/dev/client/librankstat.so \\
    PYTHONPATH=client/python:tests/python /usr/bin/python3 tests/python/stress_lifecycle.py [--seconds 60]

How totals stay exact although writers are killed: a worker counts in batches; after each batch it tells
the parent through a pipe and waits for the word to go on. The parent kills workers only while they wait,
so every kill lands between batches and the parent knows each process's count to the unit. Forked
grandchildren count a fixed amount and exit 0 (os._exit), their parent waits for them before reporting.

Not part of ctest (it runs for a minute and mounts a tmpfs when it can); its summary is quoted in the
closing notes of the lifecycle work. Exit status 0 when the totals are exact and nothing went backwards.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from daemon_harness import Daemon, http_get, wait_until

FAMILY = "stress_events"
BATCH = 200          # increments per batch, spread over the worker's threads
THREADS = 4
FORKS_PER_BATCH = 2  # grandchildren forked by a worker in each batch, each counting FORK_COUNT
FORK_COUNT = 5

WORKER = r"""
import os, sys, threading
import rankstat
engine, worker = sys.argv[1], sys.argv[2]
# A scheduler rank: engine a's worker i and engine b's worker i have the same segment name (same default
# instance, same rank numbers), and a restarted worker takes its predecessor's name.
rankstat.backend.segment().hint_identity("scheduler", {"tp_rank": worker, "model_name": "stress"})
events = rankstat.Counter("%(family)s", "events counted by the stress workers", ["engine"])
busy = rankstat.Gauge("stress_busy", "1 while a worker counts", ["engine"], multiprocess_mode="livesum")
child = events.labels(engine=engine)
out, inp = os.fdopen(int(sys.argv[3]), "w"), os.fdopen(int(sys.argv[4]), "r")
while True:
    busy.labels(engine=engine).set(1)
    def count(n):
        for _ in range(n):
            child.inc()
    threads = [threading.Thread(target=count, args=(%(batch)d // %(threads)d,)) for _ in range(%(threads)d)]
    for t in threads: t.start()
    pids = []
    for _ in range(%(forks)d):
        pid = os.fork()
        if pid == 0:
            for _ in range(%(fork_count)d):
                child.inc()
            os._exit(0)
        pids.append(pid)
    for t in threads: t.join()
    for pid in pids:
        os.waitpid(pid, 0)
    busy.labels(engine=engine).set(0)
    out.write("batch\n"); out.flush()
    if inp.readline().strip() != "go":
        break
""" % {"family": FAMILY, "batch": BATCH, "threads": THREADS, "forks": FORKS_PER_BATCH, "fork_count": FORK_COUNT}

PER_BATCH = BATCH + FORKS_PER_BATCH * FORK_COUNT


class Worker:
    def __init__(self, engine, index, env):
        self.engine = engine
        r_up, w_up = os.pipe()
        r_down, w_down = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, engine, str(index), str(w_up), str(r_down)],
                                     env=env, pass_fds=(w_up, r_down))
        os.close(w_up)
        os.close(r_down)
        self.up = os.fdopen(r_up, "r")
        self.down = os.fdopen(w_down, "w")
        self.batches = 0

    def wait_batch(self):
        line = self.up.readline()
        if line.strip() != "batch":
            raise RuntimeError(f"worker {self.proc.pid} ({self.engine}) stopped: {line!r}")
        self.batches += 1

    def go(self):
        self.down.write("go\n")
        self.down.flush()

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)
        self.up.close()
        self.down.close()

    def stop(self):
        self.down.write("stop\n")
        self.down.flush()
        self.proc.wait(30)
        self.up.close()
        self.down.close()


def served_totals(daemon):
    status, body = http_get(f"http://127.0.0.1:{daemon.port}/metrics", timeout=10)
    if status != 200:
        return None
    out = {}
    for m in re.finditer(r'^%s_total\{engine="([^"]+)"\} (\S+)$' % FAMILY, body, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=8, help="per engine")
    ap.add_argument("--tmpfs-mib", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    random.seed(a.seed)
    root = tempfile.mkdtemp(prefix="rankstat-stress-")
    shm = os.path.join(root, "shm")
    os.makedirs(shm)
    mounted = False
    if os.geteuid() == 0 and shutil.which("mount"):
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.tmpfs_mib}m", "tmpfs", shm],
                                 capture_output=True).returncode == 0
    state = os.path.join(root, "state")
    os.makedirs(state, mode=0o700)

    def start_daemon(n):
        files = os.path.join(root, f"files{n}")  # its own address file
        os.makedirs(files)
        return Daemon(shm, files, flags)
    env = dict(os.environ, RANKSTAT_SHM_DIR=shm)
    flags = [f"--state.dir={state}", "--liveness.dead-grace=2s", "--liveness.interval=50ms"]
    daemon = start_daemon(0)
    engines = ("a", "b")  # two engines, default instance, the same rank names
    workers = [Worker(e, i, env) for e in engines for i in range(a.workers)]
    done = {e: 0 for e in engines}     # batches of workers no longer running
    last_seen, backwards, scrapes, daemon_restarts, kills = {}, 0, 0, 0, 0
    stop_scraping = threading.Event()
    scrape_lock = threading.Lock()
    box = {"daemon": daemon}

    def scraper():
        nonlocal backwards, scrapes
        while not stop_scraping.is_set():
            with scrape_lock:
                d = box["daemon"]
                try:
                    got = served_totals(d)
                except OSError:
                    got = None
            if got:
                scrapes += 1
                for k, v in got.items():
                    if v < last_seen.get(k, 0):
                        backwards += 1
                        print(f"BACKWARDS: {k} {last_seen[k]} -> {v}", file=sys.stderr)
                    last_seen[k] = max(v, last_seen.get(k, 0))
            time.sleep(0.05)

    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    started = time.monotonic()
    next_daemon_kill = started + a.seconds / 4
    while time.monotonic() - started < a.seconds:
        for i, w in enumerate(workers):
            w.wait_batch()
            if random.random() < 0.05:  # kill -9 between batches, then a new process in its place
                done[w.engine] += w.batches
                w.kill()
                kills += 1
                workers[i] = Worker(w.engine, i, env)
            else:
                w.go()
        if time.monotonic() > next_daemon_kill:
            with scrape_lock:
                box["daemon"].child.proc.send_signal(signal.SIGKILL)
                box["daemon"].child.proc.wait(10)
                daemon_restarts += 1
                box["daemon"] = start_daemon(daemon_restarts)
            next_daemon_kill += a.seconds / 4
    for w in workers:
        w.wait_batch()
        w.stop()
        done[w.engine] += w.batches
    expected = {e: float(done[e] * PER_BATCH) for e in engines}
    ok = wait_until(lambda: served_totals(box["daemon"]) == expected, 20)
    stop_scraping.set()
    t.join(5)
    final = served_totals(box["daemon"])
    summary = {"seconds": a.seconds, "engines": len(engines), "workers_per_engine": a.workers,
               "threads_per_worker": THREADS, "forked_children": sum(done.values()) * FORKS_PER_BATCH,
               "writers_killed": kills, "daemon_sigkill_restarts": daemon_restarts, "tmpfs_mib": a.tmpfs_mib if mounted else None,
               "scrapes": scrapes, "counter_decreases": backwards, "expected": expected, "served": final,
               "exact": bool(ok)}
    print(json.dumps(summary, indent=1))
    box["daemon"].stop()
    if mounted:
        subprocess.run(["umount", shm])
    shutil.rmtree(root, ignore_errors=True)
    return 0 if ok and backwards == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
