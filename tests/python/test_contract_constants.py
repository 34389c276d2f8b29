"""The Python package's copy of the C ABI's constants (rankstat/_native.py) against rankstat.h, the header
it binds to: every RANKSTAT_* value the header defines has a Python twin of the same value. (rankstat.h
is checked against the shared-memory contract's enums by static_asserts in client/src/c_api.cpp, and the
layout hash covers those enums' values, so a renumbering anywhere fails a build, this test or a load.)"""
import os
import re
import subprocess
import unittest

import rankstat
from rankstat import _native

SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
HEADER = os.path.join(SOURCE, "client", "include", "rankstat", "rankstat.h")


def header_constants():
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    out = {}
    for name, value in re.findall(r"^#define RANKSTAT_([A-Z0-9_]+)[ \t]+\(?(-?(?:0x[0-9a-fA-F]+|[0-9]+))[uUlL]*\)?",
                                  text, re.M):
        out[name] = int(value, 0)
    return out


class ContractConstants(unittest.TestCase):
    def test_every_header_constant_has_a_python_twin_of_the_same_value(self):
        constants = header_constants()
        self.assertGreater(len(constants), 40, "the header's constants were not found")
        for name, value in constants.items():
            with self.subTest(name=name):
                if name.startswith("MODE_"):
                    mode = name[len("MODE_"):].lower()
                    self.assertEqual(_native.GAUGE_MODES.get(mode), value)
                else:
                    self.assertTrue(hasattr(_native, name), f"rankstat._native lacks {name} = {value}")
                    self.assertEqual(getattr(_native, name), value)

    def test_the_gauge_modes_are_exactly_the_headers(self):
        modes = {n[len("MODE_"):].lower(): v for n, v in header_constants().items() if n.startswith("MODE_")}
        self.assertEqual(_native.GAUGE_MODES, modes)

    def test_the_library_built_here_has_a_layout_hash_the_package_knows(self):
        _, layout = _native.load_library()
        self.assertIn(layout.hash, _native.KNOWN_LAYOUT_HASHES,
                      f"update KNOWN_LAYOUT_HASHES to {layout.hash:#018x} after checking the constants")

    def test_the_package_the_daemon_and_the_cli_carry_the_one_version_in_VERSION(self):
        with open(os.path.join(SOURCE, "VERSION")) as f:
            version = f.readline().strip()
        self.assertRegex(version, r"^[0-9]+\.[0-9]+\.[0-9]+$")
        self.assertEqual(rankstat.__version__, version)
        for variable, program in (("RANKSTAT_DAEMON", "rankstatd"), ("RANKSTAT_CLI", "rankstat")):
            binary = os.environ.get(variable)
            if binary:
                with self.subTest(program=program):
                    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
                    self.assertEqual(out.strip(), f"{program} {version}")

if __name__ == "__main__":
    unittest.main()
