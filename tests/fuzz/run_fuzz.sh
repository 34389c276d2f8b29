#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time and records how many inputs it executed.
#   run_fuzz.sh <fuzzer> <seed dir> <grown corpus dir> <seconds> <summary file> [libFuzzer flags...]
# New interesting inputs go to the grown corpus (in the build tree), never to the seeds. A crash, a
# sanitizer report or a leak fails the run; the reproducer is left in the build tree (crash-*, leak-*).
set -euo pipefail
fuzzer=$1 seeds=$2 grown=$3 seconds=$4 summary=$5
shift 5
mkdir -p "${grown}"
log=$(mktemp)
trap 'rm -f "${log}"' EXIT
status=0
(cd "$(dirname "${summary}")" &&
  "${fuzzer}" -max_total_time="${seconds}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$@" \
    "${grown}" "${seeds}") >"${log}" 2>&1 || status=$?
tail -n 25 "${log}"
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -n 1)
name=$(basename "${fuzzer}")
echo "fuzz ${name}: ${execs:-?} execs in ${seconds} s, corpus $(find "${grown}" -type f | wc -l) grown + $(find "${seeds}" -type f | wc -l) seeds, exit ${status}" | tee -a "${summary}"
exit "${status}"
