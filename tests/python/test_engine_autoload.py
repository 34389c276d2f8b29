"""One environment variable switches rankstat on under each engine, for every version, in every process.

`RANKSTAT_SGLANG=1 python -m sglang.launch_server ...` and `RANKSTAT_VLLM=1 vllm serve ...`: the package's
start-up file (rankstat-autoload.pth, run by Python at start from the site directory pip installed it into;
sitecustomize.py of the source tree for PYTHONPATH use) installs an import hook that patches the engine's
metric module when the engine imports it. Checked here against the engine oracle's traces, replayed with the
engine's *defaults* (no stat_loggers, no custom logger: what a command line gives), with rankstatd serving:

* SGLang, every version (with and without the hooks), installed as pip leaves it, and through the source
  tree's sitecustomize; and in a child started with multiprocessing's spawn method, as SGLang starts its
  schedulers;
* vLLM, every scenario through the plugin entry point as `vllm serve` loads it; a version from before the
  plugin group (hooks only) and one from before the hooks (vllm:cache_config_info is built after the
  constructor, in log_engine_initialized), both described by the recorded version's facts with that one
  difference; and in a spawned child;
* without the variables nothing is imported at start, and vLLM keeps its own metrics.
"""

import os
import subprocess
import unittest

from oracle_compare import (ABSENT, EMUL, PACKAGE, PYTHON, EngineOracleCase, TempDir, available,
                            derived_trace, expected_exposition, has_hooks, installed_site, load_trace,
                            trace_names, trace_path)

VLLM_PLUGIN = "entrypoint:rankstat.vllm:VllmStatLoggerPlugin"


def without_plugin_group(trace: dict) -> None:
    """vLLM from May to mid-October 2025: the metric-class hooks, no stat-logger plugin group."""
    trace["facts"]["plugin_loader"] = False
    trace["facts"].pop("plugin_group", None)


def without_hooks(trace: dict) -> None:
    """vLLM V1 before the metric-class hooks: PrometheusStatLogger builds its metrics through
    prometheus_client's module attributes at call time (and loads no plugins)."""
    without_plugin_group(trace)
    logger = trace["facts"]["logger"]
    name, hooks = logger["name"], set(logger["hooks"])
    logger["hooks"] = {}

    def strip(items):
        for it in items:
            if it.get("t") == "frame":
                strip(it["ops"])
                strip(it.get("ops_hooked", []))
            elif it.get("k") == "new" and isinstance(it.get("via"), dict) and it["via"].get("owner") == name \
                    and it["via"].get("hook") in hooks:
                it["via"] = "call"
    for block in trace["blocks"]:
        strip(block["items"])


@unittest.skipUnless(available(), ABSENT)
class EnvironmentVariableWayIn(EngineOracleCase):
    def setUp(self):
        super().setUp()
        self.site = TempDir("rankstat-site")
        self.addCleanup(self.site.cleanup)
        self.installed = installed_site(self.site.path)

    def installed_env(self, **variables) -> dict:
        return dict(self.installed, **variables)

    def source_tree_env(self, **variables) -> dict:
        return dict(os.environ, PYTHONPATH=PACKAGE, **variables)

    def check_matches_reference(self, engine: str, name: str, trace_file: str, args, label: str, env: dict,
                                spawned: bool = False) -> dict:
        text, summary = self.replay_through_rankstat(trace_file, args, label, env=env, spawned=spawned)
        self.check_replay_ran(label, summary)
        self.check_same_exposition(label, expected_exposition(engine, name), text)
        return summary

    # --- start-up cost ----------------------------------------------------------------------------

    def test_without_the_variables_the_start_up_file_imports_nothing(self):
        probe = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('rankstat', 'sglang', 'vllm')))"
        for env in (self.installed_env(), self.source_tree_env()):
            env = {k: v for k, v in env.items() if k not in ("RANKSTAT_SGLANG", "RANKSTAT_VLLM")}
            out = subprocess.run([PYTHON, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual((out.stdout.strip(), out.stderr), ("[]", ""))

    def test_with_a_variable_set_no_engine_module_is_imported_at_start(self):
        probe = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('sglang', 'vllm')), " \
                "'rankstat._autoload' in sys.modules)"
        for env in (self.installed_env(RANKSTAT_SGLANG="1", RANKSTAT_VLLM="1"),
                    self.source_tree_env(RANKSTAT_SGLANG="1", RANKSTAT_VLLM="1")):
            out = subprocess.run([PYTHON, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual((out.stdout.strip(), out.stderr), ("[] True", ""))

    def test_an_installation_problem_is_one_line_on_stderr_and_the_program_runs(self):
        env = self.installed_env(RANKSTAT_SGLANG="1", RANKSTAT_LIBRARY="/nonexistent/librankstat.so")
        out = subprocess.run([PYTHON, "-c", "print('engine ran')"], env=env, capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "engine ran")

    # --- SGLang -----------------------------------------------------------------------------------

    def test_sglang_from_the_command_line_with_the_package_installed_at_every_version(self):
        for name in trace_names("sglang"):
            with self.subTest(version=name, hooks=has_hooks(load_trace("sglang", name))):
                self.check_matches_reference("sglang", name, trace_path("sglang", name), ["--backend", "prom"],
                                             f"installed-{name}", self.installed_env(RANKSTAT_SGLANG="1"))

    def test_sglang_with_the_source_tree_on_pythonpath(self):
        name = trace_names("sglang")[-1]
        self.check_matches_reference("sglang", name, trace_path("sglang", name), ["--backend", "prom"],
                                     f"source-tree-{name}", self.source_tree_env(RANKSTAT_SGLANG="true"))

    def test_sglang_collectors_in_a_spawned_scheduler_process_report_through_rankstat(self):
        for name in trace_names("sglang"):
            if has_hooks(load_trace("sglang", name)):
                break
        summary = self.check_matches_reference("sglang", name, trace_path("sglang", name), ["--backend", "prom"],
                                               f"spawned-{name}", self.installed_env(RANKSTAT_SGLANG="1"),
                                               spawned=True)
        self.assertTrue(summary["rankstat_loaded"])

    # --- vLLM -------------------------------------------------------------------------------------

    def test_vllm_serve_loads_rankstats_logger_through_the_plugin_group(self):
        for name in trace_names("vllm"):
            with self.subTest(scenario=name):
                self.check_matches_reference("vllm", name, trace_path("vllm", name), ["--backend", VLLM_PLUGIN],
                                             f"plugin-{name}", self.installed_env(RANKSTAT_VLLM="1"))

    def test_vllm_without_the_plugin_group_is_patched_at_import(self):
        name = trace_names("vllm")[-1]
        older = derived_trace(load_trace("vllm", name), self.files.path, "no-plugin-group", without_plugin_group)
        self.check_matches_reference("vllm", name, older, ["--backend", VLLM_PLUGIN], f"no-plugins-{name}",
                                     self.installed_env(RANKSTAT_VLLM="1"))

    def test_vllm_without_the_hooks_builds_cache_config_info_after_the_constructor_in_rankstat(self):
        name = trace_names("vllm")[-1]
        older = derived_trace(load_trace("vllm", name), self.files.path, "no-hooks", without_hooks)
        text, summary = self.replay_through_rankstat(older, ["--backend", VLLM_PLUGIN], f"no-hooks-{name}",
                                                     env=self.source_tree_env(RANKSTAT_VLLM="1"))
        self.check_replay_ran(name, summary)
        self.assertIn("vllm:cache_config_info", text)
        self.check_same_exposition(f"no-hooks-{name}", expected_exposition("vllm", name), text)

    def test_vllm_in_a_spawned_process_reports_through_rankstat(self):
        name = trace_names("vllm")[0]
        self.check_matches_reference("vllm", name, trace_path("vllm", name), ["--backend", VLLM_PLUGIN],
                                     f"spawned-{name}", self.installed_env(RANKSTAT_VLLM="1"), spawned=True)

    def test_without_rankstat_vllm_the_installed_plugin_leaves_vllms_own_logger_alone(self):
        # Installing the package registers the plugin entry point; only the variable makes it rankstat's.
        probe = ("import prometheus_client; from vllm.v1.metrics import loggers as L; "
                 "fs = L.load_stat_logger_plugin_factories(); "
                 "print([issubclass(f, L.PrometheusStatLogger) for f in fs], "
                 "L.PrometheusStatLogger._gauge_cls is prometheus_client.Gauge)")
        trace = trace_path("vllm", trace_names("vllm")[0])
        for flag, expected in (("", "[False] True"), ("1", "[True] False")):
            env = self.installed_env(RANKSTAT_VLLM=flag, ENGINE_ORACLE_TRACE=trace, PYTHONPATH=EMUL)
            out = subprocess.run([PYTHON, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(out.stdout.strip(), expected, f"RANKSTAT_VLLM={flag!r}: {out.stderr[-2000:]}")


if __name__ == "__main__":
    unittest.main()
