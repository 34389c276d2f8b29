"""The identity labels a Reporter leaves to the daemon are the ones the library says its segment carries
(rankstat_identity_label, from shmproto's identity_labels.hpp, the rule the daemon applies): the same
names, values and order for every role and flag, so a series label equal to one of them is never dropped
on the Python side while the daemon would not add it back."""

import ctypes
import os
import shutil
import tempfile
import unittest

import rankstat
from rankstat import _native


def shm_tempdir():
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="rankstat-identity-", dir=base)


def library_identity_labels(lib, address):
    """rankstat_identity_label's list for the reporter at `address`, in order."""
    function = lib.rankstat_identity_label
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p),
                         ctypes.POINTER(ctypes.c_char_p)]
    labels = []
    name, value = ctypes.c_char_p(), ctypes.c_char_p()
    while function(address, len(labels), ctypes.byref(name), ctypes.byref(value)) == _native.OK:
        labels.append((name.value.decode(), value.value.decode()))
    return labels


class IdentityLabels(unittest.TestCase):
    CASES = {
        "a scheduler with every rank, priority scheduling and extra labels":
            dict(role="scheduler", model_name="qwen", tp_rank=1, pp_rank=2, moe_ep_rank=3, dp_rank=4,
                 priority_scheduling=True, extra_labels={"region": "eu", "pool": "a"}),
        "a scheduler without a dp rank": dict(role="scheduler", model_name="qwen", engine_type="prefill"),
        "a tokenizer, whose ranks are not labels": dict(role="tokenizer", model_name="m", dp_rank=5),
        "a detokenizer with priority scheduling": dict(role="detokenizer", priority_scheduling=True),
    }

    def setUp(self):
        self.dir = shm_tempdir()
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.lib, _ = _native.load_library()

    def test_the_reporter_leaves_to_the_daemon_exactly_the_labels_the_library_says_the_segment_carries(self):
        for number, (case, identity) in enumerate(self.CASES.items()):
            with self.subTest(case):
                reporter = rankstat.Reporter(instance=f"labels{number}", shm_dir=self.dir, series_capacity=8,
                                             bounds_capacity=64, values_capacity=256, **identity)
                self.addCleanup(reporter.close)
                self.assertTrue(reporter.is_open, reporter.error)
                expected = library_identity_labels(self.lib, reporter.address)
                self.assertIn(("model_name", identity.get("model_name", "")), expected)
                self.assertEqual(list(reporter.identity_labels.items()), expected)


if __name__ == "__main__":
    unittest.main()
