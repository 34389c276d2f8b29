#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian 12 machine: installs dependencies, checks formatting and
# lints (scripts/lint.sh), then builds and tests
# the dev, asan-ubsan and tsan presets (after dev's tests, clang-tidy: scripts/clang-tidy.sh), smoke-runs
# the benchmarks, checks the install and the Debian package (scripts/check-package.sh), and fuzzes the
# shared-memory parsers for a bounded time (the fuzz preset of tests/fuzz, clang + libFuzzer;
# docs/testing.md).
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh dev        one preset only (dev, asan-ubsan, tsan, release or fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
# Formatting, Python lint and type check first: they take seconds and fail on any finding.
echo "=== lint: clang-format, pyflakes, mypy (scripts/lint.sh)"
bash scripts/lint.sh

presets=("$@")
if ((${#presets[@]} == 0)); then presets=(dev asan-ubsan tsan fuzz); fi

# ThreadSanitizer in gcc 12 cannot map its shadow memory with the 32-bit mmap randomisation of recent
# kernels; run its tests without address-space randomisation when that is the case.
tsan_prefix=()
if [[ -r /proc/sys/vm/mmap_rnd_bits ]] && (($(cat /proc/sys/vm/mmap_rnd_bits) > 28)); then
  tsan_prefix=(setarch "$(uname -m)" -R)
fi

for preset in "${presets[@]}"; do
  if [[ ${preset} == fuzz ]]; then
    # A project of its own (clang); each target runs RANKSTAT_FUZZ_SECONDS (15 s) under ctest.
    echo "=== fuzz: configure, build and run each target for a bounded time"
    rm -f build/fuzz/fuzz-summary.txt
    (cd tests/fuzz && cmake --preset fuzz >/dev/null && cmake --build --preset fuzz && ctest --preset fuzz)
    cat build/fuzz/fuzz-summary.txt
    continue
  fi
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
    # Static analysis over the first-party sources with the dev build's compile commands: every
    # clang-tidy finding fails the suite (.clang-tidy, scripts/clang-tidy.sh; a few minutes on 2 cores).
    echo "=== dev: clang-tidy (scripts/clang-tidy.sh)"
    RANKSTAT_TIDY_BUILD=build/dev bash scripts/clang-tidy.sh
    # The optimised build is what the demo, `cmake --install` and the benchmarks use, and -O3 raises
    # warnings -O0 does not: build its programs (not its tests) and smoke-run the benchmarks with them.
    echo "=== release: configure and build the programs and benchmarks"
    cmake --preset release >/dev/null
    cmake --build build/release -j2 --target rankstatd rankstat_cli rankstat rankstat_fastpath rankstat_example_engine \
      rankstat_bench_append rankstat_bench_writer rankstat_bench_scrape rankstat_bench_render rankstat_bench_ingest
    echo "=== release: benchmark smoke run (tiny sizes; figures come from scripts/bench.sh)"
    build/release/bench/rankstat_bench_append --benchmark_min_time=0.01 >/dev/null
    python=/usr/bin/python3
    [[ -x ${python} ]] || python=python3
    "${python}" bench/run_bench.py --build build/release --quick >/dev/null
    echo "=== release: the installed tree and the Debian package (scripts/check-package.sh)"
    bash scripts/check-package.sh build/release
  fi
done
echo "=== all presets passed: ${presets[*]}"
