"""docs/metrics.md's family table is what SGLang's own collectors declare at every SGLang commit of the engine
oracle: a fresh generation (scripts/gen_metrics_doc.py) equals the committed section, and its --check mode
finds a changed cell."""

import importlib.util
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(SOURCE, "scripts", "gen_metrics_doc.py")
_spec = importlib.util.spec_from_file_location("gen_metrics_doc", SCRIPT)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)
ORACLE = gen.oracle_dir()
HAVE_ORACLE = os.path.isdir(os.path.join(ORACLE, "sglang"))


def section(doc: str) -> str:
    return doc.split(gen.BEGIN, 1)[1].split(gen.END, 1)[0]


@unittest.skipUnless(HAVE_ORACLE, f"the engine oracle is absent ({ORACLE}); needs ../shared beside the repository "
                     "or RANKSTAT_ENGINE_ORACLE")
class MetricsDocumentation(unittest.TestCase):
    def setUp(self):
        with open(gen.DOC) as f:
            self.doc = f.read()

    def test_the_family_table_is_a_fresh_generation_from_the_oracle(self):
        fresh = gen.regenerate(self.doc, ORACLE)
        self.assertIsNotNone(fresh, "docs/metrics.md has lost its generated section's markers")
        self.maxDiff = None
        self.assertEqual(section(self.doc), section(fresh),
                         "docs/metrics.md is stale: run scripts/gen_metrics_doc.py")

    def test_the_table_covers_every_family_of_every_commit(self):
        rows = {line.split("`")[1] for line in section(self.doc).splitlines() if line.startswith("| `")}
        for c8 in gen.commits(ORACLE):
            with open(os.path.join(ORACLE, "sglang", f"{c8}.expected.prom")) as f:
                families = set(gen.parse_exposition(f.read()))
            self.assertTrue(families, c8)
            self.assertLessEqual(families, rows, c8)

    def test_the_check_mode_finds_one_changed_cell(self):
        # A generated line read back as "the same" by a loose comparison would make the tests above vacuous.
        row = next(line for line in section(self.doc).splitlines() if "| gauge | mostrecent |" in line)
        changed = self.doc.replace(row, row.replace("| gauge | mostrecent |", "| gauge | livemostrecent |"), 1)
        work = tempfile.mkdtemp(prefix="rankstat-doc-")
        try:
            path = os.path.join(work, "metrics.md")
            with open(path, "w") as f:
                f.write(changed)
            result = subprocess.run([sys.executable, SCRIPT, "--oracle", ORACLE, "--doc", path, "--check"],
                                    capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 1, result.stdout[-2000:] + result.stderr[-2000:])
            self.assertIn("-" + row.replace("| gauge | mostrecent |", "| gauge | livemostrecent |"), result.stdout)
            self.assertIn("+" + row, result.stdout)
        finally:
            shutil.rmtree(work)


class GaugeSignature(unittest.TestCase):
    def test_a_positional_multiprocess_mode_is_read_where_prometheus_client_takes_it(self):
        try:
            import prometheus_client
        except ImportError:
            self.skipTest("prometheus_client is not installed")
        import importlib.metadata
        params = [p for p in inspect.signature(prometheus_client.Gauge.__init__).parameters if p != "self"]
        self.assertEqual(tuple(params[:len(gen.GAUGE_PARAMETERS)]), gen.GAUGE_PARAMETERS,
                         f"prometheus_client {importlib.metadata.version('prometheus_client')}")


if __name__ == "__main__":
    unittest.main()
