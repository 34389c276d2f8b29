"""docs/metrics.md's family table is what SGLang's own collectors declare at every oracle tree: the
generator (scripts/gen_metrics_doc.py) run in --check mode finds nothing to change."""

import os
import subprocess
import sys
import unittest

SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ORACLE = os.path.join(os.path.dirname(SOURCE), "shared", "reference", "sglang-oracle", "trees")


@unittest.skipUnless(os.path.isdir(ORACLE), f"the SGLang oracle is absent ({ORACLE}); needs ../shared beside the repository")
class MetricsDocumentation(unittest.TestCase):
    def test_the_family_table_is_generated_from_the_oracle_trees(self):
        cli = os.environ["RANKSTAT_CLI"]
        result = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "gen_metrics_doc.py"), "--cli", cli,
                                 "--check"], capture_output=True, text=True, timeout=240)
        self.assertEqual(result.returncode, 0, result.stdout[-4000:] + result.stderr[-2000:])


if __name__ == "__main__":
    unittest.main()
