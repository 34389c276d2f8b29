"""SGLang's own collectors, unchanged, through rankstat: the same exposition as prometheus_client.

For every tree of the SGLang metrics oracle (../shared/reference/sglang-oracle/trees/<commit>: SGLang's
real metrics_collector.py at one commit, runnable without SGLang), drive.py makes the same collector
calls twice: once on prometheus_client in multiprocess mode (the reference), once on rankstat
(`--backend plugin:rankstat.sglang:stat_loggers`, plus the install adapter) while a rankstatd from this
build serves the live segment. Every family must come out identical: HELP, TYPE and the sorted sample
lines (`pid="…"` normalised, as drive.py normalises the reference). No collector call may fail and
nothing may leak into prometheus_client.

On trees with the stat-logger hooks the backend is stat_loggers() alone (it also reaches the collectors
SGLang builds without a role, such as EncoderMetricsCollector); on trees without them, the documented
adapter rankstat.sglang:install (--setup). promtool must find nothing in rankstatd's exposition that it
does not find in prometheus_client's.

Skipped, with a message, where ../shared is absent."""

import os
import unittest
from typing import List

from oracle_compare import EngineOracleCase

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
ORACLE = os.path.join(os.path.dirname(os.path.abspath(SOURCE)), "shared", "reference", "sglang-oracle")
TREES = os.path.join(ORACLE, "trees")


def trees() -> List[str]:
    if not os.path.isdir(TREES):
        return []
    return sorted(t for t in os.listdir(TREES) if os.path.isdir(os.path.join(TREES, t)))


def has_hooks(tree: str) -> bool:
    path = os.path.join(TREES, tree, "python", "sglang", "srt", "observability", "metrics_collector.py")
    with open(path) as f:
        return "_counter_cls" in f.read()


def failed_calls(summary: dict) -> List[str]:
    bad = list(summary.get("errors", []))
    for role, c in summary.get("collectors", {}).items():
        bad += [f"{role}.{m}: {s}" for m, s in c.get("calls", {}).items() if not s.startswith("ok")]
        if str(c.get("how", "")).startswith("ERROR"):
            bad.append(f"{role}: {c['how']}")
    bad += [f"{k}: {s}" for k, s in summary.get("direct_calls", {}).items() if s != "ok"]
    return bad


@unittest.skipUnless(trees(), f"the SGLang oracle is absent ({TREES}); this test needs ../shared beside the repository")
class SGLangCollectorsThroughRankstat(EngineOracleCase):
    def check_tree(self, tree: str):
        ref_text = self.reference(ORACLE, ["--tree", os.path.join("trees", tree)], tree)
        args = ["--tree", os.path.join(TREES, tree), "--backend", "plugin:rankstat.sglang:stat_loggers"]
        if not has_hooks(tree):  # the documented one-call adapter for SGLang without the hooks
            args += ["--setup", "rankstat.sglang:install"]
        text, summary = self.through_rankstat(ORACLE, args, tree)
        self.assertEqual(failed_calls(summary), [], f"{tree}: collector calls failed through rankstat")
        self.assertEqual(summary.get("family_list"), [], f"{tree}: families leaked into prometheus_client")
        self.check_same_exposition(tree, ref_text, text)


def _add_tree_tests():
    for tree in trees():
        def test(self, tree=tree):
            self.check_tree(tree)
        test.__name__ = f"test_tree_{tree}_gives_prometheus_clients_exposition"
        setattr(SGLangCollectorsThroughRankstat, test.__name__, test)


_add_tree_tests()

if __name__ == "__main__":
    unittest.main()
