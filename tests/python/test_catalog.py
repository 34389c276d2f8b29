"""The package's SGLang catalog agrees with the documentation, the daemon's help texts and the parity
test's expectations."""

import csv
import os
import re
import unittest

from rankstat.sglang import catalog

SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def read(relative: str) -> str:
    with open(os.path.join(SOURCE, relative)) as f:
        return f.read()


class Catalog(unittest.TestCase):
    def test_docs_metrics_md_is_the_generated_table(self):
        self.assertIn(catalog.markdown_table(), read("docs/metrics.md"),
                      "regenerate the table in docs/metrics.md from rankstat.sglang.catalog.markdown_table()")

    def test_every_family_has_a_help_text_in_the_daemon_without_backslash_or_newline(self):
        source = read("daemon/src/engine_catalog.cpp")
        helps = dict(re.findall(r'\{"(sglang:[a-zA-Z0-9_:]+)",\s*"((?:[^"\\]|\\.)*)"', source))
        for family in catalog.FAMILIES:
            with self.subTest(family=family.name):
                self.assertIn(family.name, helps)
                self.assertNotIn("\\\\", helps[family.name].replace('\\"', ""))
                self.assertTrue(helps[family.name].endswith("."))

    def test_the_catalog_serves_what_the_parity_test_expects(self):
        with open(os.path.join(SOURCE, "tests/integration/parity/sglang_families.tsv")) as f:
            rows = list(csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t"))
        expected = {row["name"]: row for row in rows}
        served = {f.name: f for f in catalog.FAMILIES}
        self.assertEqual(set(served) - set(expected), {"sglang:http_responses_total"})
        self.assertEqual(set(expected) - set(served), set())
        for name, row in expected.items():
            with self.subTest(family=name):
                self.assertEqual(served[name].type, row["type"])
                own = [] if row["labels"] == "-" else row["labels"].split(",")
                self.assertEqual(list(served[name].labels), own)
                self.assertEqual(served[name].base or "-", row["base"])

    def test_the_label_shorthands_expand_in_sglangs_order(self):
        self.assertEqual(catalog.base_label_names("S", priority=True, dp_rank=True, extra=["cluster"]),
                         ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "priority", "dp_rank",
                          "cluster"])
        self.assertEqual(catalog.base_label_names("T", priority=False, dp_rank=False), ["model_name", "engine_type"])


if __name__ == "__main__":
    unittest.main()
