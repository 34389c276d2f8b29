#!/usr/bin/env bash
# Runs clang-tidy (Debian 12: clang-tidy-14) with the repository's .clang-tidy over the first-party C++
# sources of the dev build's compile_commands.json; every finding is an error, and the script exits non-zero
# on any. Headers are checked through the translation units that include them (HeaderFilterRegex).
#   scripts/clang-tidy.sh                      shmproto/ flags/ client/ rankview/ daemon/ cli/ (what CI runs)
#   scripts/clang-tidy.sh daemon/src/foo.cpp cli/   only these files or folders
#   scripts/clang-tidy.sh --exclude REGEX ...  leave out the files whose repository path matches REGEX
# Environment: RANKSTAT_TIDY_BUILD (default build/dev; configured if it has no compile_commands.json),
# RANKSTAT_TIDY_JOBS (default: the number of cores). Tests and benchmarks are not part of the run.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${RANKSTAT_TIDY_BUILD:-build/dev}
jobs=${RANKSTAT_TIDY_JOBS:-$(nproc)}
exclude=''
paths=()
while (($#)); do
  case $1 in
    --exclude) exclude=$2; shift 2 ;;
    --exclude=*) exclude=${1#--exclude=}; shift ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) paths+=("${1%/}"); shift ;;
  esac
done
if ((${#paths[@]} == 0)); then paths=(shmproto flags client rankview daemon cli); fi

runner=$(command -v run-clang-tidy-14 || command -v run-clang-tidy || true)
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [[ -z ${runner} || -z ${tidy} ]]; then
  echo "clang-tidy.sh: clang-tidy-14 and run-clang-tidy-14 are needed (scripts/install-deps.sh)" >&2
  exit 2
fi
if [[ ! -f ${build}/compile_commands.json ]]; then
  cmake --preset dev >/dev/null
fi

# The translation units: compile_commands.json entries under the given paths (shmproto is header-only
# and is checked through them), minus --exclude.
root=$(pwd)
mapfile -t files < <(python3 - "${root}" "${build}/compile_commands.json" "${exclude}" "${paths[@]}" <<'PY'
import json, os, re, sys
root, db, exclude, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
seen = set()
for entry in json.load(open(db)):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, root)
    if rel in seen or not any(rel == p or rel.startswith(p + "/") for p in paths):
        continue
    if exclude and re.search(exclude, rel):
        continue
    seen.add(rel)
    print(rel)
PY
)
if ((${#files[@]} == 0)); then
  echo "clang-tidy.sh: no translation unit under ${paths[*]} in ${build}/compile_commands.json" >&2
  exit 2
fi
echo "clang-tidy.sh: ${#files[@]} translation units, ${jobs} jobs"

# run-clang-tidy takes regular expressions of file names: anchor each path.
regexes=()
for f in "${files[@]}"; do regexes+=("^${root}/${f//./\\.}\$"); done
# The compile commands are g++'s: clang does not know some of its warning options. run-clang-tidy-14
# always asks for colours: strip them, keep the output, then summarise each finding once (a header's
# finding is reported by every translation unit that includes it).
log=$(mktemp)
trap 'rm -f "${log}"' EXIT
status=0
"${runner}" -clang-tidy-binary "${tidy}" -p "${build}" -j "${jobs}" -quiet \
  -extra-arg=-Wno-unknown-warning-option "${regexes[@]}" 2>&1 |
  sed -e 's/\x1b\[[0-9;]*m//g' | tee "${log}" || status=$?
findings=$(grep -E '^/.*:[0-9]+:[0-9]+: (error|warning): .*\[[a-z0-9.,-]+\]$' "${log}" | sort -u || true)
if [[ -n ${findings} ]]; then
  echo "=== clang-tidy: $(wc -l <<<"${findings}") findings, per file and check:"
  sed -E -e "s|^${root}/||" -e 's/^([^:]+):.*\[([a-z0-9.-]+).*\]$/\1 \2/' <<<"${findings}" | sort | uniq -c
  status=1
elif ((status == 0)); then
  echo "=== clang-tidy: no findings"
fi
exit "${status}"
