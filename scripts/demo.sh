#!/usr/bin/env bash
# One command for a newcomer: installs dependencies, builds (release) the daemon, the `rankstat` CLI and
# the example engine, then runs rankstatd next to the example engine (simulated SGLang scheduler ranks)
# until Ctrl-C. Its last lines say what to run in another terminal (`rankstat top`, curl /metrics).
# Environment: RANKSTAT_PORT (default 9473), DEMO_DP (data-parallel ranks, default 4), DEMO_TP (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

port="${RANKSTAT_PORT:-9473}"
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target rankstatd rankstat_cli rankstat_example_engine

shm_dir="${RANKSTAT_SHM_DIR:-/dev/shm}"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The example engine's segments: remove them so a later run starts clean.
  rm -f "${shm_dir}"/rankstat.demo.* 2>/dev/null || true
}
trap cleanup EXIT INT TERM

build/release/deploy/rankstat-example-engine --instance demo --shm-dir "${shm_dir}" \
  --dp "${DEMO_DP:-4}" --tp "${DEMO_TP:-1}" &
pids+=($!)
build/release/daemon/rankstatd --web.listen-address ":${port}" --shm.dir "${shm_dir}" &
pids+=($!)

for _ in $(seq 1 50); do
  if curl -sf "http://127.0.0.1:${port}/readyz" >/dev/null; then break; fi
  sleep 0.2
done
sleep 1
echo
curl -s "http://127.0.0.1:${port}/metrics" | grep -E '^sglang:(num_running_reqs|token_usage)\{' | head -8 || true
echo
echo "rankstatd is serving http://localhost:${port}/metrics (JSON: /api/v1/ranks). In another terminal:"
echo "  build/release/cli/rankstat --address 127.0.0.1:${port} top      # live per-rank view (q quits)"
echo "  build/release/cli/rankstat --address 127.0.0.1:${port} ranks    # every segment, one line each"
echo "  curl -s http://localhost:${port}/metrics | grep '^sglang:'"
echo "Ctrl-C stops the demo."
wait -n "${pids[@]}"
