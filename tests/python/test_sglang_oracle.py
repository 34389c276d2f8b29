"""SGLang's own collectors, unchanged, through rankstat: the same exposition as prometheus_client.

For every tree of the SGLang metrics oracle (../shared/reference/sglang-oracle/trees/<commit>: SGLang's
real metrics_collector.py at one commit, runnable without SGLang), drive.py makes the same collector
calls twice: once on prometheus_client in multiprocess mode (the reference), once on rankstat
(`--backend plugin:rankstat.sglang:stat_loggers`, plus the install adapter) while a rankstatd from this
build serves the live segment. Every family must come out identical: HELP, TYPE and the sorted sample
lines (`pid="…"` normalised, as drive.py normalises the reference). No collector call may fail and
nothing may leak into prometheus_client.

--setup: on trees without the stat-logger hooks, rankstat.sglang:install (SGLang's own classes build
rankstat metrics); on trees with them, rankstat.sglang:install_unrouted, which reaches only the
collectors stat_loggers cannot (EncoderMetricsCollector has no stat-logger role), so the roles are
proven through stat_loggers itself.

Skipped, with a message, where ../shared is absent."""

import json
import shutil
import os
import re
import subprocess
import sys
import time
import unittest
from typing import Dict, List, Tuple

from daemon_harness import Child, Daemon, TempDir, promtool_findings, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
ORACLE = os.path.join(os.path.dirname(os.path.abspath(SOURCE)), "shared", "reference", "sglang-oracle")
TREES = os.path.join(ORACLE, "trees")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HOLD_SECONDS = 20


def trees() -> List[str]:
    if not os.path.isdir(TREES):
        return []
    return sorted(t for t in os.listdir(TREES) if os.path.isdir(os.path.join(TREES, t)))


def has_hooks(tree: str) -> bool:
    path = os.path.join(TREES, tree, "python", "sglang", "srt", "observability", "metrics_collector.py")
    with open(path) as f:
        return "_counter_cls" in f.read()


Families = Dict[str, Dict[str, object]]


def parse_families(text: str) -> Families:
    """{family: {"help": line, "type": line, "samples": sorted lines}} from a text exposition; the
    family is the name the HELP/TYPE lines give, its samples the lines until the next family.
    rankstat's self-metrics are dropped; pid labels are normalised."""
    text = re.sub(r'pid="\d+"', 'pid="PID"', text)
    out: Families = {}
    current = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name = line.split(None, 3)[2]
            current = out.setdefault(name, {"help": None, "type": None, "samples": []})
            current["help" if line.startswith("# HELP ") else "type"] = line
        elif line.startswith("#"):
            continue
        elif current is not None:
            current["samples"].append(line)
        else:
            out.setdefault("<before any family>", {"help": None, "type": None, "samples": []})["samples"].append(line)
    for family in out.values():
        family["samples"] = sorted(family["samples"])
    return {name: f for name, f in out.items() if not name.startswith("rankstat_")}


def family_diff(name: str, ref: Dict[str, object], mine: Dict[str, object]) -> str:
    lines = [f"--- {name}"]
    for key in ("help", "type"):
        if ref[key] != mine[key]:
            lines.append(f"  {key}: prometheus_client: {ref[key]}")
            lines.append(f"  {key}: rankstat:          {mine[key]}")
    ref_s, mine_s = set(ref["samples"]), set(mine["samples"])
    lines += [f"  - {s}" for s in sorted(ref_s - mine_s)]
    lines += [f"  + {s}" for s in sorted(mine_s - ref_s)]
    return "\n".join(lines)


def compare(ref: Families, mine: Families) -> Tuple[int, List[str]]:
    """(identical family count, readable differences)."""
    problems, same = [], 0
    for name in sorted(set(ref) | set(mine)):
        if name not in mine:
            problems.append(f"--- {name}: missing from rankstatd's exposition ({len(ref[name]['samples'])} samples)")
        elif name not in ref:
            problems.append(f"--- {name}: served by rankstatd, absent from prometheus_client's\n"
                            + "\n".join(f"  + {s}" for s in mine[name]["samples"][:10]))
        elif ref[name] != mine[name]:
            problems.append(family_diff(name, ref[name], mine[name]))
        else:
            same += 1
    return same, problems


def failed_calls(summary: dict) -> List[str]:
    bad = list(summary.get("errors", []))
    for role, c in summary.get("collectors", {}).items():
        bad += [f"{role}.{m}: {s}" for m, s in c.get("calls", {}).items() if not s.startswith("ok")]
        if str(c.get("how", "")).startswith("ERROR"):
            bad.append(f"{role}: {c['how']}")
    bad += [f"{k}: {s}" for k, s in summary.get("direct_calls", {}).items() if s != "ok"]
    return bad


@unittest.skipUnless(trees(), f"the SGLang oracle is absent ({TREES}); this test needs ../shared beside the repository")
class SGLangCollectorsThroughRankstat(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self.files = TempDir("rankstat-oracle-files")
        self.addCleanup(self.files.cleanup)

    def reference(self, tree: str) -> str:
        out = os.path.join(self.files.path, f"ref-{tree}.txt")
        proc = subprocess.run([PYTHON, "drive.py", "--tree", os.path.join("trees", tree), "--backend", "prom",
                               "--out", out, "--quiet"], cwd=ORACLE, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out) as f:
            return f.read()

    def through_rankstat(self, tree: str) -> Tuple[str, dict]:
        shm = TempDir("rankstat-oracle-shm")
        self.addCleanup(shm.cleanup)
        daemon = Daemon(shm.path, self.files.path)
        self.addCleanup(daemon.stop)
        mine_json = os.path.join(self.files.path, f"mine-{tree}.json")
        log = os.path.join(self.files.path, f"drive-{tree}.log")
        env = dict(os.environ, RANKSTAT_SHM_DIR=shm.path, PYTHONPATH=os.path.join(SOURCE, "client", "python"))
        argv = [PYTHON, os.path.join(ORACLE, "drive.py"), "--tree", os.path.join(TREES, tree),
                "--backend", "plugin:rankstat.sglang:stat_loggers",
                "--hold", str(HOLD_SECONDS), "--json", mine_json, "--quiet"]
        if not has_hooks(tree):  # the documented one-call adapter for SGLang without the hooks
            argv += ["--setup", "rankstat.sglang:install"]
        driver = Child(argv, env=env, log_path=log)
        self.addCleanup(driver.kill)

        def ready():
            if not driver.running() and "ORACLE-READY" not in driver.log():
                raise AssertionError("drive.py exited before ORACLE-READY:\n" + driver.log())
            return "ORACLE-READY" in driver.log()
        self.assertTrue(wait_until(ready, 120, interval=0.1), "no ORACLE-READY from drive.py:\n" + driver.log())
        # The daemon finds the segment within a scan interval and drains its ring; take the exposition
        # once two scrapes half a second apart agree.
        box = {"last": None}

        def settled():
            text = daemon.scrape()
            stable = text == box["last"] and any(
                not line.startswith(("#", "rankstat_")) for line in text.splitlines() if line)
            box["last"] = text
            return stable
        wait_until(settled, 15, interval=0.5)
        self.assertIsNotNone(box["last"], "no scrape")
        with open(mine_json) as f:
            summary = json.load(f)
        return box["last"], summary

    def check_tree(self, tree: str):
        ref_text = self.reference(tree)
        ref = parse_families(ref_text)
        text, summary = self.through_rankstat(tree)
        mine = parse_families(text)
        self.assertEqual(failed_calls(summary), [], f"{tree}: collector calls failed through rankstat")
        self.assertEqual(summary.get("family_list"), [], f"{tree}: families leaked into prometheus_client")
        # Prometheus's own parser and linter accept what rankstatd serves, and find nothing that they do
        # not also find in prometheus_client's exposition of the same calls (SGLang's naming is SGLang's).
        if shutil.which("promtool"):
            status, findings = promtool_findings(text, self.files.path)
            self.assertIn(status, (0, 3), f"{tree}: promtool could not parse the exposition: {findings[:5]}")
            _, reference_findings = promtool_findings(ref_text, self.files.path)
            self.assertEqual(sorted(set(findings) - set(reference_findings)), [],
                             f"{tree}: promtool findings rankstatd adds to SGLang's own")
        same, problems = compare(ref, mine)
        print(f"\n{tree}: {same} of {len(ref)} families identical ({sum(len(f['samples']) for f in ref.values())} "
              f"reference samples)", file=sys.stderr)
        if problems:
            self.fail(f"{tree}: {same} of {len(ref)} families identical; differences "
                      f"(- prometheus_client only, + rankstatd only):\n" + "\n".join(problems))


def _add_tree_tests():
    for tree in trees():
        def test(self, tree=tree):
            self.check_tree(tree)
        test.__name__ = f"test_tree_{tree}_gives_prometheus_clients_exposition"
        setattr(SGLangCollectorsThroughRankstat, test.__name__, test)


_add_tree_tests()

if __name__ == "__main__":
    unittest.main()
