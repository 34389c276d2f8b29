"""The drop-in collectors: what they pack and which series they touch, seen at the C ABI boundary."""

import math
import unittest
from types import SimpleNamespace

from rankstat import _native as n
from rankstat.sglang import (DPBalanceStats, DPCooperationInfo, GrammarStats, QueueCount,
                             RadixCacheMetricsCollector, SchedulerMetricsCollector, SchedulerStats, StorageMetrics,
                             StorageMetricsCollector, TokenizerMetricsCollector, catalog)

from recording import SCHEDULER_LABELS, TOKENIZER_LABELS, RecordingReporter


def scheduler(labels=None, attention=(0, 0, 0), **kw):
    labels = dict(SCHEDULER_LABELS if labels is None else labels)
    r = RecordingReporter(labels, attention)
    return SchedulerMetricsCollector(labels, reporter=r, **kw), r


class SnapshotReports(unittest.TestCase):
    def test_one_log_stats_is_one_record_with_the_totals_in_the_fields(self):
        c, r = scheduler()
        stats = SchedulerStats(num_running_reqs=QueueCount(3, {0: 2, 1: 1}), num_queue_reqs=QueueCount(5, None),
                               gen_throughput=123.5, cache_hit_rate=0.25, token_usage=0.5, kv_used_tokens=77)
        c.log_stats(stats)
        self.assertEqual(len(r.reports), 1)
        self.assertEqual(r.field(0, "num_running_reqs"), 3)
        self.assertEqual(r.field(0, "num_queue_reqs"), 5)
        self.assertEqual(r.field(0, "gen_throughput"), 123.5)
        self.assertEqual(r.field(0, "cache_hit_rate"), 0.25)
        self.assertEqual(r.field(0, "kv_used_tokens"), 77)
        self.assertTrue(math.isnan(r.field(0, "fwd_occupancy")))
        self.assertEqual(r.field(0, "report_kind"), n.REPORT_UNSPECIFIED)
        self.assertEqual(r.field(0, "priority_count"), 2)

    def test_priorities_seen_once_stay_exported_as_zero_on_every_queue_with_a_breakdown(self):
        c, r = scheduler()
        c.log_stats(SchedulerStats(num_running_reqs=QueueCount(2, {0: 2}), num_queue_reqs=QueueCount(1, {1: 1})))
        c.log_stats(SchedulerStats(num_running_reqs=QueueCount(1, {2: 1}), num_queue_reqs=QueueCount(0, {})))
        first = sorted(r.entries(0), key=str)
        self.assertIn((n.QUEUE_RUNNING, 0, 2), first)
        self.assertIn((n.QUEUE_WAITING, 1, 1), first)
        second = r.entries(1)
        self.assertEqual(sorted(e for e in second if e[0] == n.QUEUE_RUNNING),
                         [(n.QUEUE_RUNNING, 0, 0), (n.QUEUE_RUNNING, 1, 0), (n.QUEUE_RUNNING, 2, 1)])
        self.assertEqual(sorted(e for e in second if e[0] == n.QUEUE_WAITING),
                         [(n.QUEUE_WAITING, 0, 0), (n.QUEUE_WAITING, 1, 0), (n.QUEUE_WAITING, 2, 0)])

    def test_priority_none_travels_as_its_own_series(self):
        c, r = scheduler()
        c.log_stats(SchedulerStats(num_queue_reqs=QueueCount(2, {None: 2})))
        self.assertEqual(r.entries(0), [(n.QUEUE_WAITING, None, 2)])

    def test_the_report_kind_says_which_derived_value_the_report_owns(self):
        c, r = scheduler()
        c.log_prefill_stats(SchedulerStats())
        c.log_decode_stats(SchedulerStats())
        c.log_idle_stats(SchedulerStats())
        c.log_stats(SimpleNamespace(report_kind="decode", num_running_reqs=1))
        self.assertEqual([r.field(i, "report_kind") for i in range(4)],
                         [n.REPORT_PREFILL, n.REPORT_DECODE, n.REPORT_IDLE, n.REPORT_DECODE])

    def test_the_kind_comes_from_sglangs_reporter_method_names_when_not_stated(self):
        c, r = scheduler()

        def report_prefill_stats():
            c.log_stats(SchedulerStats())

        def report_decode_stats():
            c.log_stats(SchedulerStats())

        def _maybe_log_idle_metrics():
            c.log_stats(SchedulerStats())

        def somewhere_else():
            c.log_stats(SchedulerStats())

        for fn in (report_prefill_stats, report_decode_stats, _maybe_log_idle_metrics, somewhere_else):
            fn()
        self.assertEqual([r.field(i, "report_kind") for i in range(4)],
                         [n.REPORT_PREFILL, n.REPORT_DECODE, n.REPORT_IDLE, n.REPORT_UNSPECIFIED])

    def test_optional_groups_follow_the_features_and_spec_and_routing_are_always_present(self):
        c, r = scheduler(enable_lora=True, enable_hierarchical_cache=False)
        c.log_stats(SchedulerStats())
        groups = r.field(0, "groups")
        self.assertTrue(groups & n.GROUP_LORA)
        self.assertFalse(groups & n.GROUP_HICACHE)
        self.assertTrue(groups & n.GROUP_SPECULATIVE)
        self.assertTrue(groups & n.GROUP_ROUTING_KEYS)

    def test_routing_key_counts_become_gt_le_bins(self):
        c, r = scheduler()
        c.log_stats(SchedulerStats(routing_key_running_req_counts=[1, 1, 2, 4, 200, 201],
                                   routing_key_all_req_counts=[3]))
        self.assertEqual(r.field(0, "routing_key_running_req_counts"), (2, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1))
        self.assertEqual(r.field(0, "routing_key_all_req_counts"), (0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0))

    def test_a_partial_plain_object_reports_zero_for_what_it_lacks(self):
        c, r = scheduler()
        c.log_stats(SimpleNamespace(num_running_reqs=4, token_usage=0.5, num_used_tokens=10.0))
        self.assertEqual(r.field(0, "num_running_reqs"), 4)
        self.assertEqual(r.field(0, "token_usage"), 0.5)
        self.assertEqual(r.field(0, "num_used_tokens"), 10)
        self.assertEqual(r.field(0, "kv_used_tokens"), 0)


class SchedulerSeries(unittest.TestCase):
    def test_effective_prefill_modes_are_pre_seeded_and_timeouts_only_on_pd_nodes(self):
        c, r = scheduler()
        for mode in ("input", "device_hit", "host_hit", "storage_hit"):
            r.series("sglang:prefill_effective_tokens_total", mode=mode)
        self.assertNotIn("sglang:kv_transfer_timeouts_total", r.families())
        _, r2 = scheduler(labels={**SCHEDULER_LABELS, "engine_type": "decode"})
        r2.series("sglang:kv_transfer_timeouts_total", stage="bootstrap")
        r2.series("sglang:kv_transfer_timeouts_total", stage="transfer")

    def test_counters_appear_on_first_use_not_before(self):
        c, r = scheduler()
        self.assertNotIn("sglang:num_bootstrap_failed_reqs_total", r.families())
        c.increment_bootstrap_failed_reqs()
        self.assertEqual(r.total("sglang:num_bootstrap_failed_reqs_total"), 1)
        c.increment_prefill_retries(0)
        self.assertNotIn("sglang:num_prefill_retries_total", r.families())

    def test_retraction_updates_three_counters_in_one_call(self):
        c, r = scheduler()
        calls = r.apply_calls
        c.increment_retracted_reqs(2, 300, 40)
        self.assertEqual(r.apply_calls, calls + 1)
        self.assertEqual(r.total("sglang:num_retracted_reqs_total"), 2)
        self.assertEqual(r.total("sglang:num_retracted_input_tokens_total"), 300)
        self.assertEqual(r.total("sglang:num_retracted_output_tokens_total"), 40)

    def test_realtime_tokens_skip_zero_modes_and_add_dp_cooperation_series(self):
        c, r = scheduler()
        c.increment_realtime_tokens(DPCooperationInfo(num_prefill_ranks=2), prefill_compute_tokens=100,
                                    decode_tokens=7)
        self.assertEqual(r.total("sglang:realtime_tokens_total", mode="prefill_compute"), 100)
        self.assertEqual(r.total("sglang:realtime_tokens_total", mode="decode"), 7)
        self.assertEqual(r.total("sglang:dp_cooperation_realtime_tokens_total", mode="decode", num_prefill_ranks="2"),
                         7)
        with self.assertRaises(AssertionError):
            r.series("sglang:realtime_tokens_total", mode="prefill_cache")

    def test_prefill_delayer_outcome_labels_are_lowercase_booleans_and_buckets_follow_max_delay(self):
        c, r = scheduler(prefill_delayer_max_delay_passes=30)
        c.observe_prefill_delayer_outcome(3, 1.5, "token_usage", True, "budget", False)
        r.series("sglang:prefill_delayer_outcomes_total", input_estimation="token_usage", output_allow="true",
                 output_reason="budget", actual_execution="false")
        self.assertNotIn("sglang:prefill_delayer_wait_seconds", r.families())
        c.observe_prefill_delayer_outcome(3, 1.5, "token_usage", True, "budget", True)
        passes = [s for s in r.registered if s[2] == "sglang:prefill_delayer_wait_forward_passes"][0]
        self.assertEqual(passes[4], (0.0, 5.0, 20.0, 29.0))
        seconds = [s for s in r.registered if s[2] == "sglang:prefill_delayer_wait_seconds"][0]
        self.assertEqual(seconds[4][0], 0.0)

    def test_eplb_balancedness_only_where_enabled_on_moe_ep_rank_zero(self):
        c, r = scheduler(enable_expert_balancedness=False)
        c.increment_eplb_balancedness("decode", 0.9)
        self.assertNotIn("sglang:eplb_balancedness", r.families())
        c, r = scheduler(enable_expert_balancedness=True)
        c.increment_eplb_balancedness("decode", 0.9)
        self.assertEqual(r.registered[-1][1], "summary")

    def test_grammar_stats_feed_histograms_and_counters_in_one_call(self):
        c, r = scheduler()
        calls = r.apply_calls
        c.log_grammar_stats(GrammarStats(compilation_time=0.2, schema_count=3, ebnf_size=900,
                                         tree_traversal_time=[0.01, 0.03], is_cache_hit=True, num_timeout=2))
        self.assertEqual(r.apply_calls, calls + 1)
        self.assertEqual(r.total("sglang:num_grammar_total"), 1)
        self.assertEqual(r.total("sglang:num_grammar_timeout_total"), 2)
        avg = r.ops_of(r.series("sglang:grammar_tree_traversal_time_avg"))
        self.assertAlmostEqual(avg[0][2], 0.02)

    def test_constants_are_mostrecent_gauges_set_once(self):
        c, r = scheduler()
        c.emit_constants(1000, None, 10.0, 5.0, {"decode": 1.5}, None, 16, 62, 4096, 70.0)
        self.assertNotIn("sglang:max_total_num_tokens_swa", r.families())
        self.assertNotIn("sglang:max_running_requests_under_SLO", r.families())
        ops = r.ops_of(r.series("sglang:graph_memory_usage_gb", phase="decode"))
        self.assertEqual(ops, [("set", ops[0][1], 1.5)])


class DpAttention(unittest.TestCase):
    def stats(self, local):
        return DPBalanceStats.create(local_tokens=local, global_num_tokens=[local, 40], local_attention_pairs=local,
                                     global_attention_pairs=[local, 100], sync_wait_seconds=0.002)

    def test_scheduled_and_imbalance_counters_and_the_rank_state(self):
        c, r = scheduler()
        c.observe_dp_balance(self.stats(10))
        self.assertEqual(r.total("sglang:dp_attention_tokens_total", kind="scheduled"), 10)
        self.assertEqual(r.total("sglang:dp_attention_tokens_total", kind="imbalance"), 30)
        self.assertEqual(r.total("sglang:dp_attention_pairs_total", kind="imbalance"), 90)
        self.assertEqual(r.total("sglang:dp_attention_steps_total", rank_state="active"), 1)
        c.observe_dp_balance(self.stats(0))
        self.assertEqual(r.total("sglang:dp_attention_steps_total", rank_state="idle"), 1)

    def test_only_attention_rank_zero_of_dp_zero_observes_the_imbalance_ratio(self):
        c, r = scheduler()
        c.observe_dp_balance(self.stats(10))
        ratio = r.ops_of(r.series("sglang:dp_attention_token_imbalance_ratio"))
        self.assertAlmostEqual(ratio[0][2], 40 * 2 / 50)
        for attention in ((1, 0, 0), (0, 1, 0), (0, 0, 1)):
            c, r = scheduler(attention=attention)
            c.observe_dp_balance(self.stats(10))
            self.assertNotIn("sglang:dp_attention_token_imbalance_ratio", r.families())
            self.assertIn("sglang:dp_attention_sync_wait_seconds", r.families())


class Tokenizer(unittest.TestCase):
    def setUp(self):
        self.r = RecordingReporter(TOKENIZER_LABELS)
        self.t = TokenizerMetricsCollector(labels=TOKENIZER_LABELS, reporter=self.r, allowed_custom_labels=["tenant"])

    def test_itl_bulk_observe_is_n_samples_of_interval_over_n_in_one_call(self):
        self.t.observe_inter_token_latency(self.t.labels, 0.2, 4)
        series = self.r.series("sglang:inter_token_latency_seconds")
        self.assertEqual(self.r.ops_of(series), [("observe", series, 0.05, 4, 0.2)])

    def test_itl_without_new_tokens_observes_nothing(self):
        self.t.observe_inter_token_latency(self.t.labels, 0.2, 0)
        self.assertEqual(self.r.ops, [])

    def test_ttft_and_e2e_carry_is_streaming_and_itl_does_not(self):
        self.t.observe_time_to_first_token(self.t.labels, 0.3, stream=True)
        self.r.series("sglang:time_to_first_token_seconds", is_streaming="true")
        self.t.observe_one_finished_request(self.t.labels, 100, 10, 0, 1.0, False, is_streaming=False)
        self.r.series("sglang:e2e_request_latency_seconds", is_streaming="false")
        self.r.series("sglang:num_requests_total", is_streaming="false")
        self.t.observe_inter_token_latency(self.t.labels, 0.1, 1)
        self.r.series("sglang:inter_token_latency_seconds")

    def test_tpot_none_observes_nothing(self):
        self.t.observe_time_per_output_token(self.t.labels, None)
        self.assertEqual(self.r.ops, [])
        self.t.observe_time_per_output_token(self.t.labels, 0.02)
        self.assertEqual(len(self.r.ops_of(self.r.series("sglang:request_time_per_output_token_seconds"))), 1)

    def test_a_finished_request_is_one_batched_call_with_cached_tokens_by_tier(self):
        calls = self.r.apply_calls
        self.t.observe_one_finished_request(self.t.labels, 1000, 50, 600, 2.5, True,
                                            {"device": 300, "host": 200, "storage": 100, "storage_backend": "file"},
                                            spec_verify_ct=12, is_streaming=True)
        self.assertEqual(self.r.apply_calls, calls + 1)
        self.assertEqual(self.r.total("sglang:cached_tokens_total", cache_source="device"), 300)
        self.assertEqual(self.r.total("sglang:cached_tokens_total", cache_source="storage_file"), 100)
        self.assertEqual(self.r.total("sglang:num_so_requests_total"), 1)
        self.assertEqual(self.r.total("sglang:spec_verify_calls_total"), 12)
        uncached = self.r.ops_of(self.r.series("sglang:uncached_prompt_tokens_histogram"))
        self.assertEqual(uncached[0][2], 400)

    def test_cached_tokens_without_details_go_to_total_and_zero_tiers_are_skipped(self):
        self.t.observe_one_finished_request(self.t.labels, 100, 5, 30, 1.0, False)
        self.assertEqual(self.r.total("sglang:cached_tokens_total", cache_source="total"), 30)
        self.t.observe_one_finished_request(self.t.labels, 100, 5, 30, 1.0, False, {"device": 30, "host": 0})
        with self.assertRaises(AssertionError):
            self.r.series("sglang:cached_tokens_total", cache_source="host")

    def test_custom_labels_pass_only_when_allowed(self):
        labels = self.t.labels_for_request({"tenant": "a", "user": "alice"})
        self.assertEqual(labels["tenant"], "a")
        self.assertNotIn("user", labels)
        self.t.observe_one_aborted_request({**labels, "user": "alice"})
        self.r.series("sglang:num_aborted_requests_total", tenant="a")

    def test_labels_equal_to_the_identity_are_left_to_the_daemon(self):
        self.t.observe_one_aborted_request({"model_name": "m", "engine_type": "unified", "priority": "", "tenant": ""})
        self.r.series("sglang:num_aborted_requests_total")
        self.t.observe_one_aborted_request({**TOKENIZER_LABELS, "priority": "3"})
        self.r.series("sglang:num_aborted_requests_total", priority="3")

    def test_the_straggler_check_uses_the_streaming_ttft_p99_bucket(self):
        for _ in range(99):
            self.t.observe_time_to_first_token(self.t.labels, 0.15, stream=True)
        self.assertFalse(self.t.check_time_to_first_token_straggler(5.0))  # under 100 observations
        self.t.observe_time_to_first_token(self.t.labels, 0.15, stream=True)
        self.assertTrue(self.t.check_time_to_first_token_straggler(0.2))
        self.assertFalse(self.t.check_time_to_first_token_straggler(0.1))

    def test_bucket_overrides_and_rules_reach_the_registration(self):
        r = RecordingReporter(TOKENIZER_LABELS)
        t = TokenizerMetricsCollector(labels=TOKENIZER_LABELS, reporter=r, bucket_time_to_first_token=[0.5, 1],
                                      prompt_tokens_buckets=["tse", "1000", "2", "4"])
        t.observe_time_to_first_token(t.labels, 0.3)
        t.observe_one_finished_request(t.labels, 10, 1, 0, 0.1, False)
        ttft = [s for s in r.registered if s[2] == "sglang:time_to_first_token_seconds"][0]
        self.assertEqual(ttft[4], (0.5, 1.0))
        prompt = [s for s in r.registered if s[2] == "sglang:prompt_tokens_histogram"][0]
        self.assertEqual(prompt[4], (996.0, 998.0, 1000.0, 1002.0, 1004.0))
        generation = [s for s in r.registered if s[2] == "sglang:generation_tokens_histogram"][0]
        self.assertEqual(list(generation[4]), [float(b) for b in catalog.PROMPT_TOKENS])


class FrontEnd(unittest.TestCase):
    def test_the_asgi_middleware_counts_requests_responses_active_requests_and_routing_keys(self):
        import asyncio
        from rankstat.sglang import HttpMetrics, HttpMetricsMiddleware
        r = RecordingReporter({})
        metrics = HttpMetrics(r)
        seen = {}

        async def app(scope, receive, send):
            seen["active"] = r.ops_of(r.series("sglang:http_requests_active", endpoint="/generate",
                                               method="POST"))[-1][2]
            seen["keys"] = r.ops_of(r.series("sglang:routing_keys_active"))[-1][2]
            await send({"type": "http.response.start", "status": 429})
            await send({"type": "http.response.body", "body": b""})

        async def send(message):
            pass

        scope = {"type": "http", "method": "POST", "path": "/generate", "headers": [(b"x-smg-routing-key", b"k1")]}
        asyncio.run(HttpMetricsMiddleware(app, metrics)(scope, None, send))
        self.assertEqual(seen, {"active": 1, "keys": 1})
        self.assertEqual(r.total("sglang:http_requests_total", endpoint="/generate", method="POST"), 1)
        self.assertEqual(r.total("sglang:http_responses_total", endpoint="/generate", status_code="429",
                                 method="POST"), 1)
        active = r.ops_of(r.series("sglang:http_requests_active", endpoint="/generate", method="POST"))
        self.assertEqual(active[-1][2], 0)
        self.assertEqual(r.ops_of(r.series("sglang:routing_keys_active"))[-1][2], 0)

    def test_routing_keys_are_reference_counted(self):
        from rankstat.sglang import HttpMetrics
        r = RecordingReporter({})
        metrics = HttpMetrics(r)
        a = metrics.request_started("/generate", "POST", "k")
        b = metrics.request_started("/generate", "POST", "k")
        metrics.request_finished(a, 200)
        self.assertEqual(r.ops_of(r.series("sglang:routing_keys_active"))[-1][2], 1)
        metrics.request_finished(b, 200)
        self.assertEqual(r.ops_of(r.series("sglang:routing_keys_active"))[-1][2], 0)

    def test_func_latency_is_shaped_like_sglangs_histogram(self):
        from rankstat.sglang import FuncLatency
        r = RecordingReporter({})
        FuncLatency(r).labels(name="generate_request").observe(0.3)
        series = [s for s in r.registered if s[2] == "sglang:func_latency_seconds"][0]
        self.assertEqual(series[3], (("name", "generate_request"),))
        self.assertAlmostEqual(series[4][-1], 0.05 * 1.5 ** 17)


class CachesAndStorage(unittest.TestCase):
    def test_prefetch_outcomes_turn_snapshots_into_increments_and_a_drop_starts_a_new_epoch(self):
        r = RecordingReporter(SCHEDULER_LABELS)
        s = StorageMetricsCollector(SCHEDULER_LABELS, reporter=r)
        s.log_prefetch_outcomes({"attempts": 10, "issued": 4})
        s.log_prefetch_outcomes({"attempts": 15, "issued": 4})
        s.log_prefetch_outcomes({"attempts": 3, "issued": 5})
        self.assertEqual(r.total("sglang:hicache_prefetch_outcomes_total", outcome="attempts"), 10 + 5 + 3)
        self.assertEqual(r.total("sglang:hicache_prefetch_outcomes_total", outcome="issued"), 5)

    def test_storage_histograms_take_every_value(self):
        r = RecordingReporter(SCHEDULER_LABELS)
        s = StorageMetricsCollector(SCHEDULER_LABELS, reporter=r)
        s.log_storage_metrics(StorageMetrics(prefetch_pgs=[1, 7, 70]))
        self.assertEqual(len(r.ops_of(r.series("sglang:prefetch_pgs"))), 3)

    def test_eviction_buckets_come_from_the_env_override_when_set(self):
        import os
        from unittest import mock
        with mock.patch.dict(os.environ, {"SGLANG_BUCKET_EVICTION_DURATION": "0.01,0.1"}):
            r = RecordingReporter(SCHEDULER_LABELS)
            c = RadixCacheMetricsCollector(SCHEDULER_LABELS, reporter=r)
        c.observe_eviction_duration(0.05)
        c.observe_load_back_duration(0.05)
        registered = {s[2]: s[4] for s in r.registered}
        self.assertEqual(registered["sglang:eviction_duration_seconds"], (0.01, 0.1))
        self.assertEqual(registered["sglang:load_back_duration_seconds"], tuple(catalog.LOAD_BACK_DURATION))


if __name__ == "__main__":
    unittest.main()
