"""rankstat._accel: the CPython extension rankstat._fastpath and its pure-Python twin rankstat._slowpath
pass the same checks: prometheus_client's labels() checks and messages, str() conversion, children on a
miss and a hit, counter rules, float conversion, no-op reporters, and real writes through librankstat.

Under CTest, RANKSTAT_FASTPATH names the extension of the build under test: there it must load."""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

import rankstat
from rankstat import _accel, _slowpath
from rankstat.reporter import Reporter

FASTPATH = _accel.fastpath_module()
COUNTER, GAUGE, HISTOGRAM, SUMMARY = 1, 2, 3, 4


def shm_tempdir():
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="rankstat-accel-", dir=base)


class NumberLike:
    """A numpy scalar stand-in: converts through __float__ only."""

    def __init__(self, value):
        self.value = value

    def __float__(self):
        return float(self.value)


class Recorder:
    """A fake librankstat: `bind` takes function addresses from it exactly as from a CDLL. Each function
    records (reporter, id, value) and returns 0."""

    PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_double)

    alive = []  # a bound module keeps raw addresses of these trampolines: never free them

    def __init__(self, with_gauge_add=True):
        Recorder.alive.append(self)
        self.calls = []
        names = ["rankstat_counter_add", "rankstat_gauge_set", "rankstat_histogram_observe"]
        if with_gauge_add:
            names.append("rankstat_gauge_add")
        for name in names:
            setattr(self, name, self.PROTO(self._recorder(name)))

    def _recorder(self, name):
        def record(reporter, series, value):
            self.calls.append((name, reporter, series, value))
            return 0
        return record


class Checks:
    """The checks every implementation passes; subclasses set `impl`."""

    impl = None

    def setUp(self):
        self.fake = Recorder()
        self.impl.bind(self.fake)
        impl = self.impl

        class Family(impl.Family):
            def __init__(self, name, labelnames, kind=COUNTER):
                self.name = name
                self._labelnames = labelnames
                self._children = {}
                self.kind = kind
                self.created = []

            def __str__(self):
                return f"family {self.name}"

            def _new_child(self, key):
                self.created.append(key)
                child = impl.Value(0x1000 + len(self.created), len(self.created), self.kind)
                self._children[key] = child
                return child

        self.Family = Family

    # --- labels(): prometheus_client's checks and messages --------------------------------------------

    def test_labels_without_label_names_names_the_family(self):
        f = self.Family("app:plain_total", ())
        with self.assertRaisesRegex(ValueError, "^No label names were set when constructing family app:plain_total$"):
            f.labels()
        with self.assertRaisesRegex(ValueError, "^No label names were set"):
            f.labels(a="1")

    def test_labels_refuses_args_and_kwargs_together(self):
        f = self.Family("x", ("a", "b"))
        with self.assertRaisesRegex(ValueError, r"^Can't pass both \*args and \*\*kwargs$"):
            f.labels("1", b="2")

    def test_labels_checks_names_and_count(self):
        f = self.Family("x", ["a", "b"])
        for kw in ({"a": 1}, {"a": 1, "c": 2}, {"a": 1, "b": 2, "c": 3}):
            with self.assertRaisesRegex(ValueError, "^Incorrect label names$"):
                f.labels(**kw)
        for args in ((), ("1",), ("1", "2", "3")):
            with self.assertRaisesRegex(ValueError, "^Incorrect label count$"):
                f.labels(*args)
        self.assertEqual(f.created, [])

    def test_labels_converts_values_with_str_and_maps_kwargs_in_label_name_order(self):
        f = self.Family("x", ("a", "b", "c"))
        child = f.labels(c=None, a=1, b=2.5)
        self.assertEqual(f.created, [("1", "2.5", "None")])
        self.assertIs(f._children[("1", "2.5", "None")], child)
        self.assertIs(f.labels(1, 2.5, None), child)
        self.assertIs(f.labels("1", "2.5", "None"), child)
        self.assertIs(f.labels(**{"a": "1", "b": "2.5", "c": "None"}), child)
        self.assertEqual(len(f.created), 1)
        for key in f._children:
            self.assertTrue(all(type(v) is str for v in key))

    def test_a_miss_calls_new_child_and_a_hit_returns_the_stored_child(self):
        f = self.Family("x", ("model_name", "engine_type", "is_streaming"), HISTOGRAM)
        labels = {"model_name": "m", "engine_type": "unified", "is_streaming": True}
        first = f.labels(**labels)
        self.assertEqual(f.created, [("m", "unified", "True")])
        for _ in range(3):
            self.assertIs(f.labels(**labels), first)
        other = f.labels(model_name="m", engine_type="unified", is_streaming=False)
        self.assertIsNot(other, first)
        self.assertEqual(len(f.created), 2)

    def test_a_child_stored_by_python_code_is_found_and_a_replaced_children_dict_is_used(self):
        f = self.Family("x", ("a",))
        sentinel = object()
        f._children[("1",)] = sentinel
        self.assertIs(f.labels(a=1), sentinel)
        f._children = {("2",): sentinel}
        self.assertIs(f.labels("2"), sentinel)
        self.assertEqual(f.created, [])

    def test_labelnames_and_labelvalues_become_tuples_and_only_the_names_must_be_str(self):
        f = self.Family("x", {"a": 1, "b": 2}.keys())
        self.assertEqual(f._labelnames, ("a", "b"))
        f._labelnames = ["c"]
        self.assertEqual(f._labelnames, ("c",))
        with self.assertRaises(TypeError):
            f._labelnames = ["a", 1]
        with self.assertRaises(TypeError):
            f._children = [("a",)]
        self.assertEqual(f._labelnames, ("c",))
        # Label values take any iterable too, stored as a tuple, and are not checked here (labels() makes
        # them str).
        f._labelvalues = iter(["1", 2])
        self.assertEqual(f._labelvalues, ("1", 2))

    def test_a_family_subclass_has_an_instance_dict_and_defaults_before_init(self):
        class Bare(self.impl.Family):
            def __init__(self):
                pass
        b = Bare()
        self.assertEqual(b._labelnames, ())
        self.assertEqual(b._children, {})
        b.anything = 1
        self.assertEqual(b.__dict__["anything"], 1)

    def test_new_child_errors_propagate(self):
        class Failing(self.impl.Family):
            def __init__(self):
                self._labelnames = ("a",)

            def _new_child(self, key):
                raise RuntimeError(f"no room for {key}")
        with self.assertRaisesRegex(RuntimeError, r"no room for \('1',\)"):
            Failing().labels("1")

        class Broken:
            def __str__(self):
                raise KeyError("str failed")
        with self.assertRaises(KeyError):
            self.Family("x", ("a",)).labels(Broken())

    # --- Value ---------------------------------------------------------------------------------------

    def test_counter_inc_adds_amounts_and_refuses_negative_ones(self):
        c = self.impl.Value(0x10, 7, COUNTER)
        c.inc()
        c.inc(2)
        c.inc(amount=0.5)
        c.inc(3, exemplar={"trace_id": "x"})
        with self.assertRaisesRegex(ValueError, r"^Counters can only be incremented by non-negative amounts\.$"):
            c.inc(-1)
        self.assertEqual(self.fake.calls, [("rankstat_counter_add", 0x10, 7, v) for v in (1.0, 2.0, 0.5, 3.0)])

    def test_gauge_inc_dec_set_and_histogram_summary_observe(self):
        g = self.impl.Value(0x20, 1, GAUGE)
        g.set(5)
        g.set(value="1.5")  # prometheus_client's Gauge.set is float(value)
        g.inc()
        g.inc(2)
        g.dec()
        g.dec(amount=4)
        h = self.impl.Value(0x30, 2, HISTOGRAM)
        h.observe(0.25)
        h.observe(amount=3)
        s = self.impl.Value(0x40, 3, SUMMARY)
        s.observe(9)
        self.assertEqual(self.fake.calls, [
            ("rankstat_gauge_set", 0x20, 1, 5.0), ("rankstat_gauge_set", 0x20, 1, 1.5),
            ("rankstat_gauge_add", 0x20, 1, 1.0), ("rankstat_gauge_add", 0x20, 1, 2.0),
            ("rankstat_gauge_add", 0x20, 1, -1.0), ("rankstat_gauge_add", 0x20, 1, -4.0),
            ("rankstat_histogram_observe", 0x30, 2, 0.25), ("rankstat_histogram_observe", 0x30, 2, 3.0),
            ("rankstat_histogram_observe", 0x40, 3, 9.0)])

    def test_values_convert_like_float(self):
        h = self.impl.Value(0x30, 2, HISTOGRAM)
        h.observe(True)
        h.observe(NumberLike(0.125))
        h.observe(2 ** 60)
        self.assertEqual([c[3] for c in self.fake.calls], [1.0, 0.125, float(2 ** 60)])
        for bad in ("1", None, [1]):
            with self.assertRaises(TypeError):
                h.observe(bad)
        with self.assertRaises(TypeError):
            h.observe()
        with self.assertRaises(TypeError):
            h.observe(1, 2, 3)
        with self.assertRaises(TypeError):
            h.observe(value=1)
        with self.assertRaises(TypeError):
            self.impl.Value(0x20, 1, GAUGE).set()
        self.assertEqual(len(self.fake.calls), 3)

    def test_methods_a_kind_lacks_raise_attribute_error_naming_the_kind(self):
        c = self.impl.Value(0x10, 1, COUNTER)
        for call in (lambda: c.set(1), lambda: c.dec(), lambda: c.observe(1)):
            with self.assertRaisesRegex(AttributeError, "on a counter series"):
                call()
        h = self.impl.Value(0x10, 1, HISTOGRAM)
        for call in (lambda: h.inc(), lambda: h.set(1)):
            with self.assertRaisesRegex(AttributeError, "on a histogram series"):
                call()
        with self.assertRaisesRegex(AttributeError, "observe.*on a gauge series"):
            self.impl.Value(0x10, 1, GAUGE).observe(1)
        self.assertEqual(self.fake.calls, [])

    def test_constructor_checks_kind_and_id(self):
        with self.assertRaisesRegex(ValueError, "kind must be"):
            self.impl.Value(0, 1, 5)
        with self.assertRaisesRegex(ValueError, "32 bits"):
            self.impl.Value(0, 2 ** 32, 1)
        v = self.impl.Value(None, 0xFFFFFFFF, SUMMARY)
        self.assertEqual((v._reporter_address, v._series_id, v._kind), (0, 0xFFFFFFFF, SUMMARY))

    def test_address_zero_is_a_no_op_and_a_child_can_be_detached(self):
        for kind, call in ((COUNTER, "inc"), (GAUGE, "inc"), (GAUGE, "dec"), (HISTOGRAM, "observe"),
                           (SUMMARY, "observe")):
            v = self.impl.Value(0, 1, kind)
            self.assertIsNone(getattr(v, call)(1))
            self.assertIsNone(self.impl.Value(None, 1, kind).__getattribute__(call)(1))
        self.impl.Value(0, 1, GAUGE).set(1)
        with self.assertRaises(ValueError):  # the counter rule holds without a segment too
            self.impl.Value(0, 1, COUNTER).inc(-1)
        g = self.impl.Value(0x20, 1, GAUGE)
        g._reporter_address = 0
        g.set(1)
        self.assertEqual(self.fake.calls, [])
        g._reporter_address = 0x21
        g.set(2)
        self.assertEqual(self.fake.calls, [("rankstat_gauge_set", 0x21, 1, 2.0)])

    def test_a_value_subclass_has_an_instance_dict_and_keeps_the_c_methods(self):
        class Child(self.impl.Value):
            def __init__(self, address, series, kind, extra):
                super().__init__(address, series, kind)
                self.extra = extra
        c = Child(0x50, 4, COUNTER, "x")
        c.inc(2)
        self.assertEqual(c.extra, "x")
        self.assertIn("extra", c.__dict__)
        self.assertEqual(self.fake.calls, [("rankstat_counter_add", 0x50, 4, 2.0)])

    def test_a_library_without_gauge_add_binds_and_gauge_inc_says_what_is_missing(self):
        self.impl.bind(Recorder(with_gauge_add=False))
        self.assertNotIn("rankstat_gauge_add", self.impl.bound())
        g = self.impl.Value(0x20, 1, GAUGE)
        g.set(1)
        with self.assertRaisesRegex(RuntimeError, "rankstat_gauge_add"):
            g.inc()
        with self.assertRaisesRegex(AttributeError, "rankstat_counter_add"):
            self.impl.bind(object())

    def test_the_gil_serialises_threads_updating_one_child(self):
        c = self.impl.Value(0x10, 1, COUNTER)
        f = self.Family("x", ("a",))

        def work():
            for _ in range(2000):
                c.inc()
                f.labels(a="1")
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(self.fake.calls), 8000)

    # --- a Family is a Value too: prometheus_client's metric objects are family and series at once ---

    def test_a_family_becomes_a_series_of_its_kind_when_bound(self):
        f = self.Family("plain", ())
        with self.assertRaisesRegex(AttributeError, "uninitialised"):
            f.inc()
        f._bind(0x70, 9, COUNTER)
        f.inc(2)
        self.assertEqual((f._kind, f._series_id), (COUNTER, 9))
        self.assertEqual(self.fake.calls, [("rankstat_counter_add", 0x70, 9, 2.0)])
        with self.assertRaisesRegex(ValueError, "kind must be"):
            f._bind(0x70, 9, 7)

    def test_a_labelled_parent_refuses_updates_and_a_child_refuses_labels(self):
        for kind, call, word in ((COUNTER, lambda x: x.inc(), "counter"), (GAUGE, lambda x: x.set(1), "gauge"),
                                 (GAUGE, lambda x: x.dec(), "gauge"), (HISTOGRAM, lambda x: x.observe(1), "histogram"),
                                 (SUMMARY, lambda x: x.observe(1), "summary")):
            with self.subTest(kind=kind):
                parent = self.Family("p", ("a",), kind)
                parent._bind(None, 0, kind)
                with self.assertRaisesRegex(ValueError, f"^{word} metric is missing label values$"):
                    call(parent)
        child = self.Family("p", ("a", "b"))
        child._labelvalues = ("1", "2")
        self.assertEqual(child._labelvalues, ("1", "2"))
        with self.assertRaisesRegex(ValueError, r"^family p already has labels set \(\{'a': '1', 'b': '2'\}\); "
                                                r"can not chain calls to \.labels\(\)$"):
            child.labels("3", "4")
        child._bind(0x71, 3, COUNTER)
        child.inc()
        self.assertEqual(self.fake.calls, [("rankstat_counter_add", 0x71, 3, 1.0)])

    def test_exemplars_are_checked_after_the_update_as_prometheus_client_checks_them(self):
        c = self.impl.Value(0x10, 1, COUNTER)
        c.inc(1, exemplar=None)
        c.inc(1, exemplar={})
        c.inc(1, {"trace_id": "x" * 120})
        with self.assertRaisesRegex(ValueError, "exceeding the limit of 128"):
            c.inc(1, exemplar={"trace_id": "x" * 121})
        # Any UTF-8 label name is valid (prometheus_client 0.22+); an empty one is not (rankstat._names).
        c.inc(1, exemplar={"trace.id": "x"})
        with self.assertRaisesRegex(ValueError, "^Invalid label metric name: $"):
            c.inc(1, exemplar={"": "x"})
        with self.assertRaisesRegex(ValueError, "^Reserved label metric name: __a$"):
            c.inc(1, exemplar={"__a": "x"})
        self.assertEqual(len(self.fake.calls), 7)  # every increment happened, the refused ones included
        h = self.impl.Value(0x10, 2, HISTOGRAM)
        with self.assertRaises(ValueError):
            h.observe(1, exemplar={"__a": "x"})
        h.observe(float("nan"), exemplar={"__a": "x"})  # no bucket takes NaN: nothing is checked
        s = self.impl.Value(0x10, 3, SUMMARY)
        with self.assertRaises(TypeError):
            s.observe(1, exemplar={"a": "b"})

    def test_a_counter_takes_nan_and_refuses_minus_infinity(self):
        c = self.impl.Value(0x10, 1, COUNTER)
        c.inc(float("nan"))
        c.inc(float("inf"))
        with self.assertRaises(ValueError):
            c.inc(float("-inf"))
        values = [v for _, _, _, v in self.fake.calls]
        self.assertTrue(values[0] != values[0])
        self.assertEqual(values[1:], [float("inf")])


class RealLibrary:
    """Writes through the real librankstat.so into a segment in a private shm directory."""

    impl = None

    @classmethod
    def setUpClass(cls):
        cls.lib, _ = rankstat.load_library()

    def setUp(self):
        self.impl.bind(self.lib)
        self.dir = shm_tempdir()
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.reporter = Reporter(role="other", instance="pytest-accel", shm_dir=self.dir, strict=True)
        self.addCleanup(self.reporter.close)

    def series_value(self, series):
        fn = getattr(self.lib, "rankstat_series_value", None)
        if fn is None:
            return None
        out = ctypes.c_double()
        rc = fn(ctypes.c_void_p(self.reporter._handle), ctypes.c_uint32(series), ctypes.byref(out))
        self.assertEqual(rc, 0)
        return out.value

    def test_updates_reach_the_segment(self):
        r = self.reporter
        handle = r._handle
        self.assertTrue(handle)
        counter = self.impl.Value(handle, r.register("counter", "accel_test:requests_total"), COUNTER)
        gauge = self.impl.Value(handle, r.register("gauge", "accel_test:queue", mode="livesum"), GAUGE)
        hist = self.impl.Value(handle, r.register("histogram", "accel_test:latency_seconds", buckets=[0.1, 1.0]),
                               HISTOGRAM)
        counter.inc()
        counter.inc(2.5)
        gauge.set(7)
        hist.observe(0.05)
        hist.observe(0.5)
        gauge_add = "rankstat_gauge_add" in self.impl.bound()
        if gauge_add:
            gauge.inc(3)
            gauge.dec()
        self.assertEqual(r.dropped_records, 0)
        if not hasattr(self.lib, "rankstat_series_value"):
            self.skipTest("this librankstat has no rankstat_series_value to read values back")
        self.assertEqual(self.series_value(counter._series_id), 3.5)
        self.assertEqual(self.series_value(gauge._series_id), 9.0 if gauge_add else 7.0)
        self.assertAlmostEqual(self.series_value(hist._series_id), 0.55)

    def test_a_histograms_bucket_and_sum_cells_write_their_own_words_and_refuse_what_prometheus_client_refuses(self):
        r = self.reporter
        hist = self.impl.Value(r._handle, r.register("histogram", "accel_test:cells_seconds", buckets=[0.1, 1.0]),
                               HISTOGRAM)
        low, high, total = self.impl.Cell(hist, 0), self.impl.Cell(hist, 1), self.impl.Cell(hist, -1)
        self.assertIs(low._child, hist)
        self.assertEqual((low._index, total._index), (0, -1))
        low.inc()
        high.inc(2)
        high.inc(0)     # a bucket takes whole positive counts only: nothing
        high.inc(-3)    # nothing either
        total.inc(0.75)
        total.inc(-0.25)  # a sum takes any delta
        with self.assertRaises(OverflowError):
            low.inc(float("inf"))
        with self.assertRaises(TypeError):
            low.inc("1")
        with self.assertRaises(TypeError):
            self.impl.Cell(object(), 0)
        with self.assertRaises(ValueError):
            self.impl.Cell(hist, -2)
        if not hasattr(self.lib, "rankstat_histogram_bucket"):
            self.skipTest("this librankstat cannot read buckets back")
        out = ctypes.c_uint64()
        counts = []
        for i in range(2):
            self.assertEqual(self.lib.rankstat_histogram_bucket(ctypes.c_void_p(r._handle), hist._series_id, i,
                                                                ctypes.byref(out)), 0)
            counts.append(out.value)
        self.assertEqual(counts, [1, 2])
        self.assertAlmostEqual(self.series_value(hist._series_id), 0.5)
        hist._reporter_address = 0  # a child without a reporter: its cells write nothing, raise nothing
        low.inc()
        total.inc(1)

    def test_a_closed_segment_is_not_written_through_a_detached_child(self):
        r = self.reporter
        counter = self.impl.Value(r._handle, r.register("counter", "accel_test:n_total"), COUNTER)
        counter._reporter_address = 0
        r.close()
        counter.inc()  # must not touch the freed reporter


@unittest.skipIf(FASTPATH is None and not os.environ.get("RANKSTAT_FASTPATH"),
                 f"rankstat._fastpath is not built: {_accel.FASTPATH_ERROR}")
class Fastpath(Checks, unittest.TestCase):
    impl = FASTPATH

    def test_the_extension_under_test_is_the_one_loaded(self):
        expected = os.environ.get("RANKSTAT_FASTPATH")
        self.assertIsNotNone(FASTPATH, _accel.FASTPATH_ERROR)
        if expected and not os.environ.get("RANKSTAT_NO_FASTPATH"):
            self.assertTrue(_accel.FAST)
            self.assertEqual(os.path.realpath(FASTPATH.__file__), os.path.realpath(expected))


class Slowpath(Checks, unittest.TestCase):
    impl = _slowpath


@unittest.skipIf(FASTPATH is None and not os.environ.get("RANKSTAT_FASTPATH"),
                 f"rankstat._fastpath is not built: {_accel.FASTPATH_ERROR}")
class FastpathRealLibrary(RealLibrary, unittest.TestCase):
    impl = FASTPATH


class SlowpathRealLibrary(RealLibrary, unittest.TestCase):
    impl = _slowpath


class Selection(unittest.TestCase):
    def run_python(self, code, **env):
        full = dict(os.environ, **env)
        out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def test_rankstat_no_fastpath_selects_the_pure_python_twin(self):
        code = "from rankstat import _accel; print(_accel.FAST, _accel.Value.__module__)"
        self.assertEqual(self.run_python(code, RANKSTAT_NO_FASTPATH="1"), "False rankstat._slowpath")
        if FASTPATH is not None:
            self.assertEqual(self.run_python(code, RANKSTAT_NO_FASTPATH=""), "True rankstat._fastpath")

    def test_the_contract_names_are_exported(self):
        for name in ("Family", "Value", "bind", "FAST"):
            self.assertTrue(hasattr(_accel, name), name)


if __name__ == "__main__":
    unittest.main()
