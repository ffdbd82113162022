#!/usr/bin/env bash
# Installs what switchyard needs to build and test, and nothing that is already there.
#
#   bash scripts/install-deps.sh          # cmake, ninja, g++, make, GoogleTest, CLI11, nlohmann/json
#   bash scripts/install-deps.sh --mpi    # ... and OpenMPI (for the multi-process tests)
#   bash scripts/install-deps.sh --cutlass  # ... and the pinned CUTLASS headers (scripts/install-cutlass.sh;
#                                         # for the CUDA build, into build/deps)
#
# Debian/Ubuntu (apt-get). Idempotent: when everything is present it does nothing, not even
# `apt-get update`. Runs as root (CI) or through sudo.
set -euo pipefail

want_mpi=0
want_cutlass=0
for arg in "$@"; do
  case "$arg" in
    --mpi) want_mpi=1 ;;
    --cutlass) want_cutlass=1 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (expected --mpi or --cutlass)" >&2; exit 2 ;;
  esac
done
if [[ $want_cutlass == 1 ]]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/install-cutlass.sh"
fi

# CLI11 and nlohmann/json: switchyard-bench's command line and JSON (header-only).
packages=(cmake ninja-build g++ make libgtest-dev libcli11-dev nlohmann-json3-dev)
if [[ $want_mpi == 1 ]]; then
  packages+=(openmpi-bin libopenmpi-dev)
fi

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

# CMakeLists.txt needs CMake >= 3.25. One already on PATH that is new enough (from pip, Kitware's
# apt repository or a manual install) is as good as Debian's.
cmake_is_new_enough() {
  command -v cmake >/dev/null 2>&1 || return 1
  local version
  version=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
  [[ -n $version ]] || return 1
  local major=${version%%.*} minor=${version#*.}
  (( major > 3 || (major == 3 && minor >= 25) ))
}

present() {
  case "$1" in
    cmake) cmake_is_new_enough || is_installed cmake ;;
    ninja-build) command -v ninja >/dev/null 2>&1 || is_installed ninja-build ;;
    g++) command -v g++ >/dev/null 2>&1 || is_installed g++ ;;
    make) command -v make >/dev/null 2>&1 || is_installed make ;;
    openmpi-bin) command -v mpirun >/dev/null 2>&1 || is_installed openmpi-bin ;;
    *) is_installed "$1" ;;
  esac
}

missing=()
for package in "${packages[@]}"; do
  present "$package" || missing+=("$package")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all present (${packages[*]})"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: missing ${missing[*]}, and apt-get is not available; install them by hand" >&2
  exit 1
fi

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
