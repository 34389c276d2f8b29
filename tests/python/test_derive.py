"""Derived values with SGLang's edge cases: TPOT, TTFT, ITL bulk, gen_throughput staleness, cache hit
rate, speculative acceptance, utilization, DP balance."""

import math
import unittest

from rankstat.sglang import (DPBalanceStats, GenThroughput, QueueCount, cache_hit_rate, inter_token_bulk,
                             max_pool_usage, should_observe_ttft, spec_accept, time_per_output_token,
                             time_to_first_token, utilization)


class TimePerOutputToken(unittest.TestCase):
    def test_decode_latency_is_divided_by_the_tokens_after_the_first(self):
        self.assertAlmostEqual(time_per_output_token(10.0, 12.0, 5), 0.5)

    def test_zero_or_one_output_token_has_no_tpot(self):
        self.assertIsNone(time_per_output_token(10.0, 12.0, 1))
        self.assertIsNone(time_per_output_token(10.0, 12.0, 0))

    def test_no_first_token_means_no_tpot(self):
        self.assertIsNone(time_per_output_token(0.0, 12.0, 5))

    def test_a_non_positive_decode_latency_has_no_tpot(self):
        self.assertIsNone(time_per_output_token(12.0, 12.0, 5))
        self.assertIsNone(time_per_output_token(12.0, 11.0, 5))


class TimeToFirstToken(unittest.TestCase):
    def test_ttft_is_first_token_minus_created(self):
        self.assertAlmostEqual(time_to_first_token(1.0, 1.25), 0.25)

    def test_no_first_token_gives_none_rather_than_a_negative_latency(self):
        self.assertIsNone(time_to_first_token(5.0, 0.0))

    def test_aborted_requests_and_pd_prefill_nodes_observe_no_ttft(self):
        self.assertFalse(should_observe_ttft("abort", None))
        self.assertFalse(should_observe_ttft(None, "prefill"))
        self.assertTrue(should_observe_ttft(None, "null"))
        self.assertTrue(should_observe_ttft("length", "decode"))


class InterTokenBulk(unittest.TestCase):
    def test_one_batch_of_n_tokens_is_n_samples_of_interval_over_n_and_the_whole_interval_in_the_sum(self):
        self.assertEqual(inter_token_bulk(0.2, 4), (0.05, 4, 0.2))

    def test_a_batch_without_new_tokens_is_no_sample(self):
        self.assertIsNone(inter_token_bulk(0.2, 0))
        self.assertIsNone(inter_token_bulk(0.2, -1))


class GenThroughputStaleness(unittest.TestCase):
    def setUp(self):
        self.now = 100.0
        self.tracker = GenThroughput(clock=lambda: self.now)

    def test_throughput_is_tokens_over_the_time_since_the_last_decode_report(self):
        self.now = 102.0
        self.assertAlmostEqual(self.tracker.record_decode(500), 250.0)
        self.now = 103.0
        self.assertAlmostEqual(self.tracker.record_decode(100), 100.0)

    def test_it_keeps_the_last_value_for_thirty_seconds_then_falls_to_zero(self):
        self.now = 101.0
        self.tracker.record_decode(100)
        self.assertAlmostEqual(self.tracker.current(now=131.0), 100.0)
        self.assertEqual(self.tracker.current(now=131.001), 0.0)
        self.assertEqual(self.tracker.current(now=131.0), 0.0)  # stays 0 until the next decode report

    def test_before_any_decode_report_it_is_zero(self):
        self.assertEqual(self.tracker.current(), 0.0)

    def test_a_pause_zeroes_it_at_once(self):
        self.now = 101.0
        self.tracker.record_decode(100)
        self.tracker.pause()
        self.assertEqual(self.tracker.current(now=101.5), 0.0)


class CacheHitRate(unittest.TestCase):
    def test_hits_over_input_plus_hits(self):
        self.assertAlmostEqual(cache_hit_rate(300, 100), 0.25)

    def test_recomputed_tokens_of_retracted_requests_are_not_savings(self):
        self.assertAlmostEqual(cache_hit_rate(300, 100, reprocessed_input_tokens=100, reprocessed_hit_tokens=100), 0.0)
        self.assertAlmostEqual(cache_hit_rate(300, 200, reprocessed_hit_tokens=100), 0.25)

    def test_an_empty_batch_has_rate_zero(self):
        self.assertEqual(cache_hit_rate(0, 0), 0.0)


class SpeculativeAcceptance(unittest.TestCase):
    def test_accept_length_counts_the_bonus_token_and_rate_does_not(self):
        # 10 verifies produced 30 tokens: 20 accepted drafts of 10 * 3 proposed (4 draft tokens - 1).
        length, rate = spec_accept(30, 10, 20, speculative_num_draft_tokens=4, speculative_num_steps=3)
        self.assertAlmostEqual(length, 3.0)
        self.assertAlmostEqual(rate, 20 / 30)

    def test_without_draft_tokens_the_rounds_are_the_steps(self):
        _, rate = spec_accept(30, 10, 20, speculative_num_draft_tokens=None, speculative_num_steps=5)
        self.assertAlmostEqual(rate, 20 / 50)

    def test_no_verify_is_zero(self):
        self.assertEqual(spec_accept(0, 0, 0, 4, 3), (0.0, 0.0))


class Utilization(unittest.TestCase):
    def test_a_pd_prefill_node_reports_minus_one(self):
        self.assertEqual(utilization("prefill", 10, 40, 0.5), -1.0)

    def test_the_larger_of_running_over_slo_and_usage_over_ninety_percent(self):
        self.assertAlmostEqual(utilization("null", 10, 40, 0.45), 0.5)
        self.assertAlmostEqual(utilization("decode", 36, 40, 0.45), 0.9)

    def test_without_an_slo_limit_it_stays_zero(self):
        self.assertEqual(utilization(None, 10, None, 0.5), 0.0)
        self.assertEqual(utilization(None, 10, 0, 0.5), 0.0)

    def test_token_usage_is_the_fullest_pool(self):
        self.assertEqual(max_pool_usage(0.3, 0.7, 0.1), 0.7)
        self.assertEqual(max_pool_usage(0.3), 0.3)


class DpBalance(unittest.TestCase):
    def test_imbalance_and_max_over_mean(self):
        s = DPBalanceStats.create(local_tokens=10, global_num_tokens=[10, 30, 20], local_attention_pairs=50,
                                  global_attention_pairs=[50, 400, 100], sync_wait_seconds=0.001)
        self.assertEqual(s.imbalance_tokens, 20)
        self.assertEqual(s.imbalance_attention_pairs, 350)
        self.assertAlmostEqual(s.max_over_mean, 30 * 3 / 60)
        self.assertEqual(s.num_ranks, 3)

    def test_a_step_without_tokens_anywhere_is_an_error_not_a_sample(self):
        with self.assertRaises(ValueError):
            DPBalanceStats.create(local_tokens=0, global_num_tokens=[0, 0], local_attention_pairs=0,
                                  global_attention_pairs=[0, 0])

    def test_tokens_without_any_attention_pair_is_an_error(self):
        with self.assertRaises(ValueError):
            DPBalanceStats.create(local_tokens=3, global_num_tokens=[3, 1], local_attention_pairs=0,
                                  global_attention_pairs=[0, 0])

    def test_an_idle_rank_in_a_busy_step_is_fine(self):
        s = DPBalanceStats.create(local_tokens=0, global_num_tokens=[0, 8], local_attention_pairs=0,
                                  global_attention_pairs=[0, 36])
        self.assertEqual(s.imbalance_tokens, 8)
        self.assertFalse(math.isnan(s.max_over_mean))


class Queues(unittest.TestCase):
    def test_a_queue_count_is_the_total_and_the_per_priority_breakdown_in_one_pass(self):
        q = QueueCount.from_priorities([0, 1, 1, None], enable_priority_scheduling=True)
        self.assertEqual(q.total, 4)
        self.assertEqual(q.by_priority, {0: 1, 1: 2, None: 1})
        self.assertIsNone(QueueCount.from_priorities([0, 1], False).by_priority)


if __name__ == "__main__":
    unittest.main()
