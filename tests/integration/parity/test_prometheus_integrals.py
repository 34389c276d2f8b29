"""What happens between scrapes, seen by a real Prometheus (Debian's, loopback, temporary storage).

Two ranks report a known piecewise-constant queue at 50 Hz, one through the typed scheduler snapshot
(the C++ record, packed by the Python SnapshotPacker) and one through a gauge declared with the
prometheus_client-compatible classes (SGLang's collector path): 20 requests, then a burst of 500 that
starts after one scrape and ends before the next, then 20 again. Prometheus scrapes rankstatd every
5 s from two jobs (two scrapers). Then:

* rate() of <gauge>_time_weighted_seconds_total over the span between two scrapes equals the analytic
  time-weighted mean of the schedule within 1 %, for each path and each scraper;
* <gauge>_window_max shows the burst in both scrapers, while the plain gauge never does;
* a SIGKILLed and restarted daemon (same --state.dir) and a restarted writer leave every integral
  counter without a single reset;
* an event-driven writer (a separate process on the metric classes, as SGLang's tokenizer is) that sets
  a gauge once and then stays silent through several scrapes accrues the held value all along: rate()
  over spans that hold only idle time, and over a span with one set inside it, equals the analytic mean
  within 1 %.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import unittest
import urllib.parse

from daemon_harness import Child, TempDir, free_port, http_get, wait_until

import rankstat

SCRAPE_S = 5.0
BASELINE = 20
BURST = 500
REPORT_HZ = 50
JOBS = ("scraper_a", "scraper_b")
INTEGRAL = "sglang:num_queue_reqs_time_weighted_seconds_total"
WINDOW_MAX = "sglang:num_queue_reqs_window_max"
GAUGE = "sglang:num_queue_reqs"
IDLE = "test_idle_held"
IDLE_INTEGRAL = IDLE + "_time_weighted_seconds_total"
# An event-driven writer: sets the gauge when told to, prints CLOCK_MONOTONIC of each set, else sleeps.
IDLE_WRITER = f"""
import sys, time
import rankstat
gauge = rankstat.Gauge({IDLE!r}, "A value set on events and held between them.", multiprocess_mode="livesum")
for line in sys.stdin:
    gauge.set(float(line))
    print(time.monotonic(), flush=True)
"""


class Schedule:
    """The queue as a function of CLOCK_MONOTONIC time: BASELINE, BURST inside [start, end)."""

    def __init__(self):
        self.burst = (float("inf"), float("inf"))
        # When the reporting thread actually switched (it reports every 1/REPORT_HZ s, so a switch lands up
        # to one period after the planned time): the analytic mean is of what was reported.
        self.reported_burst = [None, None]

    def value(self, t: float) -> int:
        return BURST if self.burst[0] <= t < self.burst[1] else BASELINE

    def note_reported(self, t: float, value: int, previous: int) -> None:
        if value != previous:
            self.reported_burst[0 if value == BURST else 1] = t

    def mean(self, t0: float, t1: float) -> float:
        """The exact time-weighted mean over [t0, t1] of the values as reported."""
        start, end = self.reported_burst
        overlap = max(0.0, min(t1, end) - max(t0, start))
        return (BASELINE * (t1 - t0) + (BURST - BASELINE) * overlap) / (t1 - t0)


class Ranks:
    """Two ranks of one engine instance reporting the schedule from a thread, at REPORT_HZ."""

    def __init__(self, shm_dir: str, schedule: Schedule):
        self.shm_dir = shm_dir
        self.schedule = schedule
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self._open()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self):
        common = dict(instance="between", model_name="m", shm_dir=self.shm_dir, strict=True, dp_size=2,
                      series_capacity=64, bounds_capacity=64, values_capacity=256)
        self.typed = rankstat.Reporter(dp_rank=0, **common)
        self.packer = self.typed.snapshot_packer()
        self.queue_field = self.packer.field_names.index("num_queue_reqs")
        self.declared = rankstat.Reporter(dp_rank=1, **common)
        self.gauge = self.declared.gauge(GAUGE, "Queued requests.", ["model_name", "dp_rank", "path"],
                                         identity_labels=False).labels("m", "1", "declared")

    def _run(self):
        values = [0] * len(self.packer.field_names)
        previous = BASELINE
        while not self.stop.is_set():
            now = time.monotonic()
            value = self.schedule.value(now)
            self.schedule.note_reported(now, value, previous)
            previous = value
            with self.lock:
                values[self.queue_field] = value
                self.packer.send(values)
                self.gauge.set(value)
            self.stop.wait(1.0 / REPORT_HZ)

    def restart_typed_rank(self):
        """The typed rank exits cleanly and starts again under the same name (a new generation)."""
        with self.lock:
            self.typed.close()
            self.typed = rankstat.Reporter(dp_rank=0, instance="between", model_name="m", shm_dir=self.shm_dir,
                                           strict=True, dp_size=2)
            self.packer = self.typed.snapshot_packer()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.typed.close()
        self.declared.close()


@unittest.skipUnless(shutil.which("prometheus"), "needs Debian's prometheus")
class BetweenScrapesOnARealPrometheus(unittest.TestCase):
    def setUp(self):
        self.shm = TempDir("rankstat-between-shm")
        self.files = TempDir("rankstat-between-files")
        self.state = os.path.join(self.files.path, "state")
        os.makedirs(self.state, mode=0o700)
        self.daemon = self.prometheus = self.ranks = None
        self.schedule = Schedule()
        # Prometheus's timestamps are wall-clock; the schedule and the records are CLOCK_MONOTONIC.
        self.wall_minus_monotonic = time.time() - time.monotonic()
        self.ranks = Ranks(self.shm.path, self.schedule)
        self.daemon_port = free_port()
        self._start_daemon()
        config = os.path.join(self.files.path, "prometheus.yml")
        jobs = "".join(f"""
              - job_name: {job}
                scrape_interval: {int(SCRAPE_S)}s
                static_configs:
                  - targets: ['127.0.0.1:{self.daemon_port}']""" for job in JOBS)
        with open(config, "w") as f:
            f.write(textwrap.dedent("""\
                global:
                  evaluation_interval: 5s
                scrape_configs:""") + textwrap.dedent(jobs) + "\n")
        storage = os.path.join(self.files.path, "tsdb")
        for _ in range(3):  # a free port can be taken between the probe and the bind
            self.port = free_port()
            self.prometheus = Child(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={storage}",
                                     f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                    log_path=os.path.join(self.files.path, "prometheus.log"))
            if wait_until(lambda: self._ready() or not self.prometheus.running(), 30) and self.prometheus.running():
                break
            self.prometheus.kill()
        else:
            self.fail("prometheus did not start:\n" + self.prometheus.log())

    def tearDown(self):
        for child in (self.prometheus, self.daemon):
            if child is not None:
                child.terminate(timeout=20)
        if self.ranks is not None:
            self.ranks.close()
        self.shm.cleanup()
        self.files.cleanup()

    def _start_daemon(self):
        binary = os.environ["RANKSTAT_DAEMON"]
        self.daemon = Child([binary, f"--web.listen-address=127.0.0.1:{self.daemon_port}", f"--shm.dir={self.shm.path}",
                             "--shm.scan-interval=200ms", f"--state.dir={self.state}",
                             f"--aggregate.integrate={GAUGE},{IDLE}"],
                            log_path=os.path.join(self.files.path, "rankstatd.log"))
        self.assertTrue(wait_until(lambda: self._daemon_answers(), 20), self.daemon.log())

    def _daemon_answers(self) -> bool:
        try:
            return http_get(f"http://127.0.0.1:{self.daemon_port}/metrics", timeout=2)[0] == 200
        except OSError:
            return False

    def _ready(self) -> bool:
        try:
            return http_get(f"http://127.0.0.1:{self.port}/-/ready", timeout=2)[0] == 200
        except OSError:
            return False

    def query(self, expr: str, at: float = None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        status, body = http_get(f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(params),
                                timeout=10)
        self.assertEqual(status, 200, body)
        answer = json.loads(body)
        self.assertEqual(answer["status"], "success", body)
        return answer["data"]["result"]

    def samples(self, expr_range: str):
        """{(job, dp_rank): [(wall seconds, value), ...]} of a range selector, evaluated now."""
        out = {}
        for series in self.query(expr_range):
            key = (series["metric"]["job"], series["metric"].get("dp_rank"))
            out[key] = [(float(t), float(v)) for t, v in series["values"]]
        return out

    def scrape_times(self, job: str):
        return [t for t, _ in self.samples(f'up{{job="{job}"}}[1m]').get((job, None), [])]

    def scrape_gap(self):
        """(start of the widest gap between the jobs' scrape phases modulo SCRAPE_S, its length)."""
        phases = sorted({t % SCRAPE_S for j in JOBS for t in self.scrape_times(j)[-1:]})
        gaps = [((phases[(i + 1) % len(phases)] - p) % SCRAPE_S or SCRAPE_S, p) for i, p in enumerate(phases)]
        gap, after = max(gaps)
        return after, gap

    def test_the_integral_gives_exact_means_and_the_window_peak_shows_a_burst_the_gauge_misses(self):
        # Wait for two scrapes of each job to learn when they scrape, then put the burst where neither does.
        self.assertTrue(wait_until(lambda: all(len(self.scrape_times(j)) >= 2 for j in JOBS), 30),
                        self.prometheus.log())
        after, gap = self.scrape_gap()
        burst_s = min(2.0, gap - 0.8)
        self.assertGreater(burst_s, 1.0)
        now_wall = time.time()
        start_wall = now_wall - (now_wall % SCRAPE_S) + after + 0.4
        while start_wall < now_wall + 1.0:
            start_wall += SCRAPE_S
        start = start_wall - self.wall_minus_monotonic
        self.schedule.burst = (start, start + burst_s)
        # Two more scrapes after the burst, so the span between scrapes around it is known.
        time.sleep(max(0.0, start + burst_s - time.monotonic()) + 2 * SCRAPE_S + 1.0)

        integrals = self.samples(f"{INTEGRAL}[1m]")
        for job in JOBS:
            for dp_rank in ("0", "1"):
                with self.subTest(job=job, dp_rank=dp_rank):
                    series = integrals.get((job, dp_rank))
                    self.assertIsNotNone(series, f"no {INTEGRAL} for {job} dp_rank {dp_rank}: {integrals.keys()}")
                    # The last scrape before the burst and the last one overall.
                    before = [s for s in series if s[0] < self.schedule.burst[0] + self.wall_minus_monotonic]
                    self.assertTrue(before)
                    first, last = before[-1], series[-1]
                    span_ms = round((last[0] - first[0]) * 1000)
                    # rate() over exactly that span, evaluated at the last scrape: no extrapolation.
                    result = self.query(f'rate({INTEGRAL}{{job="{job}", dp_rank="{dp_rank}"}}[{span_ms}ms])',
                                        at=last[0])
                    self.assertEqual(len(result), 1, result)
                    measured = float(result[0]["value"][1])
                    expected = self.schedule.mean(first[0] - self.wall_minus_monotonic,
                                                  last[0] - self.wall_minus_monotonic)
                    self.assertGreater(expected, BASELINE * 1.1)  # the burst is inside the span
                    print(f"{job} dp_rank {dp_rank}: rate() over {span_ms} ms = {measured:.4f}, analytic mean "
                          f"{expected:.4f} ({(measured / expected - 1) * 100:+.3f} %)", file=sys.stderr)
                    self.assertAlmostEqual(measured, expected, delta=expected * 0.01)
                    # The plain gauge, as this scraper sampled it, never saw the burst; the window peak did.
                    sampled = self.query(f'max_over_time({GAUGE}{{job="{job}", dp_rank="{dp_rank}"}}[1m])')
                    self.assertEqual([float(s["value"][1]) for s in sampled], [BASELINE])
                    peak = self.query(f'max_over_time({WINDOW_MAX}{{job="{job}", dp_rank="{dp_rank}"}}[1m])')
                    self.assertEqual([float(s["value"][1]) for s in peak], [BURST])

        # A daemon killed without warning and started again, then a writer restart: no counter reset.
        self.daemon.kill()
        self._start_daemon()
        time.sleep(SCRAPE_S)
        self.ranks.restart_typed_rank()
        time.sleep(2 * SCRAPE_S + 1.0)
        for job in JOBS:
            resets = self.query(f'resets({INTEGRAL}{{job="{job}"}}[2m])')
            self.assertEqual(len(resets), 2, resets)
            for series in resets:
                self.assertEqual(float(series["value"][1]), 0, series)
            # And it kept growing after the restarts.
            grown = self.query(f'increase({INTEGRAL}{{job="{job}"}}[{int(2 * SCRAPE_S)}s])')
            self.assertTrue(all(float(s["value"][1]) > 0 for s in grown), grown)

    def test_an_idle_writer_accrues_its_held_gauge_between_scrapes_as_prometheus_sees_it(self):
        env = dict(os.environ, RANKSTAT_SHM_DIR=self.shm.path, RANKSTAT_INSTANCE="between")
        writer = subprocess.Popen([sys.executable, "-c", IDLE_WRITER], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

        def stop_writer():
            writer.stdin.close()
            if writer.wait(10) is None:
                writer.kill()
            writer.stdout.close()
        self.addCleanup(stop_writer)

        def send(value):  # the writer's CLOCK_MONOTONIC at the set, and the value
            writer.stdin.write(f"{value}\n")
            writer.stdin.flush()
            return float(writer.stdout.readline()), float(value)

        set_at = [send(10)]
        self.assertTrue(wait_until(lambda: all(len(self.scrape_times(j)) >= 2 for j in JOBS), 30),
                        self.prometheus.log())
        # One more set in the middle of the widest gap between scrapes, then silence for three scrapes.
        after, gap = self.scrape_gap()
        now_wall = time.time()
        change_wall = now_wall - (now_wall % SCRAPE_S) + after + gap / 2
        while change_wall < now_wall + 1.0:
            change_wall += SCRAPE_S
        time.sleep(change_wall - time.time())
        set_at.append(send(30))
        time.sleep(3 * SCRAPE_S + 1.0)

        def mean(t0, t1):  # the held value's exact time-weighted mean over [t0, t1] (monotonic seconds)
            total = 0.0
            for i, (at, value) in enumerate(set_at):
                end = set_at[i + 1][0] if i + 1 < len(set_at) else float("inf")
                total += value * max(0.0, min(t1, end) - max(t0, at))
            return total / (t1 - t0)

        samples = self.samples(f"{IDLE_INTEGRAL}[1m]")
        for job in JOBS:
            with self.subTest(job=job):
                series = samples.get((job, None))
                self.assertIsNotNone(series, f"no {IDLE_INTEGRAL} for {job}: {samples.keys()}")
                change = set_at[1][0] + self.wall_minus_monotonic
                before = [s for s in series if set_at[0][0] + self.wall_minus_monotonic < s[0] < change]
                idle_after = [s for s in series if s[0] > change]
                self.assertTrue(before and len(idle_after) >= 3, series)
                # Spans: across the set, and two that hold only idle time after it.
                for first, last in ((before[-1], idle_after[-1]), (idle_after[0], idle_after[-1]),
                                    (before[0], before[-1]) if len(before) >= 2 else (None, None)):
                    if first is None:
                        continue
                    span_ms = round((last[0] - first[0]) * 1000)
                    result = self.query(f'rate({IDLE_INTEGRAL}{{job="{job}"}}[{span_ms}ms])', at=last[0])
                    self.assertEqual(len(result), 1, result)
                    measured = float(result[0]["value"][1])
                    expected = mean(first[0] - self.wall_minus_monotonic, last[0] - self.wall_minus_monotonic)
                    print(f"{job} idle writer: rate() over {span_ms} ms = {measured:.4f}, analytic mean "
                          f"{expected:.4f} ({(measured / expected - 1) * 100:+.3f} %)", file=sys.stderr)
                    self.assertAlmostEqual(measured, expected, delta=expected * 0.01)


if __name__ == "__main__":
    unittest.main()
