#!/usr/bin/env bash
# Installs everything rankstat needs to build, test and benchmark on Debian 12 (bookworm).
# Idempotent: re-running it on a prepared machine only checks that the packages are present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  # Four presets compile the same sources; ccache makes a rebuild in a fresh clone mostly cache hits.
  ccache
  clang-format clang-tidy
  # scripts/lint.sh: the Python linter and type checker.
  python3-pyflakes mypy
  # libboost1.81-dev conflicts with the default 1.74 packages: name the 1.81 ones explicitly.
  libboost1.81-dev libboost-json1.81-dev
  prometheus-cpp-dev libspdlog-dev libfmt-dev catch2 libcli11-dev
  libsystemd-dev zlib1g-dev
  # --web.config.file: TLS (OpenSSL), the YAML parser, bcrypt (libxcrypt); htpasswd makes bcrypt
  # hashes in the tests and docs, openssl their certificates, curl checks every client_auth_type.
  libssl-dev libyaml-cpp-dev libcrypt-dev apache2-utils openssl
  # ISA-L's igzip: rankstatd gzips /metrics with it at level 1 (several times faster than zlib).
  libisal-dev
  libbenchmark-dev
  # Fuzzing (tests/fuzz): clang with libFuzzer and the ASan/UBSan runtimes.
  clang-14 libclang-rt-14-dev
  # Test and tooling: promtool and a real Prometheus server, the incumbent for side-by-side
  # benchmarks, tmux for the terminal view test, systemd-analyze for unit verification.
  prometheus python3 python3-prometheus-client tmux systemd jq
  # The Kubernetes manifests test (deploy/kubernetes) parses YAML; it also runs `kubectl kustomize`
  # when kubectl is installed (not a Debian 12 package).
  python3-yaml
  # Headers for the CPython extension rankstat._fastpath (client/pyext).
  python3-dev
  # The Debian package (scripts/check-package.sh): cpack -G DEB finds the ELF files with `file` and the
  # library dependencies with dpkg-shlibdeps (dpkg-dev).
  dpkg-dev file
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#packages[@]} packages present"
