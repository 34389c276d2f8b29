"""SGLang's own collectors through rankstat: the same exposition as prometheus_client, at every version the
engine oracle has a trace of.

Each trace (../shared/reference/engine-oracle/sglang/<commit>.trace.json) is what SGLang's collector code did
to its metric objects; replay.py performs it again through stand-ins of SGLang's collector classes, with
rankstat plugged in the way SGLang lets a backend in, while a rankstatd from this build serves the process's
segment. Every family must come out as prometheus_client served it (`.expected.prom`): HELP, TYPE and the
sorted sample lines. No block of the trace may fail and nothing may be left in prometheus_client.

On versions with the stat-logger hooks the backend is stat_loggers() alone (it also reaches the collectors
SGLang builds without a role, such as EncoderMetricsCollector); on versions without them, the documented
adapter rankstat.sglang.install (--setup). The environment-variable way in (RANKSTAT_SGLANG=1) is
test_engine_autoload's."""

import unittest

from oracle_compare import (ABSENT, EngineOracleCase, add_version_tests, available, expected_exposition,
                            has_hooks, load_trace, trace_names, trace_path)


def backend_args(trace: dict):
    args = ["--backend", "plugin:rankstat.sglang:stat_loggers"]
    if not has_hooks(trace):  # the documented one-call adapter for SGLang without the hooks
        args += ["--setup", "rankstat.sglang:install"]
    return args


@unittest.skipUnless(available(), ABSENT)
class SGLangCollectorsThroughRankstat(EngineOracleCase):
    def check_version(self, name: str):
        trace = load_trace("sglang", name)
        text, summary = self.replay_through_rankstat(trace_path("sglang", name), backend_args(trace), name)
        self.check_replay_ran(name, summary)
        self.check_same_exposition(name, expected_exposition("sglang", name), text)

    def test_the_oracle_has_sglang_versions_with_and_without_the_hooks(self):
        hooked = [has_hooks(load_trace("sglang", n)) for n in trace_names("sglang")]
        self.assertIn(True, hooked)
        self.assertIn(False, hooked)


add_version_tests(SGLangCollectorsThroughRankstat, "sglang", "check_version", "sglang_{version}_gives_prometheus_clients_exposition")

if __name__ == "__main__":
    unittest.main()
