"""vLLM's own stat logger, unchanged, through rankstat: the same exposition as prometheus_client.

The vLLM metrics oracle (../shared/reference/vllm-oracle: vLLM's real vllm/v1/metrics/loggers.py and
stats.py, runnable without vLLM) drives `AsyncLLM`'s StatLoggerManager with two engines through a prefill,
a decode with a preemption, a decode that finishes requests and an idle record, twice: on
prometheus_client in multiprocess mode (the reference) and with `rankstat.vllm.stat_logger()` as the
custom stat logger while a rankstatd from this build serves the live segment. Both scenarios (`base`;
`full` with speculative decoding, LoRA and a KV consumer): every family identical, no step failed,
nothing left in prometheus_client. Skipped, with a message, where ../shared is absent."""

import os
import re
import subprocess
import sys
import unittest

from oracle_compare import EngineOracleCase

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
ORACLE = os.path.join(os.path.dirname(os.path.abspath(SOURCE)), "shared", "reference", "vllm-oracle")


def with_time_normalised(text: str) -> str:
    # drive.py writes vllm:lora_requests_info's set_to_current_time value as TIME in the reference.
    return re.sub(r"^(vllm:lora_requests_info\{.*\}) \S+$", r"\1 TIME", text, flags=re.M)


@unittest.skipUnless(os.path.isfile(os.path.join(ORACLE, "drive.py")),
                     f"the vLLM oracle is absent ({ORACLE}); this test needs ../shared beside the repository")
class VllmStatLoggerThroughRankstat(EngineOracleCase):
    def check_scenario(self, scenario: str):
        ref_text = self.reference(ORACLE, ["--scenario", scenario], scenario)
        text, summary = self.through_rankstat(
            ORACLE, ["--scenario", scenario, "--backend", "plugin:rankstat.vllm:stat_logger"], scenario)
        self.assertEqual(summary.get("errors"), [], f"{scenario}: vLLM's logger failed on rankstat")
        self.assertEqual([s for s in summary.get("steps", []) if not s.endswith(": ok")], [],
                         f"{scenario}: steps that did not run")
        self.assertEqual(summary.get("family_list"), [], f"{scenario}: families leaked into prometheus_client")
        # The reference's TIME placeholder is not a number promtool can parse: give it one for the lint.
        self.check_same_exposition(scenario, ref_text, text, with_time_normalised,
                                   ref_for_promtool=ref_text.replace(" TIME\n", " 0.0\n"))

    def test_the_vllm_serve_plugin_is_rankstats_logger_only_when_asked_for(self):
        # vllm serve loads every `vllm.stat_logger_plugins` entry point; installing rankstat alone must not
        # take vLLM's own Prometheus logger away.
        probe = ("import sys, os; sys.path[:0] = [os.path.join(sys.argv[1], 'vendor', 'prometheus_client-0.25.0'), "
                 "os.path.join(sys.argv[1], 'tree')]; import rankstat.vllm as v; "
                 "from vllm.v1.metrics.loggers import PrometheusStatLogger as P; "
                 "print(issubclass(v.VllmStatLoggerPlugin, P))")
        for flag, expected in (("", "False"), ("1", "True")):
            env = dict(os.environ, RANKSTAT_VLLM=flag, PYTHONPATH=os.path.join(SOURCE, "client", "python"))
            out = subprocess.run([sys.executable, "-c", probe, ORACLE], env=env, capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(out.stdout.strip(), expected, f"RANKSTAT_VLLM={flag!r}: {out.stderr[-2000:]}")

    def test_the_base_scenario_gives_prometheus_clients_exposition(self):
        self.check_scenario("base")

    def test_the_full_scenario_with_spec_decoding_lora_and_a_kv_consumer_gives_prometheus_clients_exposition(self):
        self.check_scenario("full")


if __name__ == "__main__":
    unittest.main()
