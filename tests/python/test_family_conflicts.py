"""Two processes that declare one family differently (a gauge's multiprocess_mode, a histogram's
buckets) cost that family's losing series only, never a process: through rankstatd, with real processes
writing through the rankstat package.

* every unrelated family of both processes is served;
* the conflicting family is served as the newest live declaration says (the process started last), the
  same whether the daemon found the segments one by one or both at once;
* rankstat_family_conflicts_total counts each conflict, and the log says it once, in words;
* an upgrade: the old engine exits, the new one declares other buckets: the new buckets are served at
  once, the counters keep counting across the two, and once the old generation is retired the new
  declaration is all that is left (a third process with the new buckets adds to the same histogram)."""

import os
import re
import subprocess
import sys
import unittest

from daemon_harness import Daemon, Exposition, TempDir, wait_until

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

WRITER = """
import sys, time
import rankstat
mode, buckets, own, observations, counted = sys.argv[1], eval(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
rankstat.Gauge("test_conflict_gauge", "contested mode", multiprocess_mode=mode).set(1 if mode == "livesum" else 9)
rankstat.Counter(own, "a family of this process only").inc(counted)
rankstat.Counter("test_conflict_requests", "every process counts here").inc(counted)
histogram = rankstat.Histogram("test_conflict_latency_seconds", "contested buckets", buckets=buckets)
for _ in range(observations):
    histogram.observe(0.5)
print("READY", flush=True)
if sys.stdin.readline() == "":
    sys.exit(0)
"""


class Writer:
    """One engine process; it exits (cleanly) when told to."""

    def __init__(self, shm, mode, buckets, own, observations, counted):
        env = dict(os.environ, RANKSTAT_SHM_DIR=shm, RANKSTAT_INSTANCE="conflict")
        self.process = subprocess.Popen(
            [PYTHON, "-c", WRITER, mode, repr(buckets), own, str(observations), str(counted)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline().strip()
        if line != "READY":
            self.stop()
            raise RuntimeError(f"writer did not start: {line!r}")

    @property
    def pid(self):
        return self.process.pid

    def stop(self):
        if self.process.returncode is None:
            try:
                self.process.stdin.close()
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process.stdout.close()
        return self.process.returncode


def histogram_of(exposition, family):
    """{le: count} of the family's buckets and its _count."""
    buckets = {labels["le"]: value for name, labels, value in exposition.family_samples(family)
               if name == family + "_bucket"}
    return buckets, exposition.value(family + "_count")


class FamilyConflicts(unittest.TestCase):
    def setUp(self):
        self.shm = TempDir("rankstat-conflict-shm")
        self.files = TempDir("rankstat-conflict-files")
        self.addCleanup(self.shm.cleanup)
        self.addCleanup(self.files.cleanup)

    def writer(self, *args):
        w = Writer(self.shm.path, *args)
        self.addCleanup(w.stop)
        return w

    def daemon(self, *extra):
        d = Daemon(self.shm.path, self.files.path, ["--liveness.interval=50ms", *extra])
        self.addCleanup(d.stop)
        return d

    def check_two_processes(self, daemon, older, newer):
        def settled():
            e = Exposition(daemon.scrape())
            return e if e.value("rankstat_family_conflicts_total") == 2.0 else None
        e = wait_until(settled, 15)
        self.assertIsNotNone(e, daemon.child.log()[-3000:])
        # Every unrelated family of both processes.
        self.assertEqual(e.value("test_conflict_one_total"), 1.0)
        self.assertEqual(e.value("test_conflict_two_total"), 2.0)
        self.assertEqual(e.value("test_conflict_requests_total"), 3.0)
        # The contested families: the newer process's declaration, and only its series.
        self.assertEqual(e.values("test_conflict_gauge"), [9.0])
        self.assertEqual(histogram_of(e, "test_conflict_latency_seconds"),
                         ({"5.0": 2.0, "10.0": 2.0, "+Inf": 2.0}, 2.0))
        self.assertEqual(e.value("rankstat_family_conflict_series"), 2.0)
        # One log line per conflict, in words, naming both segments' processes.
        log = daemon.child.log()
        gauge_lines = [line for line in log.splitlines() if "family test_conflict_gauge is declared" in line]
        self.assertEqual(len(gauge_lines), 1, log[-3000:])
        self.assertIn("gauge (multiprocess_mode livesum)", gauge_lines[0])
        self.assertIn("gauge (multiprocess_mode max)", gauge_lines[0])
        self.assertIn(f"pid {older.pid}", gauge_lines[0])
        self.assertIn(f"pid {newer.pid}", gauge_lines[0])
        histogram_lines = [line for line in log.splitlines()
                           if "family test_conflict_latency_seconds is declared" in line]
        self.assertEqual(len(histogram_lines), 1, log[-3000:])
        self.assertIn("histogram with buckets [1.0, 2.0, +Inf]", histogram_lines[0])
        self.assertIn("histogram with buckets [5.0, 10.0, +Inf]", histogram_lines[0])
        self.assertRegex(histogram_lines[0], re.escape("rankstat.conflict."))

    def test_two_processes_found_one_by_one_lose_only_the_older_declarations_series(self):
        daemon = self.daemon()
        older = self.writer("livesum", (1.0, 2.0), "test_conflict_one", 3, 1)
        self.assertTrue(wait_until(lambda: Exposition(daemon.scrape()).value("test_conflict_one_total") == 1.0, 10))
        newer = self.writer("max", (5.0, 10.0), "test_conflict_two", 2, 2)
        self.check_two_processes(daemon, older, newer)

    def test_two_processes_found_at_once_give_the_same_result(self):
        older = self.writer("livesum", (1.0, 2.0), "test_conflict_one", 3, 1)
        newer = self.writer("max", (5.0, 10.0), "test_conflict_two", 2, 2)
        self.check_two_processes(self.daemon(), older, newer)

    def test_an_upgrade_that_changes_a_histograms_buckets_serves_the_new_ones_and_forgets_the_old(self):
        state = TempDir("rankstat-conflict-state")
        self.addCleanup(state.cleanup)
        daemon = self.daemon(f"--state.dir={state.path}", "--liveness.dead-grace=300ms")
        old = self.writer("livesum", (1.0, 2.0), "test_conflict_one", 3, 4)
        self.assertTrue(wait_until(
            lambda: histogram_of(Exposition(daemon.scrape()), "test_conflict_latency_seconds")[1] == 3.0, 10))
        self.assertEqual(old.stop(), 0)
        new = self.writer("livesum", (5.0, 10.0, 20.0), "test_conflict_two", 2, 5)
        new_buckets = {"5.0": 2.0, "10.0": 2.0, "20.0": 2.0, "+Inf": 2.0}
        e = wait_until(lambda: (lambda x: x if histogram_of(x, "test_conflict_latency_seconds") ==
                                (new_buckets, 2.0) else None)(Exposition(daemon.scrape())), 10)
        self.assertIsNotNone(e, daemon.child.log()[-3000:])
        self.assertEqual(e.value("test_conflict_requests_total"), 9.0)  # the old engine's 4 stay in
        self.assertEqual(e.value("test_conflict_one_total"), 4.0)
        self.assertEqual(e.value("rankstat_family_conflicts_total"), 1.0)  # the retired totals' buckets
        # The new engine exits too: its totals replace the old declaration's in the retired totals.
        self.assertEqual(new.stop(), 0)
        self.assertTrue(wait_until(
            lambda: Exposition(daemon.scrape()).value("rankstat_generation_events_total", event="retired") == 2.0,
            10), daemon.child.log()[-3000:])
        e = Exposition(daemon.scrape())
        self.assertEqual(histogram_of(e, "test_conflict_latency_seconds"), (new_buckets, 2.0))
        self.assertEqual(e.value("test_conflict_requests_total"), 9.0)
        self.assertEqual(e.value("rankstat_family_conflict_series"), 0.0)
        # A third process with the new buckets adds to the same histogram: no conflict is left.
        self.writer("livesum", (5.0, 10.0, 20.0), "test_conflict_three", 1, 1)
        three = {"5.0": 3.0, "10.0": 3.0, "20.0": 3.0, "+Inf": 3.0}
        self.assertTrue(wait_until(lambda: histogram_of(Exposition(daemon.scrape()),
                                                        "test_conflict_latency_seconds") == (three, 3.0), 10))
        self.assertEqual(Exposition(daemon.scrape()).value("rankstat_family_conflicts_total"), 1.0)
        self.assertIn("the retired totals now carry it as histogram with buckets [5.0, 10.0, 20.0, +Inf]",
                      daemon.child.log())


if __name__ == "__main__":
    unittest.main()
