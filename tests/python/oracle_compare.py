"""Comparing two text expositions family by family, as the engine oracles' tests do: the reference that
prometheus_client serves for an engine's own metric code, and what rankstatd serves for the same calls."""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest
from typing import Dict, List, Tuple

from daemon_harness import Child, Daemon, TempDir, promtool_findings, wait_until

# rankstatd's own metrics (rankstat_*, and process_* as every exporter serves them) are not the engine's.
DAEMON_OWN_PREFIXES = ("rankstat_", "process_")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HOLD_SECONDS = 20

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
    return {name: f for name, f in out.items() if not name.startswith(DAEMON_OWN_PREFIXES)}


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




class EngineOracleCase(unittest.TestCase):
    """An engine's real metric code driven twice by its oracle's drive.py: on prometheus_client (the
    reference) and on rankstat while a rankstatd from this build serves the live segments."""

    maxDiff = None

    def setUp(self):
        self.files = TempDir("rankstat-oracle-files")
        self.addCleanup(self.files.cleanup)

    def reference(self, oracle: str, args: List[str], label: str) -> str:
        out = os.path.join(self.files.path, f"ref-{label}.txt")
        proc = subprocess.run([PYTHON, "drive.py", *args, "--backend", "prom", "--out", out, "--quiet"], cwd=oracle,
                              capture_output=True, text=True, timeout=180)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out) as f:
            return f.read()

    def through_rankstat(self, oracle: str, args: List[str], label: str) -> Tuple[str, dict]:
        """(rankstatd's exposition once it has settled, drive.py's JSON summary)."""
        source = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
        shm = TempDir("rankstat-oracle-shm")
        self.addCleanup(shm.cleanup)
        # Parity with prometheus_client, which has no time integrals of gauges: without them the exposition
        # also settles (an integral grows on every scrape). SGLang's collectors with them on: the
        # dashboard parity test.
        daemon = Daemon(shm.path, self.files.path, ["--aggregate.integrate=none"])
        self.addCleanup(daemon.stop)
        mine_json = os.path.join(self.files.path, f"mine-{label}.json")
        env = dict(os.environ, RANKSTAT_SHM_DIR=shm.path, PYTHONPATH=os.path.join(source, "client", "python"))
        driver = Child([PYTHON, os.path.join(oracle, "drive.py"), *args, "--hold", str(HOLD_SECONDS), "--json",
                        mine_json, "--quiet"], env=env, log_path=os.path.join(self.files.path, f"drive-{label}.log"))
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
                not line.startswith(("#",) + DAEMON_OWN_PREFIXES) for line in text.splitlines() if line)
            box["last"] = text
            return stable
        wait_until(settled, 15, interval=0.5)
        self.assertIsNotNone(box["last"], "no scrape")
        # One segment per process, however many collectors or loggers it built (no two of them open or
        # rename over each other's segment).
        segments = sorted(n for n in os.listdir(shm.path) if n.startswith("rankstat."))
        self.assertEqual(len(segments), 1, f"{label}: one process should write one segment, found {segments}")
        with open(mine_json) as f:
            return box["last"], json.load(f)

    def check_same_exposition(self, label: str, ref_text: str, text: str, normalise=lambda t: t,
                              ref_for_promtool=None):
        """Every family identical (HELP, TYPE, sorted samples), and promtool finds nothing in rankstatd's
        exposition that it does not also find in prometheus_client's (the engine's naming is its own)."""
        if shutil.which("promtool"):
            status, findings = promtool_findings(text, self.files.path)
            self.assertIn(status, (0, 3), f"{label}: promtool could not parse the exposition: {findings[:5]}")
            _, reference_findings = promtool_findings(ref_for_promtool or ref_text, self.files.path)
            self.assertEqual(sorted(set(findings) - set(reference_findings)), [],
                             f"{label}: promtool findings rankstatd adds to the engine's own")
        ref = parse_families(ref_text)
        same, problems = compare(ref, parse_families(normalise(text)))
        print(f"\n{label}: {same} of {len(ref)} families identical ({sum(len(f['samples']) for f in ref.values())} "
              f"reference samples)", file=sys.stderr)
        if problems:
            self.fail(f"{label}: {same} of {len(ref)} families identical; differences "
                      f"(- prometheus_client only, + rankstatd only):\n" + "\n".join(problems))
