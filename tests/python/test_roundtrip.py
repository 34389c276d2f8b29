"""rankstat.metrics -> shared memory -> rankstatd -> /metrics: what the daemon makes of series declared
through the prometheus_client-compatible classes (HELP and label sets as declared, counters summed
across processes, the `all` mode's pid label, threads of one process sharing its segment). The full
comparison with prometheus_client on SGLang's real collectors is test_sglang_oracle."""

import os
import subprocess
import sys
import textwrap
import unittest

from daemon_harness import Daemon, Exposition, TempDir, wait_until

WRITER = textwrap.dedent("""
    import sys, threading, time
    from rankstat import Counter, Gauge, Histogram
    c = Counter("rt:requests_total", "Requests served.", ["route"])
    g_all = Gauge("rt:inflight", "In-flight requests.", multiprocess_mode="all")
    g_sum = Gauge("rt:slots", "Slots.", multiprocess_mode="livesum")
    h = Histogram("rt:latency_seconds", "Latency.", buckets=[0.1, 1.0])
    child = c.labels(route="/v1")
    def work():
        for _ in range(2000):
            child.inc()
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    g_all.set(3)
    g_sum.set(2)
    h.observe(0.5)
    h._buckets[2].inc(2)
    h._sum.inc(7)
    print("READY", flush=True)
    time.sleep(float(sys.argv[1]))
""")


@unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
class RoundTrip(unittest.TestCase):
    def test_declared_series_are_served_as_declared(self):
        shm = TempDir("rankstat-rt-shm")
        files = TempDir("rankstat-rt-files")
        self.addCleanup(shm.cleanup)
        self.addCleanup(files.cleanup)
        daemon = Daemon(shm.path, files.path)
        self.addCleanup(daemon.child.kill)
        env = dict(os.environ, RANKSTAT_SHM_DIR=shm.path)
        writers = [subprocess.Popen([sys.executable, "-c", WRITER, "20"], env=env, stdout=subprocess.PIPE, text=True)
                   for _ in range(2)]
        for w in writers:
            self.addCleanup(lambda w=w: (w.kill(), w.wait(), w.stdout.close()))
            self.assertEqual(w.stdout.readline().strip(), "READY")
        box = {}

        def complete():
            box["e"] = Exposition(daemon.scrape())
            return box["e"].value("rt:requests_total", route="/v1") == 16000
        self.assertTrue(wait_until(complete, 15), box["e"].text if "e" in box else "no scrape")
        e = box["e"]
        self.assertIn("# HELP rt:requests_total Requests served.", e.text)
        self.assertEqual(e.types.get("rt:requests_total"), "counter")
        self.assertEqual([set(l) for n, l, v in e.samples if n == "rt:requests_total"], [{"route"}])
        pids = sorted(l.get("pid") for n, l, v in e.samples if n == "rt:inflight")
        self.assertEqual(pids, sorted(str(w.pid) for w in writers))
        self.assertEqual(e.value("rt:slots"), 4.0)
        self.assertEqual(e.value("rt:latency_seconds_count"), 6.0)
        self.assertEqual(e.value("rt:latency_seconds_sum"), 15.0)
        self.assertEqual(e.value("rt:latency_seconds_bucket", le="1.0"), 2.0)
        self.assertEqual(e.value("rt:latency_seconds_bucket", le="+Inf"), 6.0)


if __name__ == "__main__":
    unittest.main()
