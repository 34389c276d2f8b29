"""Bucket rules with SGLang's semantics: default, tse <middle> <base> <count>, custom, env overrides."""

import os
import unittest
from unittest import mock

from rankstat.buckets import (buckets_or_rule, exponential_buckets, generate_buckets, histogram_conf_from_env,
                              two_sides_exponential_buckets)


class DefaultRule(unittest.TestCase):
    def test_an_empty_rule_means_the_default_sorted_without_duplicates(self):
        self.assertEqual(generate_buckets([], [3, 1, 2, 2]), [1.0, 2.0, 3.0])
        self.assertEqual(generate_buckets(None, [5, 1]), [1.0, 5.0])

    def test_the_default_rule_by_name(self):
        self.assertEqual(generate_buckets(["default"], [0.5, 0.1]), [0.1, 0.5])
        self.assertEqual(generate_buckets("default", [2, 1]), [1.0, 2.0])


class TwoSidesExponential(unittest.TestCase):
    def test_middle_then_ceil_half_count_steps_of_a_growing_distance_on_both_sides(self):
        # count 4 -> 2 steps: d = 2 -> 3 and max(0, -1) = 0; d = 4 -> 5 and max(0, -3) = 0.
        self.assertEqual(two_sides_exponential_buckets(1, 2, 4), [0.0, 1.0, 3.0, 5.0])

    def test_an_odd_count_rounds_the_number_of_steps_up(self):
        # count 3 -> ceil(1.5) = 2 steps, the same as count 4.
        self.assertEqual(two_sides_exponential_buckets(10, 2, 3), two_sides_exponential_buckets(10, 2, 4))
        self.assertEqual(two_sides_exponential_buckets(10, 2, 3), [6.0, 8.0, 10.0, 12.0, 14.0])

    def test_the_distance_starts_at_one_and_is_multiplied_before_use(self):
        self.assertEqual(two_sides_exponential_buckets(100, 10, 2), [90.0, 100.0, 110.0])

    def test_the_lower_side_is_clamped_at_zero_and_deduplicated(self):
        self.assertEqual(two_sides_exponential_buckets(0.5, 3, 6), [0.0, 0.5, 3.5, 9.5, 27.5])

    def test_the_tse_rule_parses_its_three_arguments(self):
        self.assertEqual(generate_buckets(["tse", "1", "2", "4"], []), [0.0, 1.0, 3.0, 5.0])
        self.assertEqual(generate_buckets("tse 100 10 2", [9]), [90.0, 100.0, 110.0])

    def test_the_tse_rule_needs_a_base_above_one(self):
        with self.assertRaises(ValueError):
            generate_buckets(["tse", "1", "1", "4"], [])
        with self.assertRaises(ValueError):
            generate_buckets(["tse", "1", "2"], [])


class CustomRule(unittest.TestCase):
    def test_custom_bounds_are_floats_sorted_without_duplicates(self):
        self.assertEqual(generate_buckets(["custom", "5", "1", "1", "2.5"], [9]), [1.0, 2.5, 5.0])

    def test_custom_needs_at_least_one_bound(self):
        with self.assertRaises(ValueError):
            generate_buckets(["custom"], [1])

    def test_an_unknown_rule_is_rejected(self):
        with self.assertRaises(ValueError):
            generate_buckets(["linear", "1"], [1])


class Overrides(unittest.TestCase):
    def test_env_override_is_a_comma_separated_list(self):
        with mock.patch.dict(os.environ, {"SGLANG_BUCKET_EVICTION_DURATION": "0.5,0.1,1"}):
            self.assertEqual(histogram_conf_from_env("SGLANG_BUCKET_EVICTION_DURATION"), [0.5, 0.1, 1.0])

    def test_an_unset_or_empty_env_override_means_the_default(self):
        with mock.patch.dict(os.environ, {"SGLANG_BUCKET_LOAD_BACK_DURATION": ""}):
            self.assertIsNone(histogram_conf_from_env("SGLANG_BUCKET_LOAD_BACK_DURATION"))
        os.environ.pop("RANKSTAT_TEST_UNSET_BUCKETS", None)
        self.assertIsNone(histogram_conf_from_env("RANKSTAT_TEST_UNSET_BUCKETS"))

    def test_a_tokenizer_override_takes_numbers_as_given_or_a_rule(self):
        self.assertEqual(buckets_or_rule(None, [2, 1]), [1.0, 2.0])
        self.assertEqual(buckets_or_rule([0.3, 0.1], [9]), [0.1, 0.3])
        self.assertEqual(buckets_or_rule(["tse", "1", "2", "4"], [9]), [0.0, 1.0, 3.0, 5.0])

    def test_exponential_buckets_multiply_the_start_by_the_width(self):
        self.assertEqual(exponential_buckets(1, 2, 4), [1, 2, 4, 8])
        per_stage = exponential_buckets(0.001, 1.62, 30)
        self.assertEqual(len(per_stage), 30)
        self.assertAlmostEqual(per_stage[-1], 1191.06, delta=0.01)


if __name__ == "__main__":
    unittest.main()
