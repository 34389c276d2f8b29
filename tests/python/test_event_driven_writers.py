"""Processes that write through the metric classes report on events, not on a clock: a tokenizer without
traffic or a scheduler with an empty queue sends nothing for hours. Through rankstatd, with real processes:

* an idle process is LIVE, never STALLED, however long it is silent (the typed snapshot path, which steps
  on a clock, still goes STALLED when stuck: test_lifecycle);
* its gauges hold their last value until the scrape: a gauge held 3 s after its last set accrues those 3 s
  in its time integral;
* a process killed but not yet reaped by its parent (a zombie) is DEAD at once, and its live* gauges leave
  the sums then, not when the parent gets round to reaping it."""

import json
import os
import signal
import subprocess
import sys
import time
import unittest

from daemon_harness import Daemon, Exposition, TempDir, http_get, wait_until

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HELD = "test_idle_held_value"

WRITER = """
import sys, time
import rankstat
rankstat.Gauge(%(held)r, "a value set once and then held", multiprocess_mode="livesum").set(10)
rankstat.Counter("test_idle_requests", "requests").inc(3)
print("READY", flush=True)
time.sleep(60)
""" % {"held": HELD}


class EventDrivenWriters(unittest.TestCase):
    def setUp(self):
        self.shm = TempDir("rankstat-idle-shm")
        self.files = TempDir("rankstat-idle-files")
        self.addCleanup(self.shm.cleanup)
        self.addCleanup(self.files.cleanup)
        self.daemon = Daemon(self.shm.path, self.files.path,
                             ["--liveness.stall-after=300ms", "--liveness.interval=50ms",
                              f"--aggregate.integrate={HELD}", "--liveness.dead-grace=1h"])
        self.addCleanup(self.daemon.stop)
        env = dict(os.environ, RANKSTAT_SHM_DIR=self.shm.path, RANKSTAT_INSTANCE="idle")
        # Popen, not the harness' Child: the test decides when the writer is reaped.
        self.writer = subprocess.Popen([PYTHON, "-c", WRITER], env=env, stdout=subprocess.PIPE, text=True)
        self.addCleanup(self._reap)
        self.assertEqual(self.writer.stdout.readline().strip(), "READY")

    def _reap(self):
        if self.writer.returncode is None:
            self.writer.kill()
            self.writer.wait(10)
        self.writer.stdout.close()

    def states(self):
        status, body = http_get(f"http://127.0.0.1:{self.daemon.port}/api/v1/ranks")
        self.assertEqual(status, 200)
        return {r["pid"]: r["state"] for r in json.loads(body)["ranks"]}

    def held(self):
        return Exposition(self.daemon.scrape()).value(HELD)

    def test_an_idle_process_stays_live_long_past_the_stall_threshold(self):
        self.assertTrue(wait_until(lambda: self.states().get(self.writer.pid) == "LIVE", 10))
        time.sleep(1.5)  # five stall thresholds of silence
        self.assertEqual(self.states().get(self.writer.pid), "LIVE")
        text = self.daemon.scrape()
        self.assertNotIn('state="STALLED"} 1', text)
        self.assertEqual(Exposition(text).value(HELD), 10.0)

    def test_a_gauge_held_after_its_last_set_accrues_the_time_it_is_held(self):
        integral = HELD + "_time_weighted_seconds_total"
        self.assertTrue(wait_until(lambda: Exposition(self.daemon.scrape()).value(integral) is not None, 10))
        first_at = time.monotonic()
        first = Exposition(self.daemon.scrape()).value(integral)
        time.sleep(3)
        second = Exposition(self.daemon.scrape()).value(integral)
        elapsed = time.monotonic() - first_at
        # The value 10 was held all along: the integral grew by 10 x the time between the scrapes.
        self.assertAlmostEqual((second - first) / (10 * elapsed), 1.0, delta=0.01,
                               msg=f"integral {first} -> {second} over {elapsed:.3f} s")

    def test_a_killed_process_not_yet_reaped_is_dead_and_leaves_the_live_sums_at_once(self):
        self.assertTrue(wait_until(lambda: self.held() == 10.0, 10))
        os.kill(self.writer.pid, signal.SIGKILL)
        # Not reaped: the writer stays a zombie with its /proc entry until wait().
        self.assertTrue(wait_until(lambda: _state_letter(self.writer.pid) == "Z", 10))
        self.assertTrue(wait_until(lambda: self.states().get(self.writer.pid) == "DEAD", 5))
        self.assertEqual(_state_letter(self.writer.pid), "Z", "reaped too early for the test to mean anything")
        self.assertIsNone(self.held(), "a dead process's livesum gauge must leave the sum")
        self.assertEqual(Exposition(self.daemon.scrape()).value("test_idle_requests_total"), 3.0)


def _state_letter(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


if __name__ == "__main__":
    unittest.main()
