"""Metric and label names outside the classic character set, as prometheus_client's current release (0.22
and later) accepts them by default, served through a real rankstatd.

A Python process declares `my.metric` (a counter with the label `http.method`) and `req.seconds` (a
histogram) on rankstat's metric classes. A scrape that names no escaping scheme (Prometheus 2, promtool,
curl) gets the names with every character outside the classic set replaced by `_`, which promtool 2.42
(classic names only) accepts; a scrape whose Accept header asks for `escaping=allow-utf-8` (Prometheus 3)
gets them as they are, quoted, and a Content-Type that says so. PROMETHEUS_LEGACY_NAME_VALIDATION=true
brings back the classic rules at the call, as in prometheus_client."""

import gzip
import os
import subprocess
import sys
import textwrap
import time
import unittest
import urllib.request

from daemon_harness import Daemon, TempDir, promtool_findings

WRITER = textwrap.dedent("""
    import sys
    from rankstat import Counter, Histogram
    c = Counter("my.metric", "Dotted counter.", ["http.method"])
    c.labels("GET").inc(3)
    h = Histogram("req.seconds", "Dotted histogram.", ["path"], buckets=[0.5])
    h.labels("/").observe(0.25)
    h.labels("/").observe(2)
    print("READY", flush=True)
    sys.stdin.read()  # stays alive until the test closes stdin
""")

UNDERSCORES = [
    "# HELP my_metric_total Dotted counter.",
    "# TYPE my_metric_total counter",
    'my_metric_total{http_method="GET"} 3.0',
    "# HELP req_seconds Dotted histogram.",
    "# TYPE req_seconds histogram",
    'req_seconds_sum{path="/"} 2.25',
    'req_seconds_bucket{le="0.5",path="/"} 1.0',
    'req_seconds_bucket{le="+Inf",path="/"} 2.0',
    'req_seconds_count{path="/"} 2.0',
]

ALLOW_UTF8 = [
    '# HELP "my.metric_total" Dotted counter.',
    '# TYPE "my.metric_total" counter',
    '{"my.metric_total","http.method"="GET"} 3.0',
    '# HELP "req.seconds" Dotted histogram.',
    '# TYPE "req.seconds" histogram',
    '{"req.seconds_sum",path="/"} 2.25',
    '{"req.seconds_bucket",le="0.5",path="/"} 1.0',
    '{"req.seconds_bucket",le="+Inf",path="/"} 2.0',
    '{"req.seconds_count",path="/"} 2.0',
]


def get(port: int, accept=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept is not None:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.headers.get("Content-Type"), response.read().decode("utf-8")


def ours(text: str):
    """The lines of the two families, in the order served."""
    return [line for line in text.split("\n")
            if any(key in line for key in ("my_metric", "my.metric", "req_seconds", "req.seconds"))]


@unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
class Utf8Names(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.shm = TempDir("rankstat-utf8-shm")
        cls.files = TempDir("rankstat-utf8-files")
        cls.daemon = None
        cls.writer = None
        try:
            cls.daemon = Daemon(cls.shm.path, cls.files.path)
            env = dict(os.environ, RANKSTAT_SHM_DIR=cls.shm.path)
            for key in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir", "PROMETHEUS_LEGACY_NAME_VALIDATION"):
                env.pop(key, None)
            cls.writer = subprocess.Popen([sys.executable, "-c", WRITER], env=env, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if cls.writer.stdout.readline().strip() != b"READY":
                raise RuntimeError("the writer did not start")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and ours(get(cls.daemon.port)[1]) != UNDERSCORES:
                time.sleep(0.2)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.writer is not None:
            cls.writer.stdin.close()
            try:
                cls.writer.wait(timeout=15)
            except subprocess.TimeoutExpired:
                cls.writer.kill()
                cls.writer.wait()
            cls.writer.stdout.close()
        if cls.daemon is not None:
            cls.daemon.stop()
        cls.shm.cleanup()
        cls.files.cleanup()

    def test_a_scrape_without_an_escaping_scheme_gets_the_names_with_underscores(self):
        content_type, text = get(self.daemon.port)
        self.assertEqual(content_type, "text/plain; version=0.0.4; charset=utf-8")
        self.assertEqual(ours(text), UNDERSCORES)
        # An unknown scheme is the default too.
        self.assertEqual(ours(get(self.daemon.port, "text/plain;version=0.0.4;escaping=bogus")[1]), UNDERSCORES)

    def test_promtool_2_42_accepts_the_default_exposition(self):
        code, lines = promtool_findings(get(self.daemon.port)[1], self.files.path)
        self.assertEqual([line for line in lines if "my_metric" in line or "req_seconds" in line], [])
        self.assertFalse(any("error" in line.lower() for line in lines), lines)
        self.assertIn(code, (0, 3), lines)  # 3: lint findings only, none of them ours (checked above)

    def test_a_scrape_asking_for_allow_utf_8_gets_the_names_quoted(self):
        content_type, text = get(self.daemon.port, "text/plain;version=0.0.4;escaping=allow-utf-8")
        self.assertEqual(content_type, "text/plain; version=0.0.4; charset=utf-8; escaping=allow-utf-8")
        self.assertEqual(ours(text), ALLOW_UTF8)
        # The gzip path renders from its own cache per scheme: the same text both ways, in either order.
        request = urllib.request.Request(f"http://127.0.0.1:{self.daemon.port}/metrics",
                                         headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=5) as response:
            self.assertEqual(ours(gzip.decompress(response.read()).decode()), UNDERSCORES)
        request.add_header("Accept", "text/plain;version=0.0.4;escaping=allow-utf-8")
        with urllib.request.urlopen(request, timeout=5) as response:
            self.assertEqual(ours(gzip.decompress(response.read()).decode()), ALLOW_UTF8)

    def test_name_filters_find_a_dotted_name_under_either_scheme(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.daemon.port}/metrics?name[]=my.metric_total",
                                    timeout=5) as response:
            self.assertEqual(ours(response.read().decode()), UNDERSCORES[:3])


class LegacyValidation(unittest.TestCase):
    def test_prometheus_legacy_name_validation_brings_back_the_classic_rules(self):
        code = textwrap.dedent("""
            from rankstat import Counter
            for args in (("my.metric", "h"), ("ok", "h", ["http.method"])):
                try:
                    Counter(*args, registry=None)
                except ValueError as e:
                    print(e)
            Counter("classic_name", "h", ["classic_label"], registry=None)
            print("classic accepted")
        """)
        shm = TempDir("rankstat-legacy-shm")
        self.addCleanup(shm.cleanup)
        for value, legacy in (("true", True), ("T", True), ("1", True), ("false", False), ("", False)):
            with self.subTest(value=value):
                env = dict(os.environ, PROMETHEUS_LEGACY_NAME_VALIDATION=value, RANKSTAT_SHM_DIR=shm.path)
                out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                     timeout=60, check=True).stdout.splitlines()
                if legacy:
                    self.assertEqual(out, ["Invalid metric name: my.metric", "Invalid label metric name: http.method",
                                           "classic accepted"])
                else:
                    self.assertEqual(out, ["classic accepted"])


if __name__ == "__main__":
    unittest.main()
