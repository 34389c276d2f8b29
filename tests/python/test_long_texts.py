"""Names, label values and help texts of any length and any Unicode prometheus_client accepts, NUL included,
reach rankstatd's /metrics as prometheus_client's multiprocess exposition serves them.

One writer script runs twice: once on prometheus_client (PROMETHEUS_MULTIPROC_DIR, read back through its
MultiProcessCollector) and once on rankstat's classes (served by a real rankstatd). The lines of the `lt_`
families must be the same, byte for byte: the texts are length-delimited from the Python call to the
exposition (layout 3.0), so nothing is cut, merged or dropped, and both escape the same characters."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from daemon_harness import Daemon, TempDir

WRITER = textwrap.dedent("""
    import sys
    impl = sys.argv[1]
    if impl == "prometheus_client":
        from prometheus_client import Counter, Gauge
    else:
        from rankstat import Counter, Gauge
    family = "lt_" + "f" * 197                     # a 200-byte family name
    help_text = "h" * 10000 + ' back\\\\slash "quote" new\\nline nul\\0 \\U0001F600'
    c = Counter(family, help_text, ["v"])
    c.labels(v="a\\0b").inc(1)                       # two series: the NUL is part of the value
    c.labels(v="a\\0c").inc(2)
    c.labels(v="x" * 5000).inc(3)                   # a 5,000-byte value
    c.labels(v="\\U0001F600 \\U00010348 caf\\u00e9").inc(4)  # non-BMP Unicode
    c.labels(v='nl\\nbs\\\\q"').inc(5)
    g = Gauge("lt_gauge", "Gauge \\\\ with \\n specials.", ["k" * 300], multiprocess_mode="livesum")
    g.labels("\\0").set(6)
    g.labels("").set(7)
    if impl == "prometheus_client":
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.multiprocess import MultiProcessCollector
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        sys.stdout.buffer.write(generate_latest(registry))
        sys.stdout.flush()
    else:
        print("READY", flush=True)
        sys.stdin.read()  # stays alive (its livesum gauge served) until the test closes stdin
""")


def lines_of_interest(text: str):
    """The HELP, TYPE and sample lines of the lt_ families, sorted (the order of series is not compared)."""
    return sorted(line for line in text.split("\n")
                  if line.startswith("lt_") or line.startswith("# HELP lt_") or line.startswith("# TYPE lt_"))


@unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
@unittest.skipUnless(importlib.util.find_spec("prometheus_client"), "prometheus_client is the reference")
class LongTexts(unittest.TestCase):
    def reference(self) -> str:
        multiproc = tempfile.mkdtemp(prefix="rankstat-lt-pc-")
        try:
            env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=multiproc)
            out = subprocess.run([sys.executable, "-c", WRITER, "prometheus_client"], env=env, check=True,
                                 stdout=subprocess.PIPE, timeout=60).stdout
        finally:
            for f in os.listdir(multiproc):
                os.unlink(os.path.join(multiproc, f))
            os.rmdir(multiproc)
        return out.decode("utf-8")

    def test_long_and_nul_holding_texts_are_served_as_prometheus_client_serves_them(self):
        expected = lines_of_interest(self.reference())
        # The reference itself holds what is compared: long lines, the NUL and the two NUL series.
        self.assertTrue(any(len(line) > 10000 for line in expected))
        self.assertEqual(sum(1 for line in expected if 'v="a\0' in line), 2)

        shm = TempDir("rankstat-lt-shm")
        files = TempDir("rankstat-lt-files")
        self.addCleanup(shm.cleanup)
        self.addCleanup(files.cleanup)
        daemon = Daemon(shm.path, files.path)
        self.addCleanup(daemon.child.kill)
        env = dict(os.environ, RANKSTAT_SHM_DIR=shm.path)
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env.pop("prometheus_multiproc_dir", None)
        # stderr to a file: a warning about long texts must not fill a pipe nobody reads.
        err_path = os.path.join(files.path, "writer.err")
        with open(err_path, "wb") as err:
            writer = subprocess.Popen([sys.executable, "-c", WRITER, "rankstat"], env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=err)

        def stop_writer():
            writer.kill()
            writer.wait()
            for pipe in (writer.stdin, writer.stdout):
                pipe.close()
        self.addCleanup(stop_writer)
        self.assertEqual(writer.stdout.readline().strip(), b"READY")

        got, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline:
            got = lines_of_interest(daemon.scrape())
            if got == expected:
                break
            time.sleep(0.2)
        missing = [line[:200] for line in expected if line not in got]
        extra = [line[:200] for line in got if line not in expected]
        with open(err_path, errors="replace") as f:
            log = f.read()[:2000]
        self.assertEqual(got, expected, f"missing (first 200 chars each): {missing}\nextra: {extra}\nwriter: {log}")


if __name__ == "__main__":
    unittest.main()
