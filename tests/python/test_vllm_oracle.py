"""vLLM's own stat logger through rankstat: the same exposition as prometheus_client, in every scenario the
engine oracle has a trace of.

Each trace (../shared/reference/engine-oracle/vllm/<commit>-<scenario>.trace.json) is what vLLM's
PrometheusStatLogger did as AsyncLLM drives it: a throw-away first logger, a StatLoggerManager with two
engines, log_engine_initialized(), then per engine a prefill, a decode with a preemption, a decode that
finishes requests and an idle record (`full` adds speculative decoding, LoRA, a KV consumer and more).
replay.py performs it again with `rankstat.vllm.stat_logger()` as the custom logger while a rankstatd from
this build serves the process's segment: every family identical to `.expected.prom`, no step failed,
nothing left in prometheus_client. The plugin entry point and RANKSTAT_VLLM=1: test_engine_autoload."""

import os
import subprocess
import unittest

from oracle_compare import (ABSENT, EMUL, PACKAGE, PYTHON, EngineOracleCase, add_version_tests, available,
                            expected_exposition, trace_names, trace_path)


@unittest.skipUnless(available(), ABSENT)
class VllmStatLoggerThroughRankstat(EngineOracleCase):
    def check_scenario(self, name: str):
        text, summary = self.replay_through_rankstat(
            trace_path("vllm", name), ["--backend", "plugin:rankstat.vllm:stat_logger"], name)
        self.check_replay_ran(name, summary)
        self.check_same_exposition(name, expected_exposition("vllm", name), text)

    def test_the_plugin_entry_point_is_rankstats_logger_only_when_asked_for(self):
        # vllm serve loads every `vllm.stat_logger_plugins` entry point; installing rankstat alone must not
        # take vLLM's own Prometheus logger away.
        probe = ("import rankstat.vllm as v; from vllm.v1.metrics.loggers import PrometheusStatLogger as P, "
                 "StatLoggerBase as B; print(issubclass(v.VllmStatLoggerPlugin, P), "
                 "issubclass(v.VllmStatLoggerPlugin, B))")
        for flag, expected in (("", "False True"), ("0", "False True"), ("1", "True True")):
            env = dict(os.environ, RANKSTAT_VLLM=flag, PYTHONPATH=os.pathsep.join([PACKAGE, EMUL]),
                       ENGINE_ORACLE_TRACE=trace_path("vllm", trace_names("vllm")[0]))
            out = subprocess.run([PYTHON, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(out.stdout.strip(), expected, f"RANKSTAT_VLLM={flag!r}: {out.stderr[-2000:]}")


add_version_tests(VllmStatLoggerThroughRankstat, "vllm", "check_scenario", "vllm_{version}_gives_prometheus_clients_exposition")

if __name__ == "__main__":
    unittest.main()
