#!/usr/bin/env python3
"""Offline checks of the kustomize base in deploy/kubernetes (run by test_fleet.cpp): every file parses,
the sidecar shares what the daemon needs with the engine, the PrometheusRule holds exactly the rule
files' groups and they pass `promtool check rules`, and `kubectl kustomize` builds the base when kubectl
is installed. Prints one line per failed check and exits 1 if any failed."""
import pathlib
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "kubernetes"
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


docs = {}
for path in sorted(BASE.glob("*.yaml")):
    try:
        docs[path.name] = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        failures.append(f"{path.name} does not parse: {error}")

kustomization = docs.get("kustomization.yaml", {})
for resource in kustomization.get("resources", []):
    check(resource in docs, f"kustomization lists {resource}, which is missing")

deployment = docs.get("engine-deployment.yaml", {})
pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
check(pod.get("shareProcessNamespace") is True, "shareProcessNamespace is not true: liveness would see no engine pid")
volumes = {v["name"]: v for v in pod.get("volumes", [])}
containers = {c["name"]: c for c in pod.get("containers", [])}
check({"engine", "rankstatd"} <= set(containers), "the pod lacks an engine or a rankstatd container")
segments = [n for n, v in volumes.items() if v.get("emptyDir", {}).get("medium") == "Memory"]
check(len(segments) == 1, "no single emptyDir with medium: Memory for the segments")
if segments and {"engine", "rankstatd"} <= set(containers):
    mounts = {
        name: [m["mountPath"] for m in containers[name].get("volumeMounts", []) if m["name"] == segments[0]]
        for name in ("engine", "rankstatd")
    }
    check(mounts["engine"] and mounts["engine"] == mounts["rankstatd"],
          f"the segment volume is not mounted at one path in both containers: {mounts}")
    engine_env = {e["name"]: e.get("value") for e in containers["engine"].get("env", [])}
    check(mounts["engine"] and engine_env.get("RANKSTAT_SHM_DIR") == mounts["engine"][0],
          "the engine's RANKSTAT_SHM_DIR is not the segment mount")
    daemon = containers["rankstatd"]
    check(mounts["rankstatd"] and f"--shm.dir={mounts['rankstatd'][0]}" in daemon.get("args", []),
          "rankstatd's --shm.dir is not the segment mount")
    check(daemon.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz", "no /healthz liveness probe")
    check(daemon.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz", "no /readyz readiness probe")
    check("requests" in daemon.get("resources", {}), "rankstatd has no resource requests")
    security = daemon.get("securityContext", {})
    check(security.get("runAsNonRoot") is True, "rankstatd may run as root")
    check(security.get("readOnlyRootFilesystem") is True, "rankstatd's root filesystem is writable")
    env = {e["name"]: e for e in daemon.get("env", [])}
    check("fieldRef" in env.get("RANKSTAT_LABEL_NODE", {}).get("valueFrom", {}),
          "the node label does not come from the downward API")
    for name, entry in env.items():
        if name.startswith("RANKSTAT_LABEL_"):
            label = name[len("RANKSTAT_LABEL_"):].lower()
            check(label not in ("pod", "namespace", "job", "instance"),
                  f"{name}: the PodMonitor or Prometheus sets `{label}` already")

monitor = docs.get("podmonitor.yaml", {})
check(monitor.get("kind") == "PodMonitor", "podmonitor.yaml is not a PodMonitor")
endpoints = monitor.get("spec", {}).get("podMetricsEndpoints", [])
check(any(e.get("port") == "metrics" and "interval" in e and "scrapeTimeout" in e for e in endpoints),
      "the PodMonitor does not scrape the metrics port with an interval and a timeout")

rule = docs.get("prometheusrule.yaml", {})
check(rule.get("kind") == "PrometheusRule", "prometheusrule.yaml is not a PrometheusRule")
generated = subprocess.run([sys.executable, str(BASE / "prometheusrule.py"), "--check"], capture_output=True, text=True)
check(generated.returncode == 0, f"PrometheusRule differs from the rule files: {generated.stderr.strip()}")
with tempfile.TemporaryDirectory(prefix="rankstat-k8s-") as scratch:
    rules_file = pathlib.Path(scratch) / "groups.yml"
    rules_file.write_text(yaml.safe_dump({"groups": rule.get("spec", {}).get("groups", [])}))
    promtool = subprocess.run(["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True)
    check(promtool.returncode == 0, f"promtool refuses the PrometheusRule's groups: {promtool.stdout}{promtool.stderr}")

kubectl = shutil.which("kubectl")
if kubectl:
    built = subprocess.run([kubectl, "kustomize", str(BASE)], capture_output=True, text=True, timeout=60)
    check(built.returncode == 0, f"kubectl kustomize fails: {built.stderr.strip()}")
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(built.stdout) if d)
    check(kinds == ["Deployment", "PodMonitor", "PrometheusRule"], f"kustomize built {kinds}")
else:
    print("kubectl not installed: `kubectl kustomize` not run")

for failure in failures:
    print("FAILED:", failure)
print("OK" if not failures else f"{len(failures)} checks failed")
sys.exit(1 if failures else 0)
