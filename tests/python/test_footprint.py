"""A segment's footprint grows with use (issue 22, item 6), with real processes on a tmpfs of their own.

- Twenty SGLang-like processes (an engine-oracle trace replayed through rankstat's SGLang stat loggers)
  publish in a 64 MiB tmpfs, Docker's default /dev/shm, with most of it left free; the daemon serves all
  twenty, and attaching and scraping them faults in no page the writers did not reserve.
- A process whose segment could not be created (a full tmpfs) keeps running with metrics off, attaches
  once space frees, and its metric objects, created meanwhile, count from then on.
- A registration refused because the tmpfs is full is logged with the family's name and counted by the
  daemon (rankstat_series_registrations_refused_total{reason="no_space"}).

Each test mounts its own tmpfs (we run as root in CI); where mount is not permitted it skips and says so."""

import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from typing import List

from daemon_harness import Child, Daemon, Exposition, TempDir, wait_until
from oracle_compare import ABSENT, PYTHON, REPLAY, available, trace_path

SGLANG_PLUGIN = "plugin:rankstat.sglang:stat_loggers"
TRACE = "6a7c8a1d"  # 143 families, 771 samples: SGLang's collectors at their largest
PROCESSES = 20


def mount_tmpfs(test: unittest.TestCase, size: str) -> str:
    """A fresh tmpfs of `size`, unmounted at cleanup; skips the test where mount is not permitted."""
    path = tempfile.mkdtemp(prefix="rankstat-footprint-")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", path],
                            capture_output=True, text=True)
    if result.returncode != 0:
        os.rmdir(path)
        test.skipTest(f"cannot mount a tmpfs here ({result.stderr.strip() or result.returncode}); needs root")

    def unmount():
        subprocess.run(["umount", "-l", path], capture_output=True)
        os.rmdir(path)
    test.addCleanup(unmount)
    return path


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def segments(directory: str) -> List[str]:
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if f.startswith("rankstat.") and ".tmp." not in f)


def free_bytes(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def fill(directory: str) -> str:
    """A file taking every free byte of `directory`'s file system."""
    filler = os.path.join(directory, "filler")
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        size = free_bytes(directory)
        while size > 0:
            try:
                os.posix_fallocate(fd, 0, size)
                break
            except OSError:
                size -= 4096
    finally:
        os.close(fd)
    return filler


def line(writer: subprocess.Popen) -> str:
    """The writer's next line of output; its stderr in the failure when it has exited instead."""
    text = writer.stdout.readline()
    if not text:
        writer.wait(10)
        raise AssertionError(f"the writer exited ({writer.returncode}):\n{writer.stderr.read()}")
    return text.strip()


def writer_env(shm: str) -> dict:
    env = dict(os.environ)
    env["RANKSTAT_SHM_DIR"] = shm
    return env


class FootprintTest(unittest.TestCase):
    def setUp(self):
        self.files = TempDir("rankstat-footprint-files")
        self.addCleanup(self.files.cleanup)

    def start_daemon(self, shm: str) -> Daemon:
        daemon = Daemon(shm, self.files.path, ["--liveness.interval=100ms"])
        self.addCleanup(daemon.stop)
        return daemon

    @unittest.skipUnless(available(), ABSENT)
    def test_twenty_sglang_like_processes_fit_in_a_64_mib_tmpfs_with_room_to_spare(self):
        shm = mount_tmpfs(self, "64m")
        env = writer_env(shm)
        env["TMPDIR"] = self.files.path  # the replayer's own prometheus_client directory stays off the tmpfs
        replays = []
        for i in range(PROCESSES):
            argv = [PYTHON, REPLAY, "--trace", trace_path("sglang", TRACE), "--backend", SGLANG_PLUGIN,
                    "--hold", "300", "--quiet"]
            child = Child(argv, env=env, log_path=os.path.join(self.files.path, f"replay-{i}.log"))
            self.addCleanup(child.kill)
            replays.append(child)
        for child in replays:
            self.assertTrue(wait_until(lambda: "ORACLE-READY" in child.log() or not child.running(), 240,
                                       interval=0.2), child.log())
            self.assertIn("ORACLE-READY", child.log())
            self.assertNotIn("metrics off", child.log())
            self.assertNotIn("cannot register", child.log())
        files = segments(shm)
        self.assertEqual(len(files), PROCESSES, os.listdir(shm))
        before = {f: allocated(f) for f in files}
        per_process = sum(before.values()) / PROCESSES
        print(f"\n{PROCESSES} SGLang-like processes ({TRACE}): {per_process / 1024:.0f} KiB of tmpfs each "
              f"(apparent {os.stat(files[0]).st_size / 2**20:.1f} MiB), {free_bytes(shm) / 2**20:.1f} MiB of "
              f"64 MiB free", file=sys.stderr)
        # Room to spare: most of the tmpfs is still free.
        self.assertLess(per_process, 512 * 1024)
        self.assertGreater(free_bytes(shm), 48 * 2**20)

        daemon = self.start_daemon(shm)

        def all_served():
            e = Exposition(daemon.scrape())
            return e.value("rankstat_segments", state="LIVE") == PROCESSES and \
                len(e.family_samples("sglang:num_running_reqs")) > 0
        self.assertTrue(wait_until(all_served, 60), daemon.scrape())
        for _ in range(5):
            daemon.scrape()
            time.sleep(0.1)
        # The daemon's attach, drains and scrapes read only what writers published: no page faulted in.
        self.assertEqual({f: allocated(f) for f in files}, before)

    def test_a_process_on_a_full_tmpfs_attaches_once_space_frees_and_counts_from_then_on(self):
        shm = mount_tmpfs(self, "1m")
        filler = fill(shm)
        script = textwrap.dedent("""
            import sys, time
            from rankstat import Counter, Gauge, backend
            c = Counter("fp_requests", "Requests.", ["route"])
            g = Gauge("fp_queue", "Queue.", multiprocess_mode="livesum")
            c.labels("a").inc(5)  # no segment yet: lost, as documented
            g.set(3)
            print("DETACHED", backend.segment().address, flush=True)
            deadline = time.monotonic() + 60
            while backend.segment().retrying and time.monotonic() < deadline:
                c.labels("a").inc(1)  # never blocks, never raises
                time.sleep(0.05)
            c.labels("a").inc(7)
            c.labels("b").inc(2)
            g.set(4)
            print("ATTACHED", backend.segment().address != 0, flush=True)
            sys.stdin.read()
        """)
        writer = subprocess.Popen([PYTHON, "-c", script], env=writer_env(shm), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(writer.kill)
        self.assertEqual(line(writer), "DETACHED 0")
        time.sleep(1.2)  # a retry or two fail meanwhile
        self.assertEqual(segments(shm), [])
        os.unlink(filler)
        self.assertEqual(line(writer), "ATTACHED True")
        self.assertEqual(len(segments(shm)), 1)
        daemon = self.start_daemon(shm)

        def served():
            e = Exposition(daemon.scrape())
            return e.value("fp_requests_total", route="a") == 7 and e.value("fp_requests_total", route="b") == 2 \
                and e.value("fp_queue") == 4
        self.assertTrue(wait_until(served, 20), daemon.scrape())
        writer.stdin.close()
        writer.wait(10)
        log = writer.stderr.read()
        self.assertIn("metrics off in this process until its segment can be created", log)
        self.assertIn("segment opened after", log)

    def test_a_registration_refused_for_lack_of_room_is_logged_by_family_and_counted_by_the_daemon(self):
        shm = mount_tmpfs(self, "512k")
        script = textwrap.dedent("""
            import sys
            from rankstat import Counter, backend
            first = Counter("fp_first", "Registered while there is room.")
            first.inc(3)
            print("OPEN", flush=True)
            sys.stdin.readline()  # the test fills the tmpfs now
            many = Counter("fp_many", "One series per label value.", ["k"])
            for i in range(5000):
                many.labels(str(i)).inc()
            first.inc(4)  # the series registered earlier keeps counting
            print("REFUSED", backend.segment().refused_by_reason.get("no_space", 0), flush=True)
            sys.stdin.read()
        """)
        writer = subprocess.Popen([PYTHON, "-c", script], env=writer_env(shm), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(writer.kill)
        self.assertEqual(line(writer), "OPEN")
        fill(shm)
        writer.stdin.write("go\n")
        writer.stdin.flush()
        refused = line(writer).split()
        self.assertEqual(refused[0], "REFUSED")
        self.assertGreater(int(refused[1]), 0)
        daemon = self.start_daemon(shm)

        def counted():
            e = Exposition(daemon.scrape())
            return e.value("rankstat_series_registrations_refused_total", reason="no_space") == int(refused[1]) \
                and e.value("fp_first_total") == 7
        self.assertTrue(wait_until(counted, 20), daemon.scrape())
        writer.stdin.close()
        writer.wait(10)
        log = writer.stderr.read()
        self.assertIn("cannot register fp_many_total", log)
        self.assertIn("no_space", log)


if __name__ == "__main__":
    unittest.main()
