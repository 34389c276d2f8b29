"""What bench/run_bench.py and the benchmarks it runs share: statistics, a command's JSON answer, and
rankstatd on an ephemeral loopback port. A module of its own so that a benchmark script can use it
without importing run_bench.py (which imports the scripts' table rows). Standard library only."""

import glob
import json
import os
import signal
import statistics
import subprocess
import time
import urllib.request


def median(values):
    return statistics.median(values) if values else float("nan")


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def run_json(argv, timeout, env=None):
    """Runs a command that prints one JSON object (its last line of stdout) and returns it."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])


class Daemon:
    """rankstatd on an ephemeral loopback port, reading a private shm directory."""

    def __init__(self, build, shm_dir, extra=()):
        self.address_file = os.path.join(shm_dir, "..", os.path.basename(shm_dir) + ".address")
        self.address_file = os.path.abspath(self.address_file)
        if os.path.exists(self.address_file):
            os.unlink(self.address_file)
        self.log_path = self.address_file + ".log"
        self.log_file = open(self.log_path, "w")
        argv = [os.path.join(build, "daemon", "rankstatd"), f"--shm.dir={shm_dir}", "--web.listen-address=127.0.0.1:0",
                f"--web.address-file={self.address_file}", "--log.level=warn", *extra]
        self.process = subprocess.Popen(argv, stdout=self.log_file, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while not os.path.exists(self.address_file):
            if self.process.poll() is not None or time.time() > deadline:
                raise RuntimeError("rankstatd did not start: " + open(self.log_path).read()[-2000:])
            time.sleep(0.02)
        with open(self.address_file) as f:
            self.address = f.read().strip()

    def ranks(self):
        with urllib.request.urlopen(f"http://{self.address}/api/v1/ranks", timeout=10) as response:
            data = json.load(response)
        ranks = data.get("ranks", data) if isinstance(data, dict) else data
        return len(ranks)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        for path in (self.address_file, self.log_path):
            if os.path.exists(path):
                os.unlink(path)


def wait_for_ranks(daemon, expected, timeout=30):
    deadline = time.time() + timeout
    seen = 0
    while time.time() < deadline:
        seen = daemon.ranks()
        if seen >= expected:
            return
        time.sleep(0.1)
    raise RuntimeError(f"rankstatd sees {seen} of {expected} ranks")


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def fmt(value, digits=3):
    if value is None or value != value:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def rankstat_env(build, package_root=None):
    """Environment for a rankstat subprocess: the build's librankstat.so and CPython extension (each only
    if built), no prometheus_client multiprocess directory, and, with `package_root`, that tree's Python
    package first on PYTHONPATH."""
    env = dict(os.environ)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if package_root:
        env["PYTHONPATH"] = os.path.join(package_root, "client", "python") + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if build:
        library = os.path.join(build, "client", "librankstat.so")
        if os.path.exists(library):
            env["RANKSTAT_LIBRARY"] = library
        found = sorted(glob.glob(os.path.join(build, "client", "pyext", "rankstat", "_fastpath*.so")))
        if found:
            env["RANKSTAT_FASTPATH"] = found[0]
    return env
