"""Test support for Python tests that need real processes: a private shm directory, rankstatd on an
ephemeral loopback port, scrapes, exposition parsing, and children that are always killed.

Paths come from the environment CTest sets: RANKSTAT_DAEMON (rankstatd), RANKSTAT_LIBRARY, and
RANKSTAT_SOURCE_DIR (the repository)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from typing import Dict, Iterable, List, Optional, Tuple


def wait_until(condition, timeout: float, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            return value
        time.sleep(interval)


class TempDir:
    """A private directory on tmpfs when possible, removed with its content."""

    def __init__(self, prefix: str = "rankstat-py"):
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.path = tempfile.mkdtemp(prefix=prefix + "-", dir=base)

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class Child:
    """A child process in its own process group, killed (the whole group) on stop()."""

    def __init__(self, argv: List[str], env: Optional[Dict[str, str]] = None, log_path: Optional[str] = None):
        self.log_path = log_path
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        if log_path:
            out.close()

    def running(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout: float = 15.0) -> Optional[int]:
        """SIGTERM to the process, then wait; the exit status, or None if it had to be killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def log(self) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> Tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8", "replace")


class Daemon:
    """rankstatd on 127.0.0.1 with an ephemeral port, reading `shm_dir`."""

    def __init__(self, shm_dir: str, files_dir: str, extra_args: Iterable[str] = ()):
        binary = os.environ.get("RANKSTAT_DAEMON")
        if not binary:
            raise RuntimeError("RANKSTAT_DAEMON must name the rankstatd binary")
        self.address_file = os.path.join(files_dir, "rankstatd.address")
        argv = [binary, "--web.listen-address=127.0.0.1:0", f"--web.address-file={self.address_file}",
                f"--shm.dir={shm_dir}", "--shm.scan-interval=200ms", *extra_args]
        self.child = Child(argv, log_path=os.path.join(files_dir, "rankstatd.log"))
        address = wait_until(self._address, 20)
        if not address:
            self.child.kill()
            raise RuntimeError("rankstatd did not start:\n" + self.child.log())
        self.address = address

    def _address(self) -> Optional[str]:
        try:
            with open(self.address_file) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None
        return text if text.rsplit(":", 1)[-1].isdigit() and not text.endswith(":0") else None

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def scrape(self) -> str:
        status, body = http_get(f"http://127.0.0.1:{self.port}/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return body

    def stop(self) -> Optional[int]:
        return self.child.terminate()


# --- exposition parsing ------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Exposition:
    """A parsed text exposition: TYPE per family and (name, labels, value) samples."""

    def __init__(self, text: str):
        self.text = text
        self.types: Dict[str, str] = {}
        self.samples: List[Tuple[str, Dict[str, str], float]] = []
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                self.types[name] = kind
            elif line and not line.startswith("#"):
                m = _SAMPLE.match(line)
                if m:
                    labels = dict(_LABEL.findall(m.group(3) or ""))
                    self.samples.append((m.group(1), labels, float(m.group(4))))

    def family_samples(self, family: str) -> List[Tuple[str, Dict[str, str], float]]:
        kind = self.types.get(family)
        if kind in ("histogram", "summary"):
            names = {family + "_bucket", family + "_sum", family + "_count"}
        else:
            names = {family}
        return [s for s in self.samples if s[0] in names]

    def values(self, name: str, **labels: str) -> List[float]:
        return [v for n, l, v in self.samples if n == name and all(l.get(k) == x for k, x in labels.items())]

    def value(self, name: str, **labels: str) -> Optional[float]:
        found = self.values(name, **labels)
        return found[0] if len(found) == 1 else None


def promtool_findings(text: str, files_dir: str) -> Tuple[int, List[str]]:
    path = os.path.join(files_dir, "exposition.prom")
    with open(path, "w") as f:
        f.write(text)
    with open(path) as f:
        out = subprocess.run(["promtool", "check", "metrics"], stdin=f, capture_output=True, text=True, timeout=60)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return out.returncode, lines


# Lint findings promtool 2.42 raises for SGLang's own metric names and label schema (not for anything
# rankstat adds): colons in names, abbreviated units (_ms, _gb, _mb), "_total" on a gauge
# (lora_pool_slots_total), "histogram" in a histogram's name (*_tokens_histogram), and the GaugeHistogram
# shape SGLang chose for the routing-key families (gauges named *_count with an le label).
SGLANG_INHERENT_LINTS = (
    "should not contain ':'",
    "metric names should not contain abbreviated units",
    'non-counter metrics should not have "_total" suffix',
    "metric name should not include type 'histogram'",
    'non-histogram and non-summary metrics should not have "_count" suffix',
    'non-histogram metrics should not have "le" label',
)
SGLANG_INHERENT_FAMILIES = {
    'non-counter metrics should not have "_total" suffix': {"sglang:lora_pool_slots_total"},
    "metric name should not include type 'histogram'": {"sglang:prompt_tokens_histogram",
                                                        "sglang:uncached_prompt_tokens_histogram",
                                                        "sglang:generation_tokens_histogram"},
    'non-histogram and non-summary metrics should not have "_count" suffix': {
        "sglang:routing_key_running_req_count", "sglang:routing_key_all_req_count"},
    'non-histogram metrics should not have "le" label': {"sglang:routing_key_running_req_count",
                                                          "sglang:routing_key_all_req_count"},
}


def unexpected_lints(lines: List[str]) -> List[str]:
    """promtool findings that are not inherent to SGLang's names (those must not exist)."""
    bad = []
    for line in lines:
        name = line.split(" ", 1)[0]
        matched = None
        for lint in SGLANG_INHERENT_LINTS:
            if lint in line:
                matched = lint
                break
        if matched is None or not name.startswith("sglang:"):
            bad.append(line)
            continue
        allowed = SGLANG_INHERENT_FAMILIES.get(matched)
        if allowed is not None and name not in allowed:
            bad.append(line)
    return bad
