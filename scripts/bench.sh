#!/usr/bin/env bash
# rankstat side by side with Python prometheus_client multiprocess mode: installs dependencies (first run
# only), builds the release preset's daemon and benchmarks, runs every benchmark one after the other and
# prints one table with ratios (docs/performance.md explains every row).
#   scripts/bench.sh                  full run (a few minutes)
#   scripts/bench.sh --quick          tiny sizes: a smoke run of every part (what CI runs, in seconds)
#   scripts/bench.sh --json FILE      also write every raw figure to FILE
# Extra arguments go to bench/run_bench.py. Builds with at most 2 jobs (the build machines are shared).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh >&2

# rankstat: librankstat.so and the C extension, which the Python benchmark (bench/bench_python_calls.py) loads.
targets=(rankstatd rankstat rankstat_fastpath rankstat_bench_append rankstat_bench_writer rankstat_bench_scrape rankstat_bench_render
         rankstat_bench_ingest)
echo "=== release: configure and build ${targets[*]}" >&2
cmake --preset release >/dev/null
cmake --build build/release -j2 --target "${targets[@]}" >&2

# Debian's python3 carries python3-prometheus-client (the anchor); prefer it over another python3 on PATH.
python=/usr/bin/python3
[[ -x ${python} ]] || python=python3
exec "${python}" bench/run_bench.py --build build/release "$@"
