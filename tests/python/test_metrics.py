"""rankstat.metrics against prometheus_client's interface: constructor and name rules, labels() and its
errors, children at zero, the histogram-child internals SGLang touches, gauge modes, remove/clear, and
one segment per process (forked children get their own).

Where prometheus_client is importable (Debian's python3-prometheus-client), constructor and labels()
outcomes are compared with it directly; a gauge mode that the installed version predates is compared with
what the current release (0.25) does, recorded below, not with the older version's refusal."""

import glob
import os
import tempfile
import unittest

SOURCE = os.environ.get("RANKSTAT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
try:
    import prometheus_client
except ImportError:  # comparisons are skipped; rankstat's own behaviour is still checked
    prometheus_client = None

# One segment per process: this test process's goes to a private directory.
SHM = tempfile.mkdtemp(prefix="rankstat-metrics-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
os.environ["RANKSTAT_SHM_DIR"] = SHM
os.environ.setdefault("RANKSTAT_INSTANCE", "metricstest")

from rankstat import backend, metrics  # noqa: E402

_names = iter(range(1_000_000))

# The gauge modes prometheus_client 0.25 accepts (mostrecent and livemostrecent came in 0.17/0.18); the
# engines' traces construct gauges with both, and those constructions succeeded.
CURRENT_RELEASE_MODES = frozenset({"all", "liveall", "sum", "livesum", "min", "livemin", "max", "livemax",
                                   "mostrecent", "livemostrecent"})


def installed_modes():
    return frozenset(getattr(prometheus_client.Gauge, "_MULTIPROC_MODES", ())) if prometheus_client else frozenset()


def fresh(prefix="m"):
    return f"test_{prefix}_{next(_names)}"


def outcome(make):
    try:
        make()
        return "ok"
    except ValueError:
        return "ValueError"
    except RuntimeError:
        return "RuntimeError"


def segment_open():
    seg = backend.segment()
    seg.open()
    return bool(seg.address)


class NamesAndConstructor(unittest.TestCase):
    def test_names_are_composed_as_prometheus_client_composes_them(self):
        cases = [
            (metrics.Counter, dict(name="requests_total"), "requests"),
            (metrics.Counter, dict(name="requests", namespace="sglang"), "sglang_requests"),
            (metrics.Gauge, dict(name="size", namespace="a", subsystem="b", unit="bytes"), "a_b_size_bytes"),
            (metrics.Gauge, dict(name="size_bytes", unit="bytes"), "size_bytes"),
            (metrics.Histogram, dict(name="sglang:e2e_request_latency_seconds"), "sglang:e2e_request_latency_seconds"),
        ]
        for cls, kw, want in cases:
            with self.subTest(kw=kw):
                m = cls(documentation="d", **kw)
                self.assertEqual(m._name, want)

    def test_a_counter_is_exposed_with_its_total_suffix(self):
        self.assertEqual(metrics.Counter("x_total", "d")._exposed_name, "x_total")
        self.assertEqual(metrics.Counter("y", "d")._exposed_name, "y_total")

    def test_labelnames_keep_the_order_they_come_in(self):
        self.assertEqual(metrics.Gauge(fresh(), "d", ["b", "a"])._labelnames, ("b", "a"))
        self.assertEqual(metrics.Gauge(fresh(), "d", ("b", "a"))._labelnames, ("b", "a"))
        keys = {"z": 1, "y": 2}.keys()
        self.assertEqual(metrics.Gauge(fresh(), "d", keys)._labelnames, tuple(keys))
        s = {"p", "q", "r"}
        self.assertEqual(metrics.Gauge(fresh(), "d", s)._labelnames, tuple(s))

    def test_unknown_keyword_arguments_are_accepted(self):
        metrics.Counter(fresh(), "d", ["a"], registry=None, some_future_option=3)
        metrics.Histogram(fresh(), "d", buckets=[1, 2], native_histogram_bucket_factor=1.1)

    def test_bad_label_names_are_refused_naming_the_label(self):
        bad = [(metrics.Histogram, ["le"]), (metrics.Summary, ["quantile"]), (metrics.Counter, ["__x"]),
               (metrics.Gauge, ["a", "a"]), (metrics.Gauge, ["a\x00b"]), (metrics.Counter, ["9a", ""])]
        for cls, names in bad:
            with self.subTest(cls=cls.__name__, names=names):
                with self.assertRaises(ValueError) as e:
                    cls(fresh(), "d", names)
                self.assertIn(names[-1], str(e.exception))

    def test_bucket_rules_are_prometheus_clients(self):
        self.assertEqual(metrics.Histogram(fresh(), "d", buckets=[1, 2])._upper_bounds, [1.0, 2.0, float("inf")])
        self.assertEqual(metrics.Histogram(fresh(), "d", buckets=[1, float("inf")])._upper_bounds, [1.0, float("inf")])
        self.assertEqual(metrics.Histogram(fresh(), "d")._upper_bounds, list(metrics.DEFAULT_BUCKETS))
        for buckets in ([2, 1], [], [float("inf")]):
            with self.subTest(buckets=buckets), self.assertRaises(ValueError):
                metrics.Histogram(fresh(), "d", buckets=buckets)

    def test_the_ten_modes_and_no_other(self):
        for mode in ("all", "liveall", "sum", "livesum", "min", "livemin", "max", "livemax", "mostrecent",
                     "livemostrecent"):
            metrics.Gauge(fresh(), "d", multiprocess_mode=mode)
        with self.assertRaises(ValueError) as e:
            metrics.Gauge(fresh(), "d", multiprocess_mode="newest")
        self.assertIn("Invalid multiprocess mode", str(e.exception))

    @unittest.skipIf(prometheus_client is None, "prometheus_client is not importable")
    def test_constructor_outcomes_match_prometheus_client(self):
        cases = [
            ("Counter", dict(labelnames=["a", "b"])), ("Counter", dict(labelnames=["__a"])),
            ("Histogram", dict(labelnames=["le"])), ("Summary", dict(labelnames=["quantile"])),
            ("Histogram", dict(buckets=[3, 1])), ("Histogram", dict(buckets=[])), ("Histogram", dict(buckets=[1])),
            ("Gauge", dict(multiprocess_mode="bogus")), ("Gauge", dict(multiprocess_mode="livemostrecent")),
            ("Counter", dict(name="")),
        ]
        for cls_name, kw in cases:
            with self.subTest(cls=cls_name, kw=kw):
                name = kw.pop("name", fresh())
                ours = outcome(lambda: getattr(metrics, cls_name)(name, "d", **kw))
                mode = kw.get("multiprocess_mode")
                if mode in CURRENT_RELEASE_MODES and mode not in installed_modes():
                    theirs = "ok"  # the installed prometheus_client predates the mode; 0.25 accepts it
                else:
                    theirs = outcome(lambda: getattr(prometheus_client, cls_name)(name, "d", registry=None, **kw))
                self.assertEqual(ours, theirs)


class Labels(unittest.TestCase):
    def test_labels_errors_match_prometheus_client(self):
        calls = [((), {}), (("x",), {}), (("x", "y"), {}), (("x", "y", "z"), {}), ((), {"a": 1, "b": 2}),
                 ((), {"a": 1}), ((), {"a": 1, "c": 2}), (("x",), {"b": 2})]
        for args, kw in calls:
            with self.subTest(args=args, kw=kw):
                ours = outcome(lambda: metrics.Counter(fresh(), "d", ["a", "b"]).labels(*args, **kw))
                if prometheus_client is not None:
                    theirs = outcome(lambda: prometheus_client.Counter(fresh(), "d", ["a", "b"], registry=None)
                                     .labels(*args, **kw))
                    self.assertEqual(ours, theirs)
                else:
                    self.assertEqual(ours, "ok" if (len(args) == 2 or set(kw) == {"a", "b"}) and not (args and kw)
                                     else "ValueError")

    def test_labels_on_an_unlabelled_metric_is_an_error(self):
        with self.assertRaises(ValueError):
            metrics.Counter(fresh(), "d").labels()

    def test_values_are_converted_with_str_and_the_child_is_reused(self):
        c = metrics.Counter(fresh(), "d", ["rank", "mode"])
        child = c.labels(0, None)
        self.assertIs(c.labels(rank="0", mode="None"), child)
        self.assertIn(("0", "None"), c._children)

    def test_a_labelled_metric_cannot_be_updated_without_labels(self):
        with self.assertRaises(ValueError):
            metrics.Counter(fresh(), "d", ["a"]).inc()

    def test_negative_counter_increments_are_refused(self):
        with self.assertRaises(ValueError) as e:
            metrics.Counter(fresh(), "d").inc(-1)
        self.assertEqual(str(e.exception), "Counters can only be incremented by non-negative amounts.")

    def test_mostrecent_gauges_refuse_inc_and_dec(self):
        g = metrics.Gauge(fresh(), "d", multiprocess_mode="mostrecent")
        with self.assertRaises(RuntimeError):
            g.inc()
        with self.assertRaises(RuntimeError):
            g.dec()
        g.set(3)


@unittest.skipUnless(segment_open(), "the segment could not be opened: " + backend.segment().error)
class SharedMemorySeries(unittest.TestCase):
    def test_a_labelled_child_exists_at_zero(self):
        c = metrics.Counter(fresh(), "d", ["a"])
        child = c.labels(a="x")
        self.assertEqual(child._value.get(), 0.0)
        child.inc(2.5)
        self.assertEqual(child._value.get(), 2.5)

    def test_a_metric_built_again_in_the_process_continues_the_same_series(self):
        # As prometheus_client's one mmap value per key: vLLM builds its logger twice (unregistering the
        # first), SGLang's tests rebuild collectors; a second series would be summed (counters) or merged
        # (a max gauge) twice. Outside a registry (registry=None) a second construction is no duplicate.
        name = fresh()
        first = metrics.Counter(name, "d", ["a"], registry=None)
        first.labels(a="x").inc(2)
        again = metrics.Counter(name, "d", ["a"], registry=None)
        again.labels(a="x").inc(3)
        self.assertEqual(first.labels(a="x")._series_id, again.labels(a="x")._series_id)
        self.assertEqual(again.labels(a="x")._value.get(), 5.0)
        low = metrics.Gauge(fresh(), "d", multiprocess_mode="min")
        low.set(4)
        metrics.REGISTRY.unregister(low)
        self.assertEqual(metrics.Gauge(low._name, "d", multiprocess_mode="min")._value.get(), 4.0)

    def test_gauge_inc_dec_set_and_helpers(self):
        g = metrics.Gauge(fresh(), "d", multiprocess_mode="livesum")
        g.inc(3)
        g.dec(1)
        self.assertEqual(g._value.get(), 2.0)
        g.set(7.5)
        self.assertEqual(g._value.get(), 7.5)
        with g.track_inprogress():
            self.assertEqual(g._value.get(), 8.5)
        self.assertEqual(g._value.get(), 7.5)
        g.set_to_current_time()
        self.assertGreater(g._value.get(), 1e9)

    def test_histogram_child_internals_work_on_the_same_series(self):
        h = metrics.Histogram(fresh(), "d", ["layer"], buckets=[0, 1, 2, 3])
        child = h.labels(layer="0")
        self.assertEqual(child._upper_bounds, [0.0, 1.0, 2.0, 3.0, float("inf")])
        self.assertEqual(len(child._buckets), 5)
        child.observe(1.5)
        child._buckets[3].inc(4)
        child._sum.inc(12)
        self.assertEqual([b._value.get() for b in child._buckets], [0.0, 0.0, 1.0, 4.0, 0.0])
        self.assertEqual(sum(b._value for b in child._buckets), 5)  # SGLang's straggler check
        self.assertEqual(child._sum.get(), 13.5)
        self.assertEqual(child._sum._value.get(), 13.5)

    def test_summary_counts_and_sums(self):
        s = metrics.Summary(fresh(), "d")
        s.observe(2)
        s.observe(3)
        self.assertEqual(s._count.get(), 2.0)
        self.assertEqual(s._sum.get(), 5.0)

    def test_time_observes_a_duration(self):
        h = metrics.Histogram(fresh(), "d", buckets=[10])
        with h.time():
            pass

        @h.time()
        def f():
            return 4
        self.assertEqual(f(), 4)
        self.assertEqual(h._buckets[0].get(), 2.0)

    def test_removed_children_continue_their_series(self):
        c = metrics.Counter(fresh(), "d", ["a"])
        c.labels("x").inc(3)
        c.remove("x")
        self.assertNotIn(("x",), c._children)
        c.labels("x").inc(1)
        self.assertEqual(c.labels("x")._value.get(), 4.0)
        c.clear()
        self.assertEqual(c._children, {})
        self.assertEqual(c.labels("x")._value.get(), 4.0)

    def test_one_segment_per_process_and_its_own_after_fork(self):
        metrics.Counter(fresh(), "d").inc()
        before = set(glob.glob(os.path.join(SHM, "rankstat.*")))
        self.assertEqual(len(before), 1, before)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                c = metrics.Counter(fresh(), "d")
                c.inc(5)
                code = 0 if c._value.get() == 5.0 and backend.segment().address else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        after = set(glob.glob(os.path.join(SHM, "rankstat.*")))
        self.assertEqual(len(after - before), 1, after)
        self.assertIn(f"pid{pid}", "".join(after - before))


class Identity(unittest.TestCase):
    def test_scheduler_labels_name_the_rank(self):
        ident = backend.identity_from_labels("scheduler", {"tp_rank": 1, "pp_rank": 0, "moe_ep_rank": 1,
                                                           "dp_rank": 2, "model_name": "m"})
        self.assertEqual(ident["rank_key"], "tp1-pp0-ep1-dp2")
        self.assertEqual(ident["role"], "scheduler")
        self.assertEqual(backend.identity_from_labels("scheduler", {"tp_rank": "0"})["rank_key"], "tp0-pp0-ep0")

    def test_other_collectors_get_a_per_process_key(self):
        ident = backend.identity_from_labels("other", {"cache_type": "HiRadixCache", "tp_rank": 0})
        self.assertEqual(ident["rank_key"], f"pid{os.getpid()}")
        self.assertEqual(ident["role"], "other")

    def test_the_first_hint_wins(self):
        seg = backend.Segment()
        seg.hint_identity("scheduler", {"tp_rank": 3})
        seg.hint_identity("other", {"cache_type": "x"})
        self.assertEqual(seg.identity()["rank_key"], "tp3-pp0-ep0")


def tearDownModule():
    import shutil
    shutil.rmtree(SHM, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
