"""SGLang parity, end to end: the Python example engine (TP x DP ranks with DP attention, a tokenizer,
priorities, speculative decoding, HiCache, LoRA and a PD pair) reports through the rankstat package,
rankstatd serves /metrics, and every family of SGLang's catalog and of the reference article's additions
is there with the right type, label names and bucket boundaries; promtool finds nothing beyond SGLang's
own naming."""

import csv
import math
import os
import sys
import time
import unittest
from typing import Dict, List

from daemon_harness import (Child, Daemon, Exposition, TempDir, promtool_findings, unexpected_lints, wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
ENGINE = os.path.join(SOURCE, "deploy", "example_engine_py", "engine.py")

# The example engine's settings the expectations depend on.
ATTN_TP, DP = 2, 2
TP_SIZE = ATTN_TP * DP
PREFILL_DELAYER_MAX_DELAY = 30
EXTRA = {"cluster": "parity"}
CUSTOM = "tenant"
SCHEDULER_BASE = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "priority", "dp_rank"]
TOKENIZER_BASE = ["model_name", "engine_type", "priority", CUSTOM]
# Families rankstat serves beyond the catalog and the article (SGLang has them too).
KNOWN_EXTRA = {"sglang:http_responses_total"}


def load_expected() -> List[Dict[str, str]]:
    with open(os.path.join(HERE, "sglang_families.tsv")) as f:
        return list(csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t"))


def expected_bounds(spec: str):
    if spec in ("-", "any"):
        return None
    if spec.startswith("exp:"):
        start, width, length = spec[4:].split(":")
        return [float(start) * float(width) ** i for i in range(int(length))]
    if spec == "range:ep_size":
        return [float(i) for i in range(TP_SIZE)]
    if spec == "delayer_passes":
        return sorted({float(x) for x in (5, 20, 50, 100, 200) if x < PREFILL_DELAYER_MAX_DELAY} |
                      {0.0, float(PREFILL_DELAYER_MAX_DELAY - 1)})
    if spec == "delayer_seconds":
        return sorted({float(x) for x in (1, 2, 5, 10, 20, 50, 100, 200, 500)} | {0.0})
    return sorted({float(x) for x in spec.split(",")})


class ParityWithSGLangsCatalog(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.expected = load_expected()
        cls.shm = TempDir("rankstat-parity-shm")
        cls.files = TempDir("rankstat-parity-files")
        cls.engine = None
        cls.daemon = None
        try:
            cls.daemon = Daemon(cls.shm.path, cls.files.path)
            env = dict(os.environ, RANKSTAT_SHM_DIR=cls.shm.path, PYTHONUNBUFFERED="1")
            argv = [sys.executable, ENGINE, "--shm-dir", cls.shm.path, "--pd", "--attn-tp", str(ATTN_TP), "--dp", str(DP),
                    "--custom-label", CUSTOM, "--arrival-rate", "15", "--duration", "240"]
            for k, v in EXTRA.items():
                argv += ["--extra-label", f"{k}={v}"]
            cls.engine = Child(argv, env=env, log_path=os.path.join(cls.files.path, "engine.log"))
            names = [row["name"] for row in cls.expected]
            box = {}

            def complete():
                if not cls.engine.running():
                    raise RuntimeError("the example engine exited:\n" + cls.engine.log())
                box["e"] = Exposition(cls.daemon.scrape())
                return all(name in box["e"].types for name in names)
            if not wait_until(complete, 120, interval=1.0):
                missing = [n for n in names if n not in box["e"].types]
                raise AssertionError(f"families still missing after 120 s: {missing}\nengine log:\n"
                                     + cls.engine.log()[-4000:])
            time.sleep(2)  # one more round of updates so every histogram and label set has moved
            cls.exposition = Exposition(cls.daemon.scrape())
        except BaseException:
            cls._stop_all()
            raise

    @classmethod
    def _stop_all(cls):
        status = cls.engine.terminate(timeout=20) if cls.engine is not None else 0
        log = cls.engine.log() if cls.engine is not None else ""
        daemon_status = cls.daemon.child.terminate() if cls.daemon is not None else 0
        cls.engine = cls.daemon = None
        cls.shm.cleanup()
        cls.files.cleanup()
        return status, daemon_status, log

    @classmethod
    def tearDownClass(cls):
        status, daemon_status, log = cls._stop_all()
        if status != 0 or daemon_status != 0:
            raise AssertionError(f"on SIGTERM the engine exited with {status} and rankstatd with {daemon_status}; "
                                 f"engine log:\n{log[-4000:]}")

    def test_every_family_of_the_catalog_and_the_article_is_present_with_its_type(self):
        e = self.exposition
        for row in self.expected:
            with self.subTest(family=row["name"]):
                want = {"gaugehistogram": "gauge"}.get(row["type"], row["type"])
                self.assertEqual(e.types.get(row["name"]), want)
                self.assertTrue(e.family_samples(row["name"]), "no samples")

    def test_no_sglang_family_is_served_that_sglang_does_not_have(self):
        expected = {row["name"] for row in self.expected} | KNOWN_EXTRA
        served = {name for name in self.exposition.types if name.startswith("sglang:")}
        self.assertEqual(served - expected, set())

    def test_every_series_has_sglangs_label_names(self):
        e = self.exposition
        for row in self.expected:
            own = [] if row["labels"] == "-" else row["labels"].split(",")
            for name, labels, _ in e.family_samples(row["name"]):
                names = set(labels) - ({"le"} if name.endswith("_bucket") and row["type"] == "histogram" else set())
                if row["base"] == "S":
                    base = list(SCHEDULER_BASE)
                    if labels.get("engine_type") != "unified":
                        base.remove("dp_rank")  # the PD pair runs without DP
                    want = set(base) | set(EXTRA) | set(own)
                elif row["base"] == "T":
                    want = set(TOKENIZER_BASE) | set(EXTRA) | set(own)
                else:
                    want = set(own)
                if row["mode"] == "all":
                    want.add("pid")  # one series per process, as prometheus_client's default mode
                with self.subTest(family=row["name"], labels=labels):
                    self.assertEqual(names, want)

    def test_histogram_buckets_are_sglangs(self):
        e = self.exposition
        for row in self.expected:
            if row["type"] != "histogram":
                continue
            bounds = expected_bounds(row["buckets"])
            by_series: Dict[tuple, List[float]] = {}
            for name, labels, _ in e.family_samples(row["name"]):
                if name.endswith("_bucket"):
                    key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                    by_series.setdefault(key, []).append(float(labels["le"]))
            with self.subTest(family=row["name"]):
                self.assertTrue(by_series)
                for les in by_series.values():
                    self.assertEqual(les[-1], math.inf)
                    if bounds is not None:
                        self.assertEqual(len(les) - 1, len(bounds), les)
                        for got, want in zip(sorted(les[:-1]), bounds):
                            self.assertTrue(math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), (got, want))

    def test_the_routing_key_gauge_histograms_have_sglangs_gt_le_bins(self):
        bins = {(l["gt"], l["le"]) for n, l, v in self.exposition.samples if n == "sglang:routing_key_all_req_count"}
        bounds = ["0", "1", "2", "3", "5", "7", "10", "20", "50", "100", "200", "+Inf"]
        self.assertEqual(bins, set(zip(bounds, bounds[1:])))

    def test_only_the_stats_logging_ranks_export_and_the_imbalance_ratio_comes_from_one(self):
        e = self.exposition
        unified = {(l["tp_rank"], l["dp_rank"]) for n, l, v in e.samples
                   if n == "sglang:num_running_reqs" and l["engine_type"] == "unified"}
        self.assertEqual(unified, {("0", "0"), (str(ATTN_TP), "1")})
        ratio = {l["tp_rank"] for n, l, v in e.samples if n == "sglang:dp_attention_token_imbalance_ratio_count"}
        self.assertEqual(ratio, {"0"})

    def test_queue_gauges_have_the_total_and_per_priority_series(self):
        priorities = {l["priority"] for n, l, v in self.exposition.samples
                      if n == "sglang:num_running_reqs" and l["engine_type"] == "unified"}
        self.assertIn("", priorities)
        self.assertTrue(priorities - {""} <= {"0", "1", "2"} and priorities - {""})

    def test_the_pd_pair_has_its_own_engine_types_and_utilization_minus_one_on_prefill(self):
        e = self.exposition
        self.assertEqual(e.value("sglang:utilization", engine_type="prefill"), -1.0)
        self.assertIsNotNone(e.value("sglang:num_decode_deferred_kv_release_reqs", engine_type="decode"))
        ttft_types = {l["engine_type"] for n, l, v in e.samples if n == "sglang:time_to_first_token_seconds_count"}
        self.assertNotIn("prefill", ttft_types)

    def test_promtool_finds_nothing_beyond_sglangs_own_naming(self):
        code, lines = promtool_findings(self.exposition.text, self.files.path)
        self.assertIn(code, (0, 3), "\n".join(lines))
        self.assertEqual(unexpected_lints(lines), [])


if __name__ == "__main__":
    unittest.main()
