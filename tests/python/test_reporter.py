"""The plain API over the real librankstat.so: loading and layout checks, segments, families, batches."""

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import rankstat
from rankstat import _native as n
from rankstat import backend

from daemon_harness import Daemon, Exposition, wait_until

from recording import RecordingReporter


def shm_tempdir():
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="rankstat-pytest-", dir=base)


class Library(unittest.TestCase):
    def test_the_library_writes_the_layout_this_package_packs(self):
        lib, layout = rankstat.load_library()
        self.assertEqual(layout.major, rankstat.LAYOUT_MAJOR)
        self.assertIn(layout.hash, rankstat.KNOWN_LAYOUT_HASHES,
                      f"the library's layout hash is {layout.hash:#018x}: check the packing in "
                      "rankstat/reporter.py against shmproto and add it to KNOWN_LAYOUT_HASHES")
        self.assertEqual(layout.priority_count_bytes, 16)

    def test_the_field_table_covers_the_snapshot_without_overlap(self):
        _, layout = rankstat.load_library()
        members = sorted([(f.offset, struct.calcsize("<" + f.kind) * f.count) for f in layout.scalar_fields] +
                         [(f.offset, struct.calcsize("<" + f.kind) * f.count) for f in layout.aux_fields.values()])
        end = 0
        for offset, size in members:
            self.assertGreaterEqual(offset, end)
            end = offset + size
        self.assertEqual(end, layout.snapshot_bytes)
        self.assertEqual(len(layout.routing_key_bounds) + 1, layout.aux_fields["routing_key_all_req_counts"].count)

    def test_rankstat_library_pointing_nowhere_fails_with_a_clear_error(self):
        code = ("import rankstat\n"
                "try:\n rankstat.load_library()\nexcept rankstat.RankstatLibraryError as e:\n print('ERR', e)\n")
        env = dict(os.environ, RANKSTAT_LIBRARY="/nonexistent/librankstat.so")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertIn("ERR RANKSTAT_LIBRARY=/nonexistent/librankstat.so cannot be loaded", out.stdout, out.stderr)

    def test_the_library_and_the_extension_are_found_by_one_search_of_the_build_trees(self):
        from rankstat import _accel, _find
        import importlib.machinery
        repo = tempfile.mkdtemp(prefix="rankstat-find-")
        self.addCleanup(shutil.rmtree, repo, True)
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        made = {}
        for age, build in enumerate(("older", "asan-ubsan", "newer")):
            for kind, relative in (("lib", ("client", "librankstat.so")),
                                   ("ext", ("client", "pyext", "rankstat", "_fastpath" + suffix))):
                path = os.path.join(repo, "build", build, *relative)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").close()
                os.utime(path, (1000 + age, 1000 + age))
                made[kind, build] = path
        saved = _find.REPO_DIR, os.environ.pop("RANKSTAT_LIBRARY", None), os.environ.pop("RANKSTAT_FASTPATH", None)
        _find.REPO_DIR = repo
        try:
            libraries = [p for p in n.candidate_paths() if p.startswith(repo)]
            extensions = [p for p in _accel.candidate_paths() if p.startswith(repo)]
        finally:
            _find.REPO_DIR = saved[0]
            for variable, value in (("RANKSTAT_LIBRARY", saved[1]), ("RANKSTAT_FASTPATH", saved[2])):
                if value is not None:
                    os.environ[variable] = value
        # Newest build first, the sanitizer build skipped, in both searches.
        self.assertEqual(libraries, [made["lib", "newer"], made["lib", "older"]])
        self.assertEqual(extensions, [made["ext", "newer"], made["ext", "older"]])

    def test_a_reporter_without_a_library_is_a_quiet_no_op(self):
        code = ("import rankstat\n"
                "r = rankstat.Reporter(role='scheduler')\n"
                "c = r.counter('x_total'); c.inc(); r.snapshot_packer().send([])\n"
                "print('OPEN', r.is_open)\n")
        env = dict(os.environ, RANKSTAT_LIBRARY="/nonexistent/librankstat.so")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertIn("OPEN False", out.stdout, out.stderr)
        self.assertIn("metrics disabled", out.stderr)


class Segments(unittest.TestCase):
    def setUp(self):
        self.dir = shm_tempdir()
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_a_reporter_creates_its_named_segment_and_close_marks_it_closed(self):
        r = rankstat.Reporter(role="scheduler", instance="pytest", model_name="m", tp_rank=1, dp_rank=2,
                              shm_dir=self.dir, strict=True)
        self.assertTrue(r.is_open)
        self.assertEqual(os.listdir(self.dir), ["rankstat.pytest.scheduler.tp1-pp0-ep0-dp2"])
        self.assertEqual(r.identity_labels, {"model_name": "m", "engine_type": "unified", "tp_rank": "1",
                                             "pp_rank": "0", "moe_ep_rank": "0", "dp_rank": "2"})
        r.close()
        r.close()
        self.assertFalse(r.is_open)
        r.counter("late_total").inc()  # a closed reporter ignores updates

    def test_shm_dir_places_only_this_segment_and_leaves_the_environment_alone(self):
        elsewhere = shm_tempdir()
        self.addCleanup(shutil.rmtree, elsewhere, True)
        before = os.environ.get("RANKSTAT_SHM_DIR")
        os.environ["RANKSTAT_SHM_DIR"] = elsewhere
        try:
            with rankstat.Reporter(role="other", instance="pytest-dir", rank_key="given", shm_dir=self.dir,
                                   strict=True):
                self.assertEqual(os.environ["RANKSTAT_SHM_DIR"], elsewhere)
                # A reporter without shm_dir still follows the environment.
                with rankstat.Reporter(role="other", instance="pytest-dir", rank_key="env", strict=True):
                    self.assertEqual(os.listdir(self.dir), ["rankstat.pytest-dir.other.given"])
                    self.assertEqual(os.listdir(elsewhere), ["rankstat.pytest-dir.other.env"])
        finally:
            if before is None:
                os.environ.pop("RANKSTAT_SHM_DIR", None)
            else:
                os.environ["RANKSTAT_SHM_DIR"] = before
        self.assertEqual(os.environ.get("RANKSTAT_SHM_DIR"), before)

    def test_a_bad_instance_name_is_reported_not_raised_unless_strict(self):
        with self.assertLogs("rankstat", "WARNING"):
            r = rankstat.Reporter(role="tokenizer", instance="bad name", shm_dir=self.dir)
        self.assertFalse(r.is_open)
        self.assertIn("invalid_argument", r.error)
        with self.assertRaises(rankstat.RankstatError):
            rankstat.Reporter(role="tokenizer", instance="bad name", shm_dir=self.dir, strict=True)

    def test_families_are_the_metric_classes_bound_to_the_reporters_own_segment(self):
        with rankstat.Reporter(role="other", instance="pytest", shm_dir=self.dir, strict=True) as r:
            c = r.counter("app:requests_total", "Requests.", labelnames=["code"])
            self.assertIs(type(c), rankstat.Counter)
            self.assertIs(c.labels(code="200"), c.labels("200"))
            c.labels(code="200").inc(2)
            self.assertEqual(c.labels(code="200")._value.get(), 2.0)  # read back from this Reporter's segment
            g = r.gauge("app:queue", "Queue.", multiprocess_mode="livesum")
            self.assertIs(type(g), rankstat.Gauge)
            g.set(3)
            g.inc()
            self.assertEqual(g._value.get(), 4.0)
            h = r.histogram("app:latency_seconds", "Latency.", buckets=[0.1, 1])
            h.observe(0.5)
            h._buckets[1].inc(3)
            self.assertEqual([b.get() for b in h._buckets], [0.0, 4.0, 0.0])
            s = r.summary("app:size_bytes", "Size.")
            s.observe(10)
            self.assertEqual((s._count.get(), s._sum.get()), (1.0, 10.0))
            with self.assertRaisesRegex(ValueError, "missing label values"):
                c.inc()  # labelled family: needs .labels()
            with self.assertRaises(ValueError):
                c.labels(code="200").inc(-1)
            with self.assertRaises(ValueError):
                r.gauge("app:other", multiprocess_mode="nope")
            with self.assertRaisesRegex(RuntimeError, "mostrecent"):
                r.gauge("app:last", "Last value.").inc()  # the Reporter's default mode is the last value set
            self.assertIs(r.counter("app:requests_total", labelnames=["code"]), c)
            with self.assertRaises(ValueError):
                r.gauge("app:requests_total")
            # Bound to this segment, registered in no collector registry: another Reporter may have a family
            # of the same name, and the process's own metric classes are untouched.
            self.assertIsNot(c._segment, backend.segment())
            with rankstat.Reporter(role="other", instance="pytest", rank_key="second", shm_dir=self.dir,
                                   strict=True) as second:
                second.counter("app:requests_total", "Requests.", labelnames=["code"]).labels("200").inc()
            child = c.labels(code="200")
        # Closed: every child of its families is a no-op, a new one too.
        child.inc()
        c.labels(code="500").inc()
        self.assertEqual(child._value.get(), 0.0)

    def test_a_forked_child_writes_nothing_into_the_parents_segment_through_a_family(self):
        with rankstat.Reporter(role="other", instance="pytest", shm_dir=self.dir, strict=True) as r:
            counter = r.counter("app:forked_total", "Forked.")
            counter.inc(1)
            pid = os.fork()
            if pid == 0:  # the child: the Reporter and its families are closed no-ops here
                code = 1
                try:
                    counter.inc(5)
                    r.counter("app:new_total", "New.").inc()
                    code = 0 if counter._value.get() == 0.0 else 3
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0)
            self.assertEqual(counter._value.get(), 1.0)
            self.assertTrue(r.is_open)

    @unittest.skipUnless(os.environ.get("RANKSTAT_DAEMON"), "needs RANKSTAT_DAEMON (set by CTest)")
    def test_rankstatd_serves_a_reporters_families_with_their_help_and_identity_labels(self):
        files = shm_tempdir()
        self.addCleanup(shutil.rmtree, files, True)
        daemon = Daemon(self.dir, files)
        self.addCleanup(daemon.child.kill)
        with rankstat.Reporter(role="scheduler", instance="pytest", model_name="m", tp_rank=0, shm_dir=self.dir,
                               strict=True) as r:
            r.counter("app:steps_total", "Scheduler steps.").inc(3)
            r.gauge("app:own", "Own labels only.", ["path"], identity_labels=False).labels("/x").set(2)
            box = {}

            def served():
                box["e"] = Exposition(daemon.scrape())
                return box["e"].value("app:own", path="/x") == 2.0
            self.assertTrue(wait_until(served, 15), box["e"].text if "e" in box else "no scrape")
            e = box["e"]
            self.assertIn("# HELP app:steps_total Scheduler steps.", e.text)
            self.assertIn("# HELP app:own Own labels only.", e.text)
            self.assertEqual(e.value("app:steps_total", model_name="m", tp_rank="0"), 3.0)
            self.assertEqual([labels for name, labels, _ in e.samples if name == "app:own"], [{"path": "/x"}])

    def test_a_batch_flushes_itself_when_full_and_on_exit(self):
        with rankstat.Reporter(role="other", instance="pytest", shm_dir=self.dir, strict=True) as r:
            series = r.register("counter", "app:n_total")
            with r.batch(capacity=2) as b:
                for _ in range(5):
                    b.add(series, 1)
                self.assertEqual(len(b), 1)
            self.assertEqual(len(b), 0)

    def test_a_full_registry_drops_new_series_quietly_and_counts_them(self):
        with rankstat.Reporter(role="other", instance="pytest", shm_dir=self.dir, series_capacity=4,
                               strict=True) as r:
            family = r.counter("app:requests_total", labelnames=["user"])
            with self.assertLogs("rankstat", "WARNING"):
                for i in range(6):
                    family.labels(user=str(i)).inc()
            self.assertEqual(r.registration_failures, 2)

    def test_a_snapshot_reaches_the_ring(self):
        with rankstat.Reporter(role="scheduler", instance="pytest", shm_dir=self.dir, strict=True) as r:
            packer = r.snapshot_packer()
            values = [0] * len(packer.field_names)
            values[packer.field_names.index("num_running_reqs")] = 7
            packer.add_entry(n.QUEUE_RUNNING, 1, 7)
            self.assertEqual(packer.send(values, kind=rankstat.ReportKind.PREFILL), n.OK)
            self.assertEqual(r.dropped_records, 0)


class Packaging(unittest.TestCase):
    def test_the_package_installs_with_pip_without_a_compile_step(self):
        import importlib.util
        if importlib.util.find_spec("pip") is None:
            self.skipTest("pip is not installed")
        scratch = tempfile.mkdtemp(prefix="rankstat-pip-")
        self.addCleanup(shutil.rmtree, scratch, True)
        # The repository's shape: client/python and, two levels up, VERSION (the one version source).
        source = os.path.join(scratch, "repo", "client", "python")
        package_dir = os.path.dirname(os.path.dirname(os.path.abspath(rankstat.__file__)))
        shutil.copytree(package_dir, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        shutil.copy(os.path.join(package_dir, "..", "..", "VERSION"), os.path.join(scratch, "repo", "VERSION"))
        target = os.path.join(scratch, "site")
        out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                              "--no-deps", "--quiet", "--target", target, source],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        check = subprocess.run([sys.executable, "-c", "import rankstat, rankstat.sglang; print(rankstat.__file__); "
                                "print(rankstat.__version__)"],
                               env=dict(os.environ, PYTHONPATH=target), capture_output=True, text=True, timeout=60)
        self.assertTrue(check.stdout.startswith(target), check.stdout + check.stderr)
        # The installed package carries the version, not a path back into the source tree.
        self.assertEqual(check.stdout.split()[-1], rankstat.__version__)
        self.assertTrue(os.path.exists(os.path.join(target, "rankstat", "VERSION")))


class Packing(unittest.TestCase):
    def test_packing_without_sending_gives_the_snapshot_bytes(self):
        r = RecordingReporter({})
        packer = r.snapshot_packer()
        values = [1] * len(packer.field_names)
        packer.add_entry(n.QUEUE_WAITING, None, 3)
        snapshot, entries = packer.pack_only(values, kind=rankstat.ReportKind.DECODE, groups=n.GROUP_LORA)
        self.assertEqual(len(snapshot), r.layout.snapshot_bytes)
        self.assertEqual(struct.unpack_from("<iBBHq", entries), (0, n.QUEUE_WAITING, n.PRIORITY_IS_NONE, 0, 3))
        self.assertEqual(struct.unpack_from("<I", snapshot, r.layout.aux_fields["report_kind"].offset)[0],
                         rankstat.ReportKind.DECODE)

    def test_a_report_holds_at_most_the_entries_the_library_allows(self):
        r = RecordingReporter({})
        packer = r.snapshot_packer()
        accepted = sum(packer.add_entry(n.QUEUE_RUNNING, p, 1) for p in range(packer.max_entries + 5))
        self.assertEqual(accepted, packer.max_entries)


if __name__ == "__main__":
    unittest.main()
