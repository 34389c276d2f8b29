"""The Python package's copy of the C ABI's constants (rankstat/_native.py) against rankstat.h, the header
it binds to: every RANKSTAT_* value the header defines has a Python twin of the same value, and every
other module takes them from rankstat._native (C header -> _native -> everyone else), the extension from
rankstat.h itself. The ctypes structures are checked against the header's structs field by field. (rankstat.h
is checked against the shared-memory contract's enums by static_asserts in client/src/c_api_contract.cpp and c_api_errors.cpp, and the
layout hash covers those enums' values, so a renumbering anywhere fails a build, this test or a load.)"""
import ctypes
import glob
import os
import re
import subprocess
import unittest

import rankstat
from rankstat import _accel, _native, _slowpath, metrics, reporter

SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
HEADER = os.path.join(SOURCE, "client", "include", "rankstat", "rankstat.h")


PACKAGE = os.path.dirname(os.path.abspath(rankstat.__file__))
# The extension's sources: one file per job (fastpath_value.c, ...), sharing fastpath_internal.h.
EXTENSION = os.path.join(SOURCE, "client", "pyext")
EXTENSION_HEADER = os.path.join(EXTENSION, "fastpath_internal.h")


def header_text():
    with open(HEADER, encoding="utf-8") as f:
        return f.read()


def header_struct(name):
    """The field names of `typedef struct <name> {...}` in rankstat.h, in order."""
    body = re.search(r"typedef struct " + name + r" \{(.*?)\} " + name + ";", header_text(), re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for declaration in body.split(";"):
        parts = [part.strip() for part in declaration.split(",")]
        if parts[0]:  # `int32_t tp_rank, pp_rank` declares two: the type goes with the first name only
            fields.extend(name.split()[-1].lstrip("*") for name in parts)
    return fields


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

    def test_the_other_modules_take_the_kinds_and_modes_from_native(self):
        for module in (_accel, _slowpath, metrics):
            for name in ("KIND_COUNTER", "KIND_GAUGE", "KIND_HISTOGRAM", "KIND_SUMMARY"):
                with self.subTest(module=module.__name__, name=name):
                    self.assertIs(getattr(module, name), getattr(_native, name))
        self.assertIs(metrics.MODES, _native.GAUGE_MODES)
        self.assertIs(rankstat.ReportKind, _native.ReportKind)
        self.assertIs(reporter.ReportKind, _native.ReportKind)
        fast = _accel.fastpath_module()
        if fast is not None:
            for name in ("KIND_COUNTER", "KIND_GAUGE", "KIND_HISTOGRAM", "KIND_SUMMARY"):
                self.assertEqual(getattr(fast, name), getattr(_native, name))

    def test_report_kind_is_an_int_enum_of_the_headers_report_values(self):
        constants = header_constants()
        self.assertEqual({k.name: k.value for k in _native.ReportKind},
                         {n[len("REPORT_"):]: v for n, v in constants.items() if n.startswith("REPORT_")})
        self.assertEqual(_native.ReportKind.DECODE, 2)

    def test_no_module_but_native_restates_a_header_value(self):
        # A second definition is how they drift: KIND_X = 1, a mode table, an enum of kinds in the extension.
        restated = re.compile(r"^(KIND_[A-Z]+|MODES|GAUGE_MODES|ERR_[A-Z_]+|REPORT_[A-Z]+|OP_[A-Z_]+)\s*=\s*"
                              r"(\d|\{)|^KIND_[A-Z]+\s*,.*=\s*\d", re.M)
        for path in glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True):
            if os.path.basename(path) == "_native.py":
                continue
            with open(path, encoding="utf-8") as f:
                found = restated.findall(f.read())
            self.assertEqual(found, [], f"{path} restates a constant of rankstat.h: import it from rankstat._native")
        # The extension takes the kinds from rankstat.h, through its private header, in every file.
        sources = sorted(glob.glob(os.path.join(EXTENSION, "fastpath*.[ch]")))
        self.assertIn(EXTENSION_HEADER, sources)
        self.assertGreater(len(sources), 1, "the extension's .c files were not found")
        with open(EXTENSION_HEADER, encoding="utf-8") as f:
            self.assertIn('#include "rankstat/rankstat.h"', f.read())
        for path in sources:
            with self.subTest(source=os.path.basename(path)):
                with open(path, encoding="utf-8") as f:
                    extension = f.read()
                if path != EXTENSION_HEADER:
                    self.assertIn('#include "fastpath_internal.h"', extension)
                self.assertEqual(re.findall(r"KIND_[A-Z]+\s*=\s*\d", extension), [],
                                 f"{os.path.basename(path)} restates a kind: use RANKSTAT_KIND_*")

    def test_the_ctypes_structures_have_the_headers_fields_in_order(self):
        for struct, name in ((_native.Identity, "rankstat_identity"), (_native.Geometry, "rankstat_geometry"),
                             (_native.Permissions, "rankstat_permissions"), (_native.SeriesSpec, "rankstat_series_spec")):
            with self.subTest(struct=name):
                self.assertEqual([f[0] for f in struct._fields_], header_struct(name))
        # layout 3.0's text area: the last field of the geometry, after values_capacity.
        self.assertEqual(_native.Geometry._fields_[-1], ("text_capacity", ctypes.c_uint32))
        self.assertEqual(ctypes.sizeof(_native.Geometry), 32)

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
