#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian 12 machine: installs dependencies, then builds and tests
# the dev, asan-ubsan and tsan presets, and smoke-runs the benchmarks.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh dev        one preset only (dev, asan-ubsan, tsan or release)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

presets=("$@")
if ((${#presets[@]} == 0)); then presets=(dev asan-ubsan tsan); fi

# ThreadSanitizer in gcc 12 cannot map its shadow memory with the 32-bit mmap randomisation of recent
# kernels; run its tests without address-space randomisation when that is the case.
tsan_prefix=()
if [[ -r /proc/sys/vm/mmap_rnd_bits ]] && (($(cat /proc/sys/vm/mmap_rnd_bits) > 28)); then
  tsan_prefix=(setarch "$(uname -m)" -R)
fi

for preset in "${presets[@]}"; do
  echo "=== ${preset}: configure and build"
  cmake --preset "${preset}" >/dev/null
  cmake --build --preset "${preset}"
  echo "=== ${preset}: test"
  if [[ ${preset} == tsan ]]; then
    "${tsan_prefix[@]}" ctest --preset "${preset}"
  else
    ctest --preset "${preset}"
  fi
  if [[ ${preset} == dev ]]; then
    echo "=== ${preset}: benchmark smoke run (tiny sizes; figures come from scripts/bench.sh)"
    build/dev/bench/rankstat_bench_append --benchmark_min_time=0.01 >/dev/null
  fi
done
echo "=== all presets passed: ${presets[*]}"
