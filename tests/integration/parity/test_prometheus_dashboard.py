"""SGLang's Grafana dashboard works unchanged: a real Prometheus server (Debian's, loopback, temporary
storage, a free port) scrapes rankstatd while the Python example engine reports through SGLang's
collector classes as the engine oracle's stand-ins play them (the newest SGLang trace, live numbers,
rankstat as their backend), and every PromQL expression of deploy/grafana/sglang-dashboard.json
(SGLang's queries) returns data, with Grafana's variables substituted ($__rate_interval -> 15s,
$model_name and $instance -> .*).

The stand-ins repeat SGLang's recorded path: a family that path never writes could not return data
whatever the engine does. Every family the dashboard reads is on it (log_stats sets the four gauges
from SchedulerStats fields, observe_time_to_first_token and observe_one_finished_request observe the
two histograms from their arguments), so no query is exempt."""

import json
import math
import os
import shutil
import sys
import textwrap
import unittest
import urllib.parse

from daemon_harness import Child, Daemon, TempDir, free_port, http_get, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
ENGINE = os.path.join(SOURCE, "deploy", "example_engine_py", "engine.py")
DASHBOARD = os.path.join(SOURCE, "deploy", "grafana", "sglang-dashboard.json")
REFERENCE = os.path.join(os.path.dirname(SOURCE), "shared", "reference", "sglang-monitoring", "sglang-dashboard.json")
ORACLE = os.environ.get("RANKSTAT_ENGINE_ORACLE") or os.path.join(os.path.dirname(SOURCE), "shared", "reference",
                                                                   "engine-oracle")
# The newest SGLang commit the oracle has a trace of (its README).
NEWEST_VERSION = "6a7c8a1d"
NEWEST_TRACE = os.path.join(ORACLE, "sglang", f"{NEWEST_VERSION}.trace.json")
SUBSTITUTIONS = {"$__rate_interval": "15s", "$model_name": ".*", "$instance": ".*"}


def dashboard_expressions(path):
    with open(path) as f:
        dashboard = json.load(f)
    return [t["expr"].strip() for panel in dashboard["panels"] for t in panel.get("targets", []) if t.get("expr")]


def substitute(expr: str) -> str:
    for var, value in SUBSTITUTIONS.items():
        expr = expr.replace(var, value)
    return expr


@unittest.skipUnless(shutil.which("prometheus"), "needs Debian's prometheus")
@unittest.skipUnless(os.path.isfile(NEWEST_TRACE) and os.path.isdir(os.path.join(ORACLE, "emul")),
                     f"the engine oracle (SGLang's collectors as stand-ins) is absent: {ORACLE}")
class DashboardQueriesOnARealPrometheus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.shm = TempDir("rankstat-prom-shm")
        cls.files = TempDir("rankstat-prom-files")
        cls.engine = cls.daemon = cls.prometheus = None
        try:
            cls.daemon = Daemon(cls.shm.path, cls.files.path)
            env = dict(os.environ, RANKSTAT_SHM_DIR=cls.shm.path)
            cls.engine = Child([sys.executable, ENGINE, "--shm-dir", cls.shm.path, "--sglang-oracle", ORACLE,
                                "--sglang-version", NEWEST_VERSION, "--arrival-rate", "15", "--duration", "300"],
                               env=env,
                               log_path=os.path.join(cls.files.path, "engine.log"))
            config = os.path.join(cls.files.path, "prometheus.yml")
            with open(config, "w") as f:
                f.write(textwrap.dedent(f"""\
                    global:
                      scrape_interval: 1s
                      evaluation_interval: 5s
                    scrape_configs:
                      - job_name: sglang
                        static_configs:
                          - targets: ['127.0.0.1:{cls.daemon.port}']
                    """))
            storage = os.path.join(cls.files.path, "tsdb")
            os.makedirs(storage)
            for attempt in range(3):  # a free port can be taken between the probe and the bind
                cls.port = free_port()
                cls.prometheus = Child(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={storage}",
                                        f"--web.listen-address=127.0.0.1:{cls.port}", "--storage.tsdb.retention.time=1h",
                                        "--log.level=warn"], log_path=os.path.join(cls.files.path, "prometheus.log"))
                if wait_until(lambda: cls._ready() or not cls.prometheus.running(), 30) and cls.prometheus.running():
                    break
                cls.prometheus.kill()
            else:
                raise RuntimeError("prometheus did not start:\n" + cls.prometheus.log())
        except BaseException:
            cls._stop_all()
            raise

    @classmethod
    def _ready(cls) -> bool:
        try:
            return http_get(f"http://127.0.0.1:{cls.port}/-/ready", timeout=2)[0] == 200
        except OSError:
            return False

    @classmethod
    def _stop_all(cls):
        statuses = {}
        for name in ("prometheus", "engine", "daemon"):
            child = getattr(cls, name)
            if child is not None:
                child = child.child if name == "daemon" else child
                statuses[name] = child.terminate(timeout=20)
                if name == "engine":
                    statuses["engine log"] = child.log()
                setattr(cls, name, None)
        cls.shm.cleanup()
        cls.files.cleanup()
        return statuses

    @classmethod
    def tearDownClass(cls):
        statuses = cls._stop_all()
        if statuses.get("engine") != 0:
            raise AssertionError(f"the example engine exited with {statuses.get('engine')} on SIGTERM")
        # Each process prints what of SGLang's recorded operations raised (and was skipped) when it stops:
        # with rankstat under the collectors that would be an operation rankstat refuses.
        if "raised and were skipped" in statuses.get("engine log", ""):
            raise AssertionError("rankstat refused operations of SGLang's collectors:\n" + statuses["engine log"])

    def query(self, expr: str):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = http_get(url, timeout=10)
        self.assertEqual(status, 200, body)
        answer = json.loads(body)
        self.assertEqual(answer["status"], "success", body)
        return answer["data"]["result"]

    def test_every_dashboard_expression_returns_data(self):
        expressions = dashboard_expressions(DASHBOARD)
        self.assertEqual(len(expressions), 14)
        pending = {substitute(e) for e in expressions}
        results = {}

        def all_have_data():
            for expr in list(pending):
                result = self.query(expr)
                finite = [s for s in result if not math.isnan(float(s["value"][1]))]
                if finite:
                    results[expr] = finite
                    pending.discard(expr)
            return not pending

        self.assertTrue(wait_until(all_have_data, 150, interval=2.0),
                        f"no data after 150 s for: {sorted(pending)}\nprometheus log:\n{self.prometheus.log()[-3000:]}")
        # The panels without a filter draw one line per series: the ranks and per-priority series are there.
        running = self.query("sglang:num_running_reqs")
        self.assertGreaterEqual(len({s["metric"].get("tp_rank") for s in running}), 2)
        # (the total has priority="", which Prometheus stores as no label)
        self.assertLessEqual({None, "0"}, {s["metric"].get("priority") for s in running})
        # SGLang's own collectors' gauges are integrated too (rankstatd's default --aggregate.integrate), per
        # rank and with the collectors' labels.
        def integrated():
            mean = self.query("rate(sglang:num_running_reqs_time_weighted_seconds_total[15s])")
            return len({s["metric"].get("tp_rank") for s in mean}) >= 2 and self.query("sglang:token_usage_window_max")
        self.assertTrue(wait_until(integrated, 30, interval=1.0),
                        self.query("{__name__=~'sglang:.*_time_weighted_seconds_total|sglang:.*_window_max'}"))

    def test_the_template_variables_have_values(self):
        for label in ("instance", "model_name"):
            def values():
                status, body = http_get(f"http://127.0.0.1:{self.port}/api/v1/label/{label}/values", timeout=10)
                return json.loads(body)["data"] if status == 200 else []
            self.assertTrue(wait_until(values, 60, interval=1.0), label)

    @unittest.skipUnless(os.path.exists(REFERENCE), "SGLang's dashboard is not checked out next to the repository")
    def test_the_shipped_dashboard_has_sglangs_queries(self):
        self.assertEqual(sorted(dashboard_expressions(DASHBOARD)), sorted(dashboard_expressions(REFERENCE)))


if __name__ == "__main__":
    unittest.main()
