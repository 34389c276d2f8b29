"""Two writers of one identity (two engines on one host with the same instance and ranks): the second
publishes beside the first, under "<rank key>_2", and the Python package says why, once."""

import os
import shutil
import tempfile
import unittest

import rankstat

NAME = "rankstat.pytest.scheduler.tp0-pp0-ep0-dp0"


def shm_tempdir():
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="rankstat-pytest-", dir=base)


class SameIdentity(unittest.TestCase):
    def setUp(self):
        self.dir = shm_tempdir()
        self.addCleanup(shutil.rmtree, self.dir, True)

    def open(self):
        reporter = rankstat.Reporter(role="scheduler", instance="pytest", dp_rank=0, shm_dir=self.dir,
                                     series_capacity=8, bounds_capacity=64, values_capacity=256)
        self.addCleanup(reporter.close)
        self.assertTrue(reporter.is_open, reporter.error)
        return reporter

    def test_a_second_writer_of_a_live_identity_publishes_beside_it_and_logs_why_once(self):
        first = self.open()
        self.assertEqual(first.note, "")
        with self.assertLogs("rankstat", "WARNING") as logs:
            second = self.open()
        self.assertEqual(sorted(os.listdir(self.dir)), [NAME, NAME + "_2"])
        self.assertIn(f"{self.dir}/{NAME} is held by a live writer (pid {os.getpid()})", second.note)
        self.assertIn(f"published as {self.dir}/{NAME}_2", second.note)
        self.assertEqual(len(logs.output), 1)
        self.assertIn(second.note, logs.output[0])
        # Both write: the first writer's segment is still its own.
        first.counter("pytest_events_total").inc(2)
        second.counter("pytest_events_total").inc(3)
        # Once the first closes (a clean exit), its name is free for the next writer of the identity.
        first.close()
        third = self.open()
        self.assertEqual(third.note, "")
        self.assertEqual(sorted(os.listdir(self.dir)), [NAME, NAME + "_2"])


if __name__ == "__main__":
    unittest.main()
