"""fork() in a process that writes metrics (issue 22): multiprocessing's fork start method, vLLM's workers, any
library that forks.

- The parent's segment is the parent's: nothing in a child writes its header or removes it, so the daemon
  keeps the parent LIVE (polled through /api/v1/ranks the whole time, and no state change for the parent in
  the daemon's log) and counts every later write of the parent.
- Every metric object and label child that existed before the fork keeps working in the child: its first
  update re-binds it to the child's own segment, starting from 0, as prometheus_client's values re-bind to
  the child's own files on a new pid. Totals are exact: parent + children.
- No lock of the package that another thread held at the fork can hang the child.

Every scenario runs twice: with the C extension (rankstat._fastpath) and with its pure-Python twin
(RANKSTAT_NO_FASTPATH=1). Writers are real processes under a real rankstatd."""

import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from typing import Dict, List

from daemon_harness import Daemon, Exposition, TempDir, http_get, wait_until

from rankstat import _accel, _slowpath

# What every writer starts with: which implementation it runs, a bounded wait for a forked child, and the
# end of the run (the writer stays alive until the test closes its stdin).
PRELUDE = textwrap.dedent("""
    import json, os, sys, threading, time
    from rankstat import Counter, Gauge, Histogram, Summary, Reporter, _accel, backend
    print("FAST", _accel.FAST, flush=True)

    def wait_children(pids, timeout=30.0):
        # Exit codes of forked children; "hung" for one still running `timeout` s from now (then killed).
        deadline = time.monotonic() + timeout
        codes = {}
        while len(codes) < len(pids) and time.monotonic() < deadline:
            for pid in pids:
                if pid not in codes:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        codes[pid] = os.waitstatus_to_exitcode(status)
            time.sleep(0.002)
        for pid in pids:
            if pid not in codes:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                codes[pid] = "hung"
        return [codes[pid] for pid in pids]

    def wait_child(pid, timeout=30.0):
        return wait_children([pid], timeout)[0]

    def ready():
        print("PARENT_READY", flush=True)
        sys.stdin.readline()  # the test has seen this process LIVE

    def finish():
        time.sleep(1.0)  # several liveness passes of the daemon after the last fork
        print("DONE", flush=True)
        sys.stdin.readline()
""")

# Every kind of metric used before the fork, then used in the child (inherited children, a new label value,
# histogram internals), then by the parent again. A plain Reporter the child closes on purpose.
FORK_AFTER_USE = PRELUDE + textwrap.dedent("""
    plain = Reporter(role="tokenizer", rank_key="plain")
    plain_counter = plain.counter("fk:plain_total")
    work = Counter("fk:work_total", "Work.", ["stage"])
    level = Gauge("fk:level", "Level.", multiprocess_mode="livesum")
    latency = Histogram("fk:latency_seconds", "Latency.", buckets=[1.0])
    size = Summary("fk:size_bytes", "Size.")
    before = work.labels(stage="before")
    before.inc(10)
    level.set(5)
    latency.observe(0.5)
    size.observe(100)
    plain_counter.inc(1)
    ready()
    pid = os.fork()
    if pid == 0:
        problems = []
        def expect(what, got, want):
            if got != want:
                problems.append(f"{what}: {got} != {want}")
        try:
            plain.close()  # what a careless child does with what it inherited: must not close the parent's
            expect("inherited child before any update", before.get(), 0.0)
            before.inc(3)
            expect("inherited child after inc(3)", before.get(), 3.0)
            expect("labels() returns the inherited child", work.labels(stage="before") is before, True)
            work.labels(stage="after").inc(4)
            latency.observe(2.0)
            latency._buckets[0].inc(2)
            latency._sum.inc(1.0)
            expect("histogram sum in the child", latency._sum.get(), 3.0)
            size.observe(50)
            level.set(7)
            expect("gauge in the child", level._value.get(), 7.0)
        except BaseException as e:
            problems.append(repr(e))
        print("CHILD", os.getpid(), json.dumps(problems), flush=True)
        os._exit(1 if problems else 0)
    print("CHILD_EXIT", wait_child(pid), flush=True)
    before.inc(20)
    level.set(6)
    plain_counter.inc(1)
    print("PARENT_VALUES", before.get(), latency._sum.get(), flush=True)
    finish()
""")

# multiprocessing's fork Pool doing counted work.
FORK_POOL = PRELUDE + textwrap.dedent("""
    import multiprocessing
    work = Counter("fk:pool_work_total", "Work.")
    tasks = Counter("fk:pool_tasks_total", "Tasks.", ["by"])
    work.inc(1)
    ready()

    def task(n):
        for _ in range(n):
            work.inc()
        tasks.labels(by="worker").inc()
        return os.getpid()

    pool = multiprocessing.get_context("fork").Pool(4)
    pids = pool.map(task, [250] * 20, chunksize=1)
    pool.close()
    pool.join()
    work.inc(1)
    print("WORKERS", len(set(pids)), flush=True)
    finish()
""")

# Forks while 8 threads count and register new label values; every child labels a new value and updates
# an inherited child, then exits. A child that has not exited after 30 s is killed and reported as hung.
FORK_UNDER_THREADS = PRELUDE + textwrap.dedent("""
    FORKS = 25
    sys.setswitchinterval(1e-4)  # the forking thread takes the GIL from the writers often
    hits = Counter("fk:threads_total", "Work.", ["t", "k"])
    first = hits.labels(t="main", k="0")
    first.inc()
    ready()
    start = threading.Barrier(9)
    stop = threading.Event()
    counts = [0] * 8

    def writer(i):
        start.wait()
        n = 0
        while n < 450 or not stop.is_set():
            hits.labels(t=str(i), k=str(n % 450)).inc()  # a new label value each of the first 450 times
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    start.wait()
    children = []
    for _ in range(FORKS):
        pid = os.fork()
        if pid == 0:
            try:
                hits.labels(t="child", k="new").inc()
                first.inc()
                os._exit(0)
            except BaseException:
                os._exit(3)
        children.append(pid)
    codes = wait_children(children)
    stop.set()
    for t in threads:
        t.join()
    first.inc()
    print("CODES", json.dumps(codes), flush=True)
    print("COUNTS", json.dumps(counts), flush=True)
    finish()
""")

# os.fork(); os._exit(0) 200 times while the parent (and a thread of it) keeps counting.
FORK_AND_EXIT = PRELUDE + textwrap.dedent("""
    loop = Counter("fk:loop_total", "Loop.")
    background = Counter("fk:background_total", "Background.")
    alive = Gauge("fk:alive", "Alive.", multiprocess_mode="livesum")
    alive.set(1)
    loop.inc(0)
    background.inc(0)
    ready()
    stop = threading.Event()
    done = [0]

    def count():
        n = 0
        while not stop.is_set():
            background.inc()
            n += 1
            if n % 200 == 0:
                time.sleep(0.001)
        done[0] = n

    counter = threading.Thread(target=count)
    counter.start()
    codes = set()
    for _ in range(200):
        loop.inc()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        codes.add(wait_child(pid))
        loop.inc()
    stop.set()
    counter.join()
    print("CODES", json.dumps(sorted(codes, key=str)), flush=True)
    print("BACKGROUND", done[0], flush=True)
    finish()
""")

# Another thread holds every lock of the package (and is inside a prometheus_client class swap) when the
# process forks, and never lets go: the child must register, update and swap all the same.
LOCKS_HELD_AT_FORK = PRELUDE + textwrap.dedent("""
    import prometheus_client
    import rankstat
    from rankstat import _import_hook, _native, metrics
    from rankstat import sglang as rs_sglang, vllm as rs_vllm
    plain = Reporter(role="tokenizer", rank_key="plain")
    plain_counter = plain.counter("fk:plain_total")
    hits = Counter("fk:locked_total", "Work.", ["k"])
    inherited = hits.labels(k="before")
    inherited.inc()
    held = threading.Event()

    def hold_everything():
        with rs_sglang.prometheus_classes_swapped():
            for lock in (metrics._registration_lock, backend.segment()._lock, _native._lock, _import_hook._lock,
                         rs_sglang._subclass_lock, rs_sglang._install_lock, rs_vllm._lock, plain._lock):
                lock.acquire()
            held.set()
            threading.Event().wait()  # forever

    threading.Thread(target=hold_everything, daemon=True).start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        problems = []
        try:
            hits.labels(k="new").inc()
            inherited.inc()
            plain_counter.inc()
            if hits.labels(k="new").get() != 1.0 or inherited.get() != 1.0:
                problems.append("counts in the child")
            for name, lock in (("registration", metrics._registration_lock), ("segment", backend.segment()._lock),
                               ("native", _native._lock), ("import hook", _import_hook._lock),
                               ("sglang subclass", rs_sglang._subclass_lock), ("sglang install", rs_sglang._install_lock),
                               ("vllm", rs_vllm._lock), ("reporter", plain._lock)):
                if not lock.acquire(timeout=5):
                    problems.append(f"the {name} lock is still held")
                else:
                    lock.release()
            if prometheus_client.Counter is rankstat.Counter:
                problems.append("prometheus_client keeps rankstat's classes after a swap another thread was in")
            with rs_sglang.prometheus_classes_swapped():
                if prometheus_client.Counter is not rankstat.Counter:
                    problems.append("the swap does not work in the child")
        except BaseException as e:
            problems.append(repr(e))
        print("CHILD", json.dumps(problems), flush=True)
        os._exit(1 if problems else 0)
    print("CHILD_EXIT", wait_child(pid, timeout=20), flush=True)
    os._exit(0)  # the holder thread keeps the plain Reporter's lock: its finaliser would wait forever
""")


def read_line(proc: subprocess.Popen, deadline: float) -> str:
    remaining = deadline - time.monotonic()
    if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
        raise AssertionError(f"writer {proc.pid} did not answer in time")
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"writer {proc.pid} ended early (exit {proc.wait(5)})")
    return line.strip()


class StatePoller:
    """Polls /api/v1/ranks every 50 ms and keeps every state seen for the ranks of one pid."""

    def __init__(self, daemon: Daemon, pid: int):
        self.daemon, self.pid = daemon, pid
        self.seen: Dict[str, List[str]] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for rank in ranks(self.daemon):
                    if rank.get("pid") == self.pid:
                        self.seen.setdefault(rank["id"], []).append(rank["state"])
            except Exception:
                self.errors += 1
            self._stop.wait(0.05)

    def stop(self) -> Dict[str, List[str]]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


def ranks(daemon: Daemon) -> list:
    status, body = http_get(f"http://127.0.0.1:{daemon.port}/api/v1/ranks")
    if status != 200:
        raise RuntimeError(f"/api/v1/ranks answered {status}")
    return json.loads(body)["ranks"]


def total(e: Exposition, name: str) -> float:
    return sum(e.values(name))


class _ForkScenarios:
    """The scenarios; a subclass names the implementation (NO_FASTPATH)."""

    NO_FASTPATH = "0"

    def setUp(self):
        if self.NO_FASTPATH == "0" and _accel.fastpath_module() is None:
            self.skipTest("the C extension is not built")
        shm = TempDir("rankstat-fork-shm")
        files = TempDir("rankstat-fork-files")
        self.addCleanup(shm.cleanup)
        self.addCleanup(files.cleanup)
        self.shm = shm.path
        self.daemon = Daemon(shm.path, files.path, ["--liveness.interval=100ms"])
        self.addCleanup(self.daemon.child.kill)

    def start(self, script: str) -> subprocess.Popen:
        env = dict(os.environ, RANKSTAT_SHM_DIR=self.shm, RANKSTAT_NO_FASTPATH=self.NO_FASTPATH)
        # In a session of its own: the cleanup kills the writer and every child it forked, hung or not.
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)

        def kill():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()
        self.addCleanup(kill)
        self.deadline = time.monotonic() + 120
        self.assertEqual(read_line(proc, self.deadline), f"FAST {self.NO_FASTPATH == '0'}")
        return proc

    def until(self, proc: subprocess.Popen, marker: str) -> Dict[str, str]:
        """The writer's lines up to `marker`, as {first word: rest of the line}."""
        lines: Dict[str, str] = {}
        while True:
            line = read_line(proc, self.deadline)
            word, _, rest = line.partition(" ")
            lines[word] = rest
            if word == marker:
                return lines

    def go_on(self, proc: subprocess.Popen) -> None:
        proc.stdin.write("\n")
        proc.stdin.flush()

    def start_live(self, script: str):
        """The writer, once the daemon shows its segments LIVE, and a poller of its states from then on."""
        proc = self.start(script)
        self.until(proc, "PARENT_READY")
        live = wait_until(lambda: [r for r in ranks(self.daemon) if r.get("pid") == proc.pid and r["state"] == "LIVE"],
                          20)
        self.assertTrue(live, f"the writer's segment never showed LIVE: {ranks(self.daemon)}")
        poller = StatePoller(self.daemon, proc.pid)
        self.go_on(proc)
        return proc, poller

    def exposition_when(self, condition) -> Exposition:
        box = {}

        def complete():
            box["e"] = Exposition(self.daemon.scrape())
            return condition(box["e"])
        self.assertTrue(wait_until(complete, 20), box["e"].text if "e" in box else "no scrape")
        return box["e"]

    def assert_live_throughout(self, proc: subprocess.Popen, poller: StatePoller, segments: int = 1) -> None:
        seen = poller.stop()
        self.assertEqual(len(seen), segments, f"the writer's segments seen: {seen}")
        for rank_id, states in seen.items():
            self.assertGreater(len(states), 10, f"{rank_id} was polled too rarely: {states}")
            self.assertEqual(set(states), {"LIVE"}, f"{rank_id} was not LIVE throughout: {states}")
        transitions = re.findall(rf"\(pid {proc.pid}\): LIVE -> \S+", self.daemon.child.log())
        self.assertEqual(transitions, [], "the daemon changed the state of the writer")

    # --- the scenarios ---

    def test_a_fork_after_use_leaves_the_parent_live_and_counting_and_the_child_starts_its_own_series(self):
        proc, poller = self.start_live(FORK_AFTER_USE)
        lines = self.until(proc, "DONE")
        self.assertEqual(lines["CHILD"].split(" ", 1)[1], "[]", lines["CHILD"])
        self.assertEqual(lines["CHILD_EXIT"], "0")
        self.assertEqual(lines["PARENT_VALUES"], "30.0 0.5")  # the parent's own values, untouched by the child
        child_pid = int(lines["CHILD"].split()[0])
        e = self.exposition_when(lambda e: e.value("fk:work_total", stage="before") == 33.0)
        self.assertEqual(e.value("fk:work_total", stage="after"), 4.0)
        self.assertEqual(e.value("fk:latency_seconds_count"), 4.0)  # 1 parent; 1 + 2 in the child
        self.assertEqual(e.value("fk:latency_seconds_sum"), 3.5)
        self.assertEqual(e.value("fk:latency_seconds_bucket", le="1.0"), 3.0)
        self.assertEqual(e.value("fk:size_bytes_count"), 2.0)
        self.assertEqual(e.value("fk:size_bytes_sum"), 150.0)
        self.assertEqual(e.value("fk:level"), 6.0)  # livesum: the live parent's last value only
        self.assertEqual(total(e, "fk:plain_total"), 2.0)
        self.assert_live_throughout(proc, poller, segments=2)  # the metric classes' and the plain Reporter's
        child_ranks = [r for r in ranks(self.daemon) if r.get("pid") == child_pid]
        self.assertEqual([r["id"] for r in child_ranks], [f"default.other.pid{child_pid}"])

    def test_a_multiprocessing_fork_pool_counts_exactly_the_parent_and_its_workers(self):
        proc, poller = self.start_live(FORK_POOL)
        lines = self.until(proc, "DONE")
        self.assertGreaterEqual(int(lines["WORKERS"]), 1)
        e = self.exposition_when(lambda e: e.value("fk:pool_work_total") == 5002.0)
        self.assertEqual(e.value("fk:pool_tasks_total", by="worker"), 20.0)
        self.assert_live_throughout(proc, poller)

    def test_forks_while_8_threads_register_label_values_never_hang_a_child_and_counts_are_exact(self):
        proc, poller = self.start_live(FORK_UNDER_THREADS)
        lines = self.until(proc, "DONE")
        codes = json.loads(lines["CODES"])
        self.assertEqual(codes, [0] * 25, "children that did not exit cleanly (\"hung\": killed after 30 s)")
        counts = json.loads(lines["COUNTS"])
        expected = sum(counts) + 2 + 2 * 25
        e = self.exposition_when(lambda e: total(e, "fk:threads_total") == expected)
        self.assertEqual(e.value("fk:threads_total", t="child", k="new"), 25.0)
        self.assertEqual(e.value("fk:threads_total", t="main", k="0"), 2.0 + 25)
        for i, n in enumerate(counts):
            self.assertEqual(sum(e.values("fk:threads_total", t=str(i))), n)
        self.assert_live_throughout(proc, poller)

    def test_fork_and_exit_200_times_while_counting_leaves_the_parent_live_and_every_count(self):
        proc, poller = self.start_live(FORK_AND_EXIT)
        lines = self.until(proc, "DONE")
        self.assertEqual(json.loads(lines["CODES"]), [0])
        background = int(lines["BACKGROUND"])
        e = self.exposition_when(lambda e: e.value("fk:background_total") == background)
        self.assertEqual(e.value("fk:loop_total"), 400.0)
        self.assertEqual(e.value("fk:alive"), 1.0)
        self.assert_live_throughout(proc, poller)
        self.assertEqual(len(os.listdir(self.shm)), 1, "a child that wrote nothing made a segment")

    def test_a_lock_another_thread_holds_at_the_fork_never_hangs_the_child(self):
        proc = self.start(LOCKS_HELD_AT_FORK)
        lines = self.until(proc, "CHILD_EXIT")
        self.assertEqual(lines.get("CHILD"), "[]")
        self.assertEqual(lines["CHILD_EXIT"], "0")


@unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
class WithTheExtension(_ForkScenarios, unittest.TestCase):
    NO_FASTPATH = "0"


@unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
class WithThePurePythonTwin(_ForkScenarios, unittest.TestCase):
    NO_FASTPATH = "1"


class ValueRebinding(unittest.TestCase):
    """_detach / _bind / _rebind, alike in the extension and its Python twin (no fork needed)."""

    def implementations(self):
        out = [("python", _slowpath)]
        fast = _accel.fastpath_module()
        if fast is not None:
            out.append(("extension", fast))
        return out

    def test_a_detached_value_calls_rebind_once_before_its_next_update(self):
        for name, impl in self.implementations():
            with self.subTest(impl=name):
                calls = []

                class Child(impl.Value):
                    def _rebind(self):
                        calls.append(self._series_id)
                        self._bind(0, 7)

                v = Child(0, 3, 1)
                self.assertFalse(v._detached)
                v._detach()
                self.assertTrue(v._detached)
                self.assertEqual(v._reporter_address, 0)
                self.assertIn("(detached)", repr(v))
                v.inc()
                v.inc()
                self.assertEqual(calls, [3])
                self.assertEqual((v._detached, v._series_id, v._reporter_address), (False, 7, 0))

    def test_every_update_method_rebinds_and_the_default_rebind_makes_a_no_op(self):
        for name, impl in self.implementations():
            for kind, update in ((1, lambda v: v.inc(2)), (2, lambda v: v.set(1)), (2, lambda v: v.dec()),
                                 (3, lambda v: v.observe(1)), (4, lambda v: v.observe(1))):
                with self.subTest(impl=name, kind=kind):
                    calls = []

                    class Child(impl.Value):
                        def _rebind(self):
                            calls.append(1)
                            self._reporter_address = 0

                    v = Child(0, 0, kind)
                    v._detach()
                    update(v)
                    self.assertEqual(calls, [1])
                    self.assertFalse(v._detached)
                    plain = impl.Value(0, 0, kind)
                    plain._detach()
                    update(plain)
                    self.assertFalse(plain._detached)

    def test_bind_checks_its_arguments_and_a_failing_rebind_propagates(self):
        for name, impl in self.implementations():
            with self.subTest(impl=name):
                v = impl.Value(0, 0, 1)
                for bad in (-1, 1 << 32, 1 << 70):
                    with self.assertRaises(ValueError):
                        v._bind(0, bad)
                for bad in ("1", 1.5):
                    with self.assertRaises(TypeError):
                        v._bind(0, bad)

                class Failing(impl.Value):
                    def _rebind(self):
                        raise KeyError("boom")

                f = Failing(0, 0, 1)
                f._detach()
                with self.assertRaises(KeyError):
                    f.inc()
                f._reporter_address = 0  # an address given is the end of detachment
                self.assertFalse(f._detached)
                f.inc()


if __name__ == "__main__":
    unittest.main()
