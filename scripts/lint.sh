#!/usr/bin/env bash
# The habits the machine enforces, every finding an error (scripts/test.sh runs this first):
#   * clang-format (the root .clang-format) on every tracked C and C++ file: none may change;
#   * pyflakes on every tracked Python file (unused imports and names, undefined names, ...);
#   * mypy on the Python package (client/python/rankstat), typed as it ships (py.typed).
#   scripts/lint.sh            all three
#   scripts/lint.sh --fix      rewrite the C/C++ files clang-format would change, then check the rest
# Tools: clang-format, python3-pyflakes and mypy from Debian (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
if [[ ${1:-} == --fix ]]; then fix=1; fi
status=0

mapfile -t native < <(git ls-files -- '*.c' '*.h' '*.cpp' '*.hpp')
if ((fix)); then
  clang-format -i "${native[@]}"
fi
if ! clang-format --dry-run --Werror "${native[@]}"; then
  echo "lint: clang-format would change the files above (scripts/lint.sh --fix rewrites them)" >&2
  status=1
fi

# Debian's interpreter: it has the tools and the package's dependencies.
python=/usr/bin/python3
[[ -x ${python} ]] || python=python3
mapfile -t py < <(git ls-files -- '*.py')
if ! "${python}" -m pyflakes "${py[@]}"; then
  echo "lint: pyflakes findings above" >&2
  status=1
fi
if ! (cd client/python && "${python}" -m mypy --no-error-summary --ignore-missing-imports --cache-dir=/dev/null rankstat); then
  echo "lint: mypy findings above (client/python/rankstat)" >&2
  status=1
fi

if ((status == 0)); then
  echo "lint: clang-format (${#native[@]} files), pyflakes (${#py[@]} files) and mypy (client/python/rankstat) clean"
fi
exit "${status}"
