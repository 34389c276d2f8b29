"""A counter that took +Inf or NaN, and a histogram whose sum is +Inf, keep those totals once their
process has exited, as prometheus_client's multiprocess collector keeps them in the process's file:
through rankstatd's retired totals, and across a daemon restart with --state.dir (the state file writes
them as "+Inf" and "NaN", JSON having neither)."""

import math
import os
import subprocess
import sys
import unittest

from daemon_harness import Daemon, Exposition, TempDir, wait_until

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

WRITER = """
import rankstat
rankstat.Counter("test_nonfinite_inf", "took +Inf").inc(float("inf"))
rankstat.Counter("test_nonfinite_nan", "took NaN").inc(float("nan"))
rankstat.Counter("test_nonfinite_finite", "took 2").inc(2)
rankstat.Histogram("test_nonfinite_seconds", "observed +Inf", buckets=(1.0,)).observe(float("inf"))
"""


class NonFiniteTotalsTest(unittest.TestCase):
    def daemon(self, shm, state):
        files = TempDir("rankstat-nonfinite-files")
        self.addCleanup(files.cleanup)
        daemon = Daemon(shm, files.path, [f"--state.dir={state}", "--liveness.dead-grace=200ms"])
        self.addCleanup(daemon.stop)
        return daemon

    def check(self, e, log):
        self.assertEqual(e.value("test_nonfinite_inf_total"), math.inf, log)
        self.assertTrue(math.isnan(e.value("test_nonfinite_nan_total")), log)
        self.assertEqual(e.value("test_nonfinite_finite_total"), 2.0, log)
        self.assertEqual(e.value("test_nonfinite_seconds_sum"), math.inf, log)
        self.assertEqual(e.value("test_nonfinite_seconds_count"), 1.0, log)

    def test_a_dead_processs_inf_and_nan_counters_stay_after_retirement_and_a_daemon_restart(self):
        shm = TempDir("rankstat-nonfinite-shm")
        self.addCleanup(shm.cleanup)
        state = TempDir("rankstat-nonfinite-state")
        self.addCleanup(state.cleanup)
        os.chmod(state.path, 0o700)
        daemon = self.daemon(shm.path, state.path)
        env = dict(os.environ, RANKSTAT_SHM_DIR=shm.path, RANKSTAT_INSTANCE="nonfinite")
        subprocess.run([PYTHON, "-c", WRITER], env=env, check=True, timeout=60)
        retired = wait_until(lambda: Exposition(daemon.scrape()).value(
            "rankstat_generation_events_total", event="retired") == 1.0, 15)
        self.assertTrue(retired, daemon.child.log()[-3000:])
        self.check(Exposition(daemon.scrape()), daemon.child.log()[-3000:])
        with open(os.path.join(state.path, "retired-totals.json")) as f:
            text = f.read()
        self.assertIn('"value":"+Inf"', text)
        self.assertIn('"value":"NaN"', text)
        self.assertIn('"sum":"+Inf"', text)
        self.assertEqual(daemon.stop(), 0)
        restarted = self.daemon(shm.path, state.path)
        e = Exposition(restarted.scrape())
        self.check(e, restarted.child.log()[-3000:])
        self.assertEqual(e.value("rankstat_state_entries_dropped_total"), 0.0)


if __name__ == "__main__":
    unittest.main()
