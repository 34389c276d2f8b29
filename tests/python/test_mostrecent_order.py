"""A mostrecent / livemostrecent gauge set from two processes serves the later set, as prometheus_client
does: each set is stamped with CLOCK_MONOTONIC (nanoseconds, one clock for every process), so a set that
another process's set happened before (here: signalled through a pipe, a few microseconds later) always
has the larger stamp. With the timer-tick clock the writers used before (CLOCK_MONOTONIC_COARSE, 4 ms
here), both sets of a pair fell in one tick and the tie went to the newer process, right or wrong.

Two writer processes own a Gauge of the same family and labels. For each of 1,000 pairs the parent tells
one to follow (wait on its pipe, then set) and the other to lead (set, then write the pipe); who leads
alternates. After each pair the parent scrapes rankstatd (which reads the segments at scrape time) and
expects the follower's value."""

import os
import select
import subprocess
import sys
import textwrap
import time
import unittest

from daemon_harness import Daemon, Exposition, TempDir, wait_until

PAIRS = 1000

WRITER = textwrap.dedent("""
    import os, sys
    from rankstat import Gauge
    family, mode, peer_in, peer_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    child = Gauge(family, "Set by two processes in turn.", ["slot"], multiprocess_mode=mode).labels(slot="0")
    # A per-process series tells the parent when rankstatd has found this segment.
    Gauge("order:writer_ready", "Writers the daemon has found.", multiprocess_mode="all").set(1)
    print("READY", flush=True)
    for line in sys.stdin:
        verb, value = line.split()
        if verb == "lead":
            child.set(float(value))
            os.write(peer_out, b"x")
        else:
            if os.read(peer_in, 1) != b"x":
                sys.exit("peer gone")
            child.set(float(value))
        sys.stdout.write("ok\\n")
        sys.stdout.flush()
""")


def read_line(proc: subprocess.Popen, deadline: float) -> str:
    """The child's next stdout line, or an AssertionError once `deadline` (time.monotonic) passes."""
    remaining = deadline - time.monotonic()
    if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
        raise AssertionError(f"writer {proc.pid} did not answer in time")
    return proc.stdout.readline().strip()


@unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
class MostRecentOrder(unittest.TestCase):
    def setUp(self):
        shm = TempDir("rankstat-order-shm")
        files = TempDir("rankstat-order-files")
        self.addCleanup(shm.cleanup)
        self.addCleanup(files.cleanup)
        self.shm_dir = shm.path
        self.daemon = Daemon(shm.path, files.path)
        self.addCleanup(self.daemon.child.kill)

    def start_writers(self, family: str, mode: str):
        a_to_b = os.pipe()
        b_to_a = os.pipe()
        env = dict(os.environ, RANKSTAT_SHM_DIR=self.shm_dir)
        writers = []
        for peer_in, peer_out in ((b_to_a[0], a_to_b[1]), (a_to_b[0], b_to_a[1])):
            w = subprocess.Popen([sys.executable, "-c", WRITER, family, mode, str(peer_in), str(peer_out)],
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 pass_fds=(peer_in, peer_out))
            self.addCleanup(lambda w=w: (w.kill(), w.wait(), w.stdin.close(), w.stdout.close()))
            writers.append(w)
        for fd in (*a_to_b, *b_to_a):
            os.close(fd)  # the writers hold them: a writer that dies ends its peer's read
        deadline = time.monotonic() + 30
        for w in writers:
            self.assertEqual(read_line(w, deadline), "READY")
        found = wait_until(lambda: len(Exposition(self.daemon.scrape()).values("order:writer_ready")) == 2, 20)
        self.assertTrue(found, "rankstatd did not find both writers")
        return writers

    def check_later_set_wins(self, mode: str):
        family = "order:" + mode
        writers = self.start_writers(family, mode)
        wrong = []
        deadline = time.monotonic() + 240
        for i in range(PAIRS):
            leader, follower = (writers[0], writers[1]) if i % 2 == 0 else (writers[1], writers[0])
            first, later = 2 * i + 1, 2 * i + 2  # every set's value is unique
            follower.stdin.write(f"follow {later}\n")
            follower.stdin.flush()
            leader.stdin.write(f"lead {first}\n")
            leader.stdin.flush()
            self.assertEqual(read_line(leader, deadline), "ok")
            self.assertEqual(read_line(follower, deadline), "ok")
            served = Exposition(self.daemon.scrape()).value(family, slot="0")
            if served != later:
                wrong.append((i, "A" if leader is writers[0] else "B", first, later, served))
        if wrong:
            self.fail(f"{len(wrong)} of {PAIRS} pairs served the earlier set; the first ones "
                      f"(pair, leader, earlier value, later value, served): {wrong[:5]}")

    def test_mostrecent_serves_the_later_of_two_ordered_sets_in_every_pair(self):
        self.check_later_set_wins("mostrecent")

    def test_livemostrecent_serves_the_later_of_two_ordered_sets_in_every_pair(self):
        self.check_later_set_wins("livemostrecent")


if __name__ == "__main__":
    unittest.main()
