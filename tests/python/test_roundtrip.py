"""Python collectors -> shared memory -> rankstatd -> /metrics: the SGLang semantics the daemon applies
to what the package writes (report-kind ownership, per-priority series, the engine-level rule, pid
labels, bulk ITL buckets, label-less families, GaugeHistograms, summaries)."""

import os
import unittest

from rankstat import sglang
from rankstat.sglang import (DPBalanceStats, HttpMetrics, QueueCount, SchedulerMetricsCollector, SchedulerStats,
                             TokenizerMetricsCollector)

from daemon_harness import Daemon, Exposition, TempDir, promtool_findings, unexpected_lints, wait_until


def labels(tp=0, dp=0, **extra):
    out = {"model_name": "rt", "engine_type": "unified", "tp_rank": tp, "pp_rank": 0, "moe_ep_rank": 0,
           "priority": "", "dp_rank": dp}
    out.update(extra)
    return out


@unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
class RoundTrip(unittest.TestCase):
    def setUp(self):
        self.shm = TempDir("rankstat-rt-shm")
        self.files = TempDir("rankstat-rt-files")
        self.addCleanup(self.shm.cleanup)
        self.addCleanup(self.files.cleanup)
        sglang.segments.reset()
        self.addCleanup(sglang.segments.reset)
        os.environ["RANKSTAT_SHM_DIR"] = self.shm.path
        self.daemon = Daemon(self.shm.path, self.files.path)
        self.addCleanup(self.daemon.child.kill)

    def scrape_until(self, predicate, timeout=10.0) -> Exposition:
        box = {}

        def check():
            box["e"] = Exposition(self.daemon.scrape())
            return predicate(box["e"])
        self.assertTrue(wait_until(check, timeout), box.get("e").text if box.get("e") else "no scrape")
        return box["e"]

    def test_a_decode_report_keeps_cache_hit_rate_and_an_idle_report_zeroes_gen_throughput(self):
        c = SchedulerMetricsCollector(labels(), instance="rt")
        c.log_prefill_stats(SchedulerStats(cache_hit_rate=0.75, gen_throughput=999.0))
        c.log_decode_stats(SchedulerStats(cache_hit_rate=0.0, gen_throughput=321.0, num_running_reqs=4))
        e = self.scrape_until(lambda e: e.value("sglang:num_running_reqs", tp_rank="0", priority="") == 4)
        self.assertEqual(e.value("sglang:cache_hit_rate"), 0.75)
        self.assertEqual(e.value("sglang:gen_throughput"), 321.0)
        c.log_idle_stats(SchedulerStats(cache_hit_rate=0.0, gen_throughput=321.0, num_running_reqs=0))
        e = self.scrape_until(lambda e: e.value("sglang:num_running_reqs", priority="") == 0)
        self.assertEqual(e.value("sglang:gen_throughput"), 0.0)
        self.assertEqual(e.value("sglang:cache_hit_rate"), 0.75)

    def test_priority_totals_and_sticky_per_priority_series_and_per_process_retraction(self):
        c = SchedulerMetricsCollector(labels(), instance="rt")
        c.log_stats(SchedulerStats(num_running_reqs=QueueCount(3, {0: 1, 5: 2}), num_retracted_reqs=2))
        c.log_stats(SchedulerStats(num_running_reqs=QueueCount(1, {0: 1}), num_retracted_reqs=1))
        e = self.scrape_until(lambda e: e.value("sglang:num_running_reqs", priority="") == 1)
        self.assertEqual(e.value("sglang:num_running_reqs", priority="0"), 1)
        self.assertEqual(e.value("sglang:num_running_reqs", priority="5"), 0)
        retracted = [s for s in e.family_samples("sglang:num_retracted_reqs")]
        self.assertEqual(len(retracted), 1)
        self.assertEqual(retracted[0][1]["pid"], str(os.getpid()))
        self.assertEqual(retracted[0][2], 1)

    def test_only_the_stats_logging_rank_exports_unless_all_schedulers_mode_is_on(self):
        SchedulerMetricsCollector(labels(tp=0), instance="rt", attn_tp_rank=0).log_stats(SchedulerStats(num_queue_reqs=1))
        SchedulerMetricsCollector(labels(tp=1), instance="rt", attn_tp_rank=1).log_stats(SchedulerStats(num_queue_reqs=2))
        SchedulerMetricsCollector(labels(tp=2), instance="rt", attn_tp_rank=0, attn_cp_rank=1).log_stats(
            SchedulerStats(num_queue_reqs=3))
        SchedulerMetricsCollector(labels(tp=3), instance="rt", attn_tp_rank=1, all_schedulers=True).log_stats(
            SchedulerStats(num_queue_reqs=4))
        e = self.scrape_until(lambda e: len(e.values("sglang:num_queue_reqs", priority="")) >= 2)
        ranks = sorted(l["tp_rank"] for n, l, v in e.samples if n == "sglang:num_queue_reqs" and l["priority"] == "")
        self.assertEqual(ranks, ["0", "3"])

    def test_itl_bulk_samples_land_in_one_bucket_and_the_interval_in_the_sum(self):
        t = TokenizerMetricsCollector(labels={"model_name": "rt", "engine_type": "unified"}, instance="rt")
        t.observe_inter_token_latency(t.labels, 0.2, 4)  # 4 samples of 0.05
        e = self.scrape_until(lambda e: e.value("sglang:inter_token_latency_seconds_count") == 4)
        self.assertEqual(e.value("sglang:inter_token_latency_seconds_bucket", le="0.04"), 0)
        self.assertEqual(e.value("sglang:inter_token_latency_seconds_bucket", le="0.06"), 4)
        self.assertAlmostEqual(e.value("sglang:inter_token_latency_seconds_sum"), 0.2)

    def test_http_families_have_only_their_own_labels_and_gauge_histograms_and_summaries_keep_their_shape(self):
        t = TokenizerMetricsCollector(labels={"model_name": "rt", "engine_type": "unified"}, instance="rt")
        http = HttpMetrics(t.reporter)
        http.request_started("/generate", "POST", "k")
        c = SchedulerMetricsCollector(labels(), instance="rt", enable_expert_balancedness=True)
        c.increment_eplb_balancedness("decode", 0.5)
        c.log_stats(SchedulerStats(routing_key_running_req_counts=[1, 3]))
        e = self.scrape_until(lambda e: "sglang:http_requests_active" in e.types and
                              "sglang:routing_key_running_req_count" in e.types)
        self.assertEqual([l for n, l, v in e.samples if n == "sglang:http_requests_active"],
                         [{"endpoint": "/generate", "method": "POST"}])
        self.assertEqual(e.value("sglang:routing_keys_active"), 1)
        self.assertEqual(e.types["sglang:eplb_balancedness"], "summary")
        self.assertEqual(e.value("sglang:eplb_balancedness_count"), 1)
        bins = {(l["gt"], l["le"]): v for n, l, v in e.samples if n == "sglang:routing_key_running_req_count"}
        self.assertEqual(len(bins), 11)
        self.assertEqual(bins[("0", "1")], 1)
        self.assertEqual(bins[("2", "3")], 1)
        self.assertEqual(bins[("200", "+Inf")], 0)
        code, lines = promtool_findings(e.text, self.files.path)
        self.assertIn(code, (0, 3), lines)
        self.assertEqual(unexpected_lints(lines), [])

    def test_threads_of_one_rank_share_its_segment_without_losing_updates(self):
        import threading
        c = SchedulerMetricsCollector(labels(), instance="rt")

        def work():
            for _ in range(2000):
                c.increment_realtime_tokens(None, decode_tokens=1)
                c.increment_retracted_reqs(1, 2, 3)
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        e = self.scrape_until(lambda e: e.value("sglang:realtime_tokens_total", mode="decode") is not None)
        self.assertEqual(e.value("sglang:realtime_tokens_total", mode="decode"), 8000)
        self.assertEqual(e.value("sglang:num_retracted_output_tokens_total"), 24000)

    def test_the_dp_imbalance_ratio_comes_only_from_attention_rank_zero_of_dp_zero(self):
        stats = DPBalanceStats.create(local_tokens=5, global_num_tokens=[5, 15], local_attention_pairs=5,
                                      global_attention_pairs=[5, 30])
        SchedulerMetricsCollector(labels(tp=0, dp=0), instance="rt", attn_tp_rank=0, attn_dp_rank=0,
                                  all_schedulers=True).observe_dp_balance(stats)
        SchedulerMetricsCollector(labels(tp=2, dp=1), instance="rt", attn_tp_rank=0, attn_dp_rank=1,
                                  all_schedulers=True).observe_dp_balance(stats)
        e = self.scrape_until(lambda e: len(e.values("sglang:dp_attention_sync_wait_seconds_count")) == 2)
        self.assertEqual([l["dp_rank"] for n, l, v in e.samples
                          if n == "sglang:dp_attention_token_imbalance_ratio_count"], ["0"])


if __name__ == "__main__":
    unittest.main()
