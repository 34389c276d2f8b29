#!/usr/bin/env bash
# Checks rankstat as it is installed, not as it is built (scripts/test.sh runs it after the release build):
#   1. `cmake --install --prefix DIR` (and with DESTDIR) writes nothing outside DIR;
#   2. a tiny engine outside the tree (tests/package/outside_engine) builds against that prefix with
#      find_package(rankstat CONFIG) and with pkg-config, and the installed daemon serves what it writes,
#      next to the example engine and the installed Python package;
#   3. as root with dpkg: `cpack -G DEB` builds the package, `dpkg -i` installs it, the installed daemon
#      (/usr/bin/rankstatd, started directly: CI may have no systemd) serves the example engine, the
#      outside engine built against /usr and Python's rankstat; `dpkg -r` leaves only the conffile and
#      `dpkg --purge` nothing. The users the package created are removed again.
# Without root or dpkg (or with RANKSTAT_CHECK_DPKG=0) step 3 is skipped, with a message.
#   scripts/check-package.sh [BUILD_DIR]      default build/release (configured by the release preset)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
build=${1:-build/release}
[[ -f ${build}/CMakeCache.txt ]] || { echo "check-package: ${build} is not a configured build tree" >&2; exit 2; }
build=$(cd "${build}" && pwd)

started=${SECONDS}
step() { printf '=== package: %s [%ds]\n' "$*" $((SECONDS - started)); }
fail() {
  echo "check-package: FAIL: $*" >&2
  exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/rankstat-package.XXXXXX")
# Segments in a private directory of the tmpfs (the daemon and engines are told it explicitly).
if [[ -d /dev/shm && -w /dev/shm ]]; then shm_root=/dev/shm; else shm_root=${work}; fi
shm=""
pids=()
package_installed=0 # 1 while this run has the package installed (the trap removes it)
created_user=0 created_group=0

stop_processes() {
  local pid
  for pid in "${pids[@]}"; do kill "${pid}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
  pids=()
}
remove_users() {
  # The package leaves its system users on purge (Debian's rule); this run created them, so it removes them.
  if ((created_user)) && getent passwd rankstatd >/dev/null; then userdel rankstatd; fi
  if ((created_group)) && getent group rankstat >/dev/null; then groupdel rankstat; fi
  created_user=0 created_group=0
}
cleanup() {
  local status=$?
  stop_processes
  if ((package_installed)); then
    echo "check-package: purging the package this run installed" >&2
    dpkg --purge rankstat >/dev/null 2>&1 || true
  fi
  remove_users
  [[ -n ${shm} ]] && rm -rf "${shm}"
  rm -rf "${work}"
  exit "${status}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Debian's python3: the one the package installs for and the extension is built for (client/pyext).
python=/usr/bin/python3
[[ -x ${python} ]] || python=python3
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export CMAKE_BUILD_PARALLEL_LEVEL=${jobs}

# wait_for SECONDS COMMAND...: retries COMMAND every 0.2 s until it succeeds or time is up.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# scrape_has PATTERN: the last scrape has a line matching the extended regular expression.
scrape_has() { grep -Eq "$1" "${work}/metrics.txt"; }
scrape() { curl -sf --max-time 5 "http://${address}/metrics" -o "${work}/metrics.txt"; }
scrape_has_all() {
  scrape || return 1
  local pattern
  for pattern in "${expected[@]}"; do scrape_has "${pattern}" || return 1; done
}

# serve_and_scrape NAME DAEMON OUTSIDE_BUILD PKGCONFIG_ENGINE [ENV=VALUE...]: runs DAEMON on a private
# segment directory and a loopback ephemeral port, the example engine, the outside engines and a Python
# process (its environment: the ENV=VALUE arguments) against it, and checks that one scrape holds the
# data of every one of them.
serve_and_scrape() {
  local name=$1 daemon=$2 outside=$3 pc_engine=$4
  shift 4
  shm=$(mktemp -d "${shm_root}/rankstat-package.XXXXXX")
  local log=${work}/rankstatd-${name}.log
  rm -f "${work}/address"
  "${daemon}" --web.listen-address=127.0.0.1:0 --web.address-file="${work}/address" --shm.dir="${shm}" \
    --label.instance=instance_id --log.level=info >"${log}" 2>&1 &
  pids+=($!)
  wait_for 15 test -s "${work}/address" || fail "${name}: ${daemon} wrote no address file; log:
$(cat "${log}")"
  address=$(cat "${work}/address")
  address=${address/#0.0.0.0:/127.0.0.1:}

  "${build}/deploy/rankstat-example-engine" --shm-dir "${shm}" --instance pkg-example --tp 2 --dp 2 \
    --duration 60 >"${work}/example-engine.log" 2>&1 &
  pids+=($!)
  "${outside}/outside_engine_cpp" "${shm}" 60 >"${work}/outside-cpp.log" 2>&1 &
  pids+=($!)
  "${outside}/outside_engine_c" "${shm}" 60 outside-c >"${work}/outside-c.log" 2>&1 &
  pids+=($!)
  "${pc_engine}" "${shm}" 60 outside-pc >"${work}/outside-pc.log" 2>&1 &
  pids+=($!)
  # Byte-compiling allowed, as on a user's machine: the package's prerm must remove what Python writes.
  (cd "${work}" && env -u PYTHONDONTWRITEBYTECODE RANKSTAT_SHM_DIR="${shm}" RANKSTAT_INSTANCE=outside-py "$@" "${python}" -c '
import sys, time
from importlib.metadata import entry_points
import rankstat, rankstat._accel as accel
if not [e for e in entry_points(group="vllm.stat_logger_plugins") if e.value == "rankstat.vllm:VllmStatLoggerPlugin"]:
    sys.exit("no vllm.stat_logger_plugins entry point for rankstat")
from importlib.metadata import version
if not (rankstat.__version__ == version("rankstat") != "0+unknown"):
    sys.exit("rankstat.__version__ %s and its distribution metadata %s disagree" % (rankstat.__version__, version("rankstat")))
requests = rankstat.Counter("outside_python_requests", "Requests", ["lang"])
requests.labels(lang="python").inc(3)
print(rankstat.__file__, "loaded", rankstat.library_path(), "and", accel.FASTPATH_PATH if accel.FAST else "no fastpath: %s" % accel.FASTPATH_ERROR)
sys.stdout.flush()
time.sleep(60)
' >"${work}/python.log" 2>&1) &
  pids+=($!)

  expected=(
    '^sglang:num_running_reqs\{[^}]*instance_id="pkg-example"'
    '^sglang:num_running_reqs\{[^}]*instance_id="outside"[^}]*\} 7(\.0)?$'
    '^outside_engine_requests_total\{[^}]*lang="cpp"[^}]*\} 42(\.0)?$'
    '^outside_engine_requests_total\{[^}]*instance_id="outside-c"[^}]*\} 5(\.0)?$'
    '^outside_engine_requests_total\{[^}]*instance_id="outside-pc"[^}]*\} 5(\.0)?$'
    '^outside_python_requests_total\{[^}]*lang="python"[^}]*\} 3(\.0)?$'
  )
  if ! wait_for 20 scrape_has_all; then
    local pattern
    for pattern in "${expected[@]}"; do scrape_has "${pattern}" || echo "missing: ${pattern}" >&2; done
    fail "${name}: the scrape of ${daemon} lacks engine data; python: $(cat "${work}/python.log"); daemon log:
$(tail -20 "${log}")"
  fi
  echo "${name}: ${daemon} at ${address} serves the example engine, the outside engines (CMake, pkg-config) and Python"
  echo "${name}: python: $(cat "${work}/python.log")"
  stop_processes
  rm -rf "${shm}"
  shm=""
}

# build_outside NAME BUILD_DIR [CMAKE_ARGS...]: the outside engine through find_package(rankstat CONFIG).
build_outside() {
  local name=$1 dir=$2
  shift 2
  # It asks for this release's major.minor (VERSION), as an engine pinned to it would.
  cmake -S "${repo}/tests/package/outside_engine" -B "${dir}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DRANKSTAT_WANTED_VERSION="$(cut -d. -f1,2 "${repo}/VERSION")" "$@" \
    >"${work}/outside-${name}-configure.log" 2>&1 ||
    fail "${name}: find_package(rankstat CONFIG) failed: $(cat "${work}/outside-${name}-configure.log")"
  timeout 300 cmake --build "${dir}" >"${work}/outside-${name}-build.log" 2>&1 ||
    fail "${name}: building the outside engine failed: $(cat "${work}/outside-${name}-build.log")"
}

# build_pkgconfig OUTPUT: engine.c with nothing but `pkg-config --cflags --libs rankstat`.
build_pkgconfig() {
  local flags
  flags=$(pkg-config --cflags --libs rankstat) || fail "pkg-config does not find rankstat"
  # shellcheck disable=SC2086 # the flags are words
  cc -std=c11 -Wall -Wextra -Werror -o "$1" "${repo}/tests/package/outside_engine/engine.c" ${flags} ||
    fail "engine.c does not build with: ${flags}"
}

step "build the installed targets (${build})"
timeout 1800 cmake --build "${build}" --target rankstatd rankstat_cli rankstat rankstat_client rankstat_fastpath \
  rankstat_example_engine >"${work}/build.log" 2>&1 || fail "build failed: $(tail -30 "${work}/build.log")"

step "cmake --install --prefix DIR writes nothing outside DIR"
stage=${work}/stage
DESTDIR=${stage} cmake --install "${build}" --prefix /opt/rankstat-check >"${work}/install-stage.log" 2>&1 ||
  fail "cmake --install with DESTDIR failed: $(cat "${work}/install-stage.log")"
outside_prefix=$(cd "${stage}" && find . -mindepth 1 \( -type f -o -type l \) ! -path './opt/rankstat-check/*')
[[ -z ${outside_prefix} ]] || fail "installed outside the prefix: ${outside_prefix}"
prefix=${work}/prefix
cmake --install "${build}" --prefix "${prefix}" >"${work}/install.log" 2>&1 ||
  fail "cmake --install --prefix failed: $(cat "${work}/install.log")"
outside_prefix=$(grep -v "^${prefix}/" "${build}/install_manifest.txt" || true)
[[ -z ${outside_prefix} ]] || fail "installed outside the prefix: ${outside_prefix}"
for file in bin/rankstatd bin/rankstat etc/default/rankstatd lib/systemd/system/rankstatd.service \
  lib/systemd/system/rankstatd.socket lib/sysusers.d/rankstatd.conf lib/tmpfiles.d/rankstatd.conf include/rankstat/reporter.hpp \
  include/rankstat/rankstat.h include/rankstat/shmproto/segment.hpp share/doc/rankstat/operations.md \
  lib/python3/dist-packages/rankstat/__init__.py lib/python3/dist-packages/rankstat-autoload.pth; do
  [[ -e ${prefix}/${file} ]] || fail "cmake --install --prefix did not install ${file}"
done
libdir=$(dirname "$(find "${prefix}" -name 'librankstat.so.0' | head -1)")
[[ -f ${libdir}/pkgconfig/rankstat.pc && -f ${libdir}/cmake/rankstat/rankstatConfig.cmake ]] ||
  fail "no rankstat.pc or rankstatConfig.cmake next to librankstat.so in ${libdir}"
compgen -G "${prefix}/lib/python3/dist-packages/rankstat/_fastpath*.so" >/dev/null ||
  fail "the Python extension rankstat._fastpath is not installed"
echo "prefix: $(wc -l <"${build}/install_manifest.txt") files, all under the prefix; with DESTDIR, all under DESTDIR/prefix"

step "outside engine against the prefix: find_package and pkg-config"
build_outside prefix "${work}/outside-prefix" -DCMAKE_PREFIX_PATH="${prefix}"
PKG_CONFIG_PATH=${libdir}/pkgconfig build_pkgconfig "${work}/outside-pc-prefix"
echo "built: find_package(rankstat ${prefix}) and pkg-config $(PKG_CONFIG_PATH=${libdir}/pkgconfig pkg-config --modversion rankstat)"

step "installed daemon from the prefix serves the engines"
LD_LIBRARY_PATH=${libdir} serve_and_scrape prefix "${prefix}/bin/rankstatd" "${work}/outside-prefix" \
  "${work}/outside-pc-prefix" PYTHONPATH="${prefix}/lib/python3/dist-packages" LD_LIBRARY_PATH="${libdir}"

skip=""
if [[ ${RANKSTAT_CHECK_DPKG:-1} == 0 ]]; then
  skip="RANKSTAT_CHECK_DPKG=0 is set"
elif [[ $(id -u) -ne 0 ]]; then
  skip="not running as root"
elif ! command -v dpkg >/dev/null || ! command -v dpkg-shlibdeps >/dev/null; then
  skip="no dpkg or dpkg-shlibdeps (package dpkg-dev) on this machine"
fi
if [[ -n ${skip} ]]; then
  echo "check-package: SKIPPED the Debian package (cpack, dpkg -i, the daemon from /usr/bin, dpkg -r): ${skip}"
  step "passed (prefix install only)"
  exit 0
fi

step "cpack -G DEB"
rm -rf "${build}/_CPack_Packages" "${build}"/rankstat_*.deb
(cd "${build}" && timeout 600 cpack -G DEB) >"${work}/cpack.log" 2>&1 || fail "cpack failed: $(tail -30 "${work}/cpack.log")"
deb=$(find "${build}" -maxdepth 1 -name "rankstat_*.deb" -print -quit)
[[ -n ${deb} ]] || fail "cpack made no rankstat_*.deb: $(tail -30 "${work}/cpack.log")"
echo "${deb##*/}: $(du -k "${deb}" | cut -f1) KiB, Depends: $(dpkg-deb -f "${deb}" Depends)"
dpkg-deb -c "${deb}" >"${work}/contents.txt"
grep -q '\./usr/lib/python3/dist-packages/rankstat/_fastpath' "${work}/contents.txt" ||
  fail "the package holds no rankstat._fastpath"
[[ $(dpkg-deb --ctrl-tarfile "${deb}" | tar -xO ./conffiles) == /etc/default/rankstatd ]] ||
  fail "the package's conffiles are not exactly /etc/default/rankstatd"

step "dpkg -i"
if dpkg-query -W -f='${Status}' rankstat 2>/dev/null | grep -qv 'not-installed'; then
  echo "check-package: rankstat is installed already (an interrupted earlier run?): purging it first;" \
    "its users rankstatd and rankstat are removed at the end"
  dpkg --purge rankstat >/dev/null
  created_user=1 created_group=1
else
  getent passwd rankstatd >/dev/null || created_user=1
  getent group rankstat >/dev/null || created_group=1
fi
package_installed=1
dpkg -i "${deb}" >"${work}/dpkg-i.log" 2>&1 || fail "dpkg -i failed: $(cat "${work}/dpkg-i.log")"
dpkg -L rankstat >"${work}/files.txt"
version=$(/usr/bin/rankstatd --version)
[[ ${version} == "rankstatd $(dpkg-query -W -f='${Version}' rankstat)" ]] || fail "rankstatd --version says '${version}'"
/usr/bin/rankstat --version >/dev/null || fail "rankstat --version failed"
if ! getent passwd rankstatd >/dev/null || ! getent group rankstat >/dev/null; then fail "postinst created no users"; fi
[[ -f /etc/default/rankstatd && -f /usr/lib/systemd/system/rankstatd.service ]] || fail "no unit or default file"
[[ $(ldconfig -p) == *"librankstat.so.0 "* ]] || fail "librankstat.so.0 is not in the loader cache"
echo "installed: ${version}, $(wc -l <"${work}/files.txt") paths, users rankstatd:rankstat"

# The start-up file is live in Debian's python3: the variable installs rankstat, no variable imports nothing.
autoload=$(RANKSTAT_SGLANG=1 /usr/bin/python3 -c "import sys; print('rankstat._autoload' in sys.modules)")
[[ ${autoload} == True ]] || fail "RANKSTAT_SGLANG=1 did not install rankstat through rankstat-autoload.pth (${autoload})"
autoload=$(env -u RANKSTAT_SGLANG -u RANKSTAT_VLLM /usr/bin/python3 -c "import sys; print('rankstat' in sys.modules)")
[[ ${autoload} == False ]] || fail "rankstat-autoload.pth imported rankstat with neither variable set"
echo "rankstat-autoload.pth: RANKSTAT_SGLANG=1 installs rankstat at start; unset, nothing is imported"

step "dpkg -i again (an upgrade) keeps an edited /etc/default/rankstatd"
echo 'ARGS="--log.level=debug"  # check-package' >>/etc/default/rankstatd
dpkg -i "${deb}" >"${work}/dpkg-i-again.log" 2>&1 || fail "dpkg -i over itself failed: $(cat "${work}/dpkg-i-again.log")"
grep -q '# check-package$' /etc/default/rankstatd || fail "reinstalling replaced the edited /etc/default/rankstatd"

step "outside engine against /usr: find_package and pkg-config"
build_outside usr "${work}/outside-usr"
build_pkgconfig "${work}/outside-pc-usr"

step "the daemon from /usr/bin serves the engines"
serve_and_scrape usr /usr/bin/rankstatd "${work}/outside-usr" "${work}/outside-pc-usr"

# owned_by_others PATH: a package other than rankstat has PATH (dpkg -S: "pkg1, pkg2:arch: PATH"). dpkg
# keeps a directory it could not remove in rankstat's list, so rankstat alone does not count.
owned_by_others() {
  dpkg -S "$1" 2>/dev/null | sed -n 's|: /.*||p' | tr ',' '\n' | sed 's/^ *//; s/:.*//' | grep -vx rankstat >/dev/null
}
pycache=$(find /usr/lib/python3/dist-packages/rankstat -name '*.pyc' | wc -l)
step "dpkg -r leaves only the conffile, dpkg --purge nothing"
dpkg -r rankstat >"${work}/dpkg-r.log" 2>&1 || fail "dpkg -r failed: $(cat "${work}/dpkg-r.log")"
left=()
while read -r path; do
  [[ ${path} == /etc/default/rankstatd || ${path} == /. ]] && continue
  [[ -e ${path} || -L ${path} ]] || continue
  # A directory may stay when another package has it too (/usr/bin, ...); one of the package's own that
  # stays holds files dpkg does not know (e.g. Python's __pycache__, which prerm removes).
  if [[ -d ${path} && ! -L ${path} ]] && owned_by_others "${path}"; then continue; fi
  left+=("${path}")
done <"${work}/files.txt"
((${#left[@]} == 0)) || fail "dpkg -r left: ${left[*]} ($(find "${left[@]}" -maxdepth 2 | head -20 | tr '\n' ' '))"
[[ -f /etc/default/rankstatd ]] || fail "dpkg -r removed the conffile /etc/default/rankstatd"
dpkg --purge rankstat >"${work}/dpkg-purge.log" 2>&1 || fail "dpkg --purge failed: $(cat "${work}/dpkg-purge.log")"
package_installed=0
[[ ! -e /etc/default/rankstatd && ! -e /var/lib/rankstatd && ! -e /dev/shm/rankstat ]] ||
  fail "dpkg --purge left /etc/default/rankstatd, /var/lib/rankstatd or /dev/shm/rankstat"
dpkg-query -W rankstat >/dev/null 2>&1 && fail "dpkg still knows rankstat after --purge"
remove_users
echo "removed: every file of dpkg -L gone after dpkg -r but the conffile (and the ${pycache} .pyc files" \
  "Python wrote); after --purge, that too"
step "passed"
