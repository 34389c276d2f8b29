"""The engine oracle as the tests use it: where it is, its traces, and one comparison.

The oracle (../shared/reference/engine-oracle, or $RANKSTAT_ENGINE_ORACLE) holds, per SGLang and vLLM version,
the trace of every operation the engine's own metric code performed on prometheus_client objects, the
exposition prometheus_client 0.25.0 served for it (`.expected.prom`, the reference), and `replay.py`, which
performs a trace again through stand-ins of the engine's classes with whatever backend is plugged into them
the way the engine allows. A test here replays a trace with rankstat plugged in while a rankstatd from this
build serves the process's segment, and compares rankstatd's exposition with the reference family by family
(HELP, TYPE, sorted sample lines, after the oracle's own normalisation: pid and set_to_current_time values).

Where the oracle is absent every such test skips with a message saying where it looked."""

import copy
import importlib.util
import json
import os
import shutil
import sys
import unittest
from typing import Dict, List, Optional, Sequence, Tuple

from daemon_harness import Child, Daemon, TempDir, promtool_findings, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
ORACLE = os.environ.get("RANKSTAT_ENGINE_ORACLE") or os.path.join(
    os.path.dirname(os.path.abspath(SOURCE)), "shared", "reference", "engine-oracle")
REPLAY = os.path.join(ORACLE, "replay.py")
EMUL = os.path.join(ORACLE, "emul")
PACKAGE = os.path.join(SOURCE, "client", "python")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HOLD_SECONDS = 30
ABSENT = f"the engine oracle is absent ({ORACLE}); these tests need ../shared beside the repository"


def available() -> bool:
    return os.path.isfile(REPLAY)


def trace_names(engine: str) -> List[str]:
    """The traces of one engine ("sglang", "vllm"), by name (`6a7c8a1d`, `13cbd441-full`)."""
    folder = os.path.join(ORACLE, engine)
    if not os.path.isdir(folder):
        return []
    return sorted(f[:-len(".trace.json")] for f in os.listdir(folder) if f.endswith(".trace.json"))


def trace_path(engine: str, name: str) -> str:
    return os.path.join(ORACLE, engine, name + ".trace.json")


def load_trace(engine: str, name: str) -> dict:
    with open(trace_path(engine, name)) as f:
        return json.load(f)


def expected_exposition(engine: str, name: str) -> str:
    with open(os.path.join(ORACLE, engine, name + ".expected.prom")) as f:
        return f.read()


def has_hooks(trace: dict) -> bool:
    """Whether an SGLang version routes collectors through stat_loggers (else: the install adapter)."""
    return trace["facts"].get("resolve_collector_class") is not None


def identifier(name: str) -> str:
    return name.replace("-", "_")


def add_version_tests(case: type, engine: str, check: str, sentence: str) -> None:
    """One test per trace of `engine` on `case`, calling `case.<check>(name)`; `sentence` names it, with
    {version} for the trace's name."""
    for name in trace_names(engine):
        def test(self, name=name):
            getattr(self, check)(name)
        test.__name__ = "test_" + sentence.format(version=identifier(name))
        setattr(case, test.__name__, test)


_replay_module = None


def replay_module():
    """The oracle's replay.py as a module, for its normalise() and families() (read, not copied)."""
    global _replay_module
    if _replay_module is None:
        spec = importlib.util.spec_from_file_location("engine_oracle_replay", REPLAY)
        _replay_module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_replay_module)
    return _replay_module


def derived_trace(trace: dict, files_dir: str, label: str, change) -> str:
    """A copy of `trace` changed by `change(copy)` (an engine version the oracle has no trace of, described by
    its facts), written to files_dir; returns the path."""
    out = copy.deepcopy(trace)
    change(out)
    path = os.path.join(files_dir, f"{label}.trace.json")
    with open(path, "w") as f:
        json.dump(out, f)
    return path


def installed_site(root: str) -> Dict[str, str]:
    """A user site directory under `root` holding the package as `pip install` leaves it: the package, its
    start-up file rankstat-autoload.pth and its distribution metadata with the vLLM entry point. Returns the
    environment that makes Python use it (PYTHONUSERBASE) without the source tree on PYTHONPATH."""
    import site
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONUSERBASE=root)
    env.pop("PYTHONNOUSERSITE", None)
    user_site = subprocess.run([PYTHON, "-c", "import site; print(site.getusersitepackages())"], env=env,
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    del site
    os.makedirs(user_site, exist_ok=True)
    os.symlink(os.path.join(PACKAGE, "rankstat"), os.path.join(user_site, "rankstat"))
    shutil.copy(os.path.join(PACKAGE, "rankstat-autoload.pth"), user_site)
    dist = os.path.join(user_site, "rankstat-0.dist-info")
    os.makedirs(dist)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: rankstat\nVersion: 0\n")
    with open(os.path.join(dist, "entry_points.txt"), "w") as f:
        f.write("[vllm.stat_logger_plugins]\nrankstat = rankstat.vllm:VllmStatLoggerPlugin\n")
    return env


class EngineOracleCase(unittest.TestCase):
    """Replays of the oracle's traces with rankstat under the engine, compared with the reference."""

    maxDiff = None

    def setUp(self):
        if not available():
            self.skipTest(ABSENT)
        self.files = TempDir("rankstat-oracle-files")
        self.addCleanup(self.files.cleanup)

    def start_daemon(self) -> Tuple[Daemon, str]:
        shm = TempDir("rankstat-oracle-shm")
        self.addCleanup(shm.cleanup)
        files = TempDir("rankstat-oracle-daemon")  # its own address file: a test may start several
        self.addCleanup(files.cleanup)
        # Parity with prometheus_client, which has no time integrals of gauges: without them the exposition
        # also settles (an integral grows on every scrape). SGLang's collectors with them on: the
        # dashboard parity test.
        daemon = Daemon(shm.path, files.path, ["--aggregate.integrate=none"])
        self.addCleanup(daemon.stop)
        return daemon, shm.path

    def settled_scrape(self, daemon: Daemon) -> str:
        """rankstatd's exposition once two scrapes half a second apart agree and it serves engine samples."""
        box = {"last": None}

        def settled():
            text = daemon.scrape()
            stable = text == box["last"] and any(
                line and not line.startswith(("#", "rankstat_", "process_")) for line in text.splitlines())
            box["last"] = text
            return stable
        wait_until(settled, 20, interval=0.5)
        self.assertIsNotNone(box["last"], "no scrape")
        return box["last"]

    def replay_through_rankstat(self, trace_file: str, args: Sequence[str], label: str,
                                env: Optional[Dict[str, str]] = None, segments: int = 1,
                                spawned: bool = False) -> Tuple[str, dict]:
        """(rankstatd's exposition, normalised as the oracle normalises the reference; replay.py's summary)
        for one replay of `trace_file` with `args` (the backend: `--backend X [--setup M:F]`) in a process of
        its own, or with `spawned` in a child that process starts with multiprocessing's spawn method
        (spawned_replay.py; `--backend X` only)."""
        daemon, shm = self.start_daemon()
        summary_path = os.path.join(self.files.path, f"summary-{label}.json")
        base_env = dict(os.environ, PYTHONPATH=PACKAGE) if env is None else dict(env)
        # replay.py's prometheus_client directory goes under the test's files: a killed replay leaves nothing.
        base_env.update(RANKSTAT_SHM_DIR=shm, TMPDIR=self.files.path)
        if spawned:
            self.assertEqual(len(args), 2, "a spawned replay takes --backend X alone")
            argv = [PYTHON, os.path.join(HERE, "spawned_replay.py"), ORACLE, trace_file, args[1], summary_path,
                    str(HOLD_SECONDS)]
        else:
            argv = [PYTHON, REPLAY, "--trace", trace_file, *args, "--hold", str(HOLD_SECONDS), "--json",
                    summary_path, "--quiet"]
        replay = Child(argv, env=base_env, log_path=os.path.join(self.files.path, f"replay-{label}.log"))
        self.addCleanup(replay.kill)

        def ready():
            if not replay.running() and "ORACLE-READY" not in replay.log():
                raise AssertionError(f"{label}: replay.py exited before ORACLE-READY:\n" + replay.log())
            return "ORACLE-READY" in replay.log()
        self.assertTrue(wait_until(ready, 120, interval=0.1), f"{label}: no ORACLE-READY:\n" + replay.log())
        text = self.settled_scrape(daemon)
        # One segment per process, however many collectors or loggers it built.
        found = sorted(n for n in os.listdir(shm) if n.startswith("rankstat."))
        self.assertEqual(len(found), segments, f"{label}: expected {segments} segment(s), found {found}")
        with open(summary_path) as f:
            summary = json.load(f)
        with open(trace_file) as f:
            time_valued = json.load(f)["facts"].get("time_valued", [])
        return replay_module().normalise(text, time_valued), summary

    def check_replay_ran(self, label: str, summary: dict) -> None:
        """Every block of the trace ran as in the engine, and nothing was left in prometheus_client."""
        self.assertEqual(summary.get("errors"), [], f"{label}: blocks that failed through rankstat")
        self.assertEqual(summary.get("live_errors") or {}, {}, f"{label}: operations that failed")
        self.assertEqual(summary.get("family_list"), [], f"{label}: families left in prometheus_client")

    def check_same_exposition(self, label: str, ref_text: str, text: str) -> None:
        """Every family identical (HELP, TYPE, sorted samples), and promtool finds nothing in rankstatd's
        exposition that it does not also find in prometheus_client's (the engine's naming is its own)."""
        replay = replay_module()
        if shutil.which("promtool"):
            numeric = lambda t: t.replace(" TIME\n", " 0\n")  # noqa: E731 - the reference's placeholder
            status, findings = promtool_findings(numeric(text), self.files.path)
            self.assertIn(status, (0, 3), f"{label}: promtool could not parse the exposition: {findings[:5]}")
            _, reference_findings = promtool_findings(numeric(ref_text), self.files.path)
            self.assertEqual(sorted(set(findings) - set(reference_findings)), [],
                             f"{label}: promtool findings rankstatd adds to the engine's own")
        ref, mine = replay.families(ref_text), replay.families(text)
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
        print(f"\n{label}: {same} of {len(ref)} families identical "
              f"({sum(len(f['samples']) for f in ref.values())} reference samples)", file=sys.stderr)
        if problems:
            self.fail(f"{label}: {same} of {len(ref)} families identical; differences "
                      f"(- prometheus_client only, + rankstatd only):\n" + "\n".join(problems))


def family_diff(name: str, ref: dict, mine: dict) -> str:
    lines = [f"--- {name}"]
    for key in ("help", "type"):
        if ref[key] != mine[key]:
            lines.append(f"  {key}: prometheus_client: {ref[key]}")
            lines.append(f"  {key}: rankstat:          {mine[key]}")
    ref_s, mine_s = set(ref["samples"]), set(mine["samples"])
    lines += [f"  - {s}" for s in sorted(ref_s - mine_s)]
    lines += [f"  + {s}" for s in sorted(mine_s - ref_s)]
    return "\n".join(lines)
