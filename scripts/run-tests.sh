#!/usr/bin/env bash
# Builds and runs switchyard's test suite, stopping at the first failure:
#
#   release  the Release preset, with the CUDA backend compiled when nvcc is found (so CUDA code
#            never rots; GPU tests skip themselves without a GPU), and the mpirun tests;
#   install  installs that build to a temporary prefix and builds tests/install against it
#            (find_package(switchyard) + a 1-rank round trip);
#   python   pip-installs the Python package (switchyard, with switchyard.deep_ep) into python3 and
#            runs its pytest suite (tests/python: ranks as processes, CPU backend);
#   asan     ASan + UBSan, CPU backend;
#   tsan     ThreadSanitizer, CPU backend.
#
#   bash scripts/run-tests.sh
#   SWITCHYARD_TEST_BUILDS="release install" bash scripts/run-tests.sh   # a subset, in this order
#
# Other steps: debug, cpu (the presets of the same names). Environment:
#   SWITCHYARD_TEST_BUILDS  steps to run (default: "release install python asan tsan")
#   SWITCHYARD_CTEST_JOBS   tests run in parallel (default 2)
#   SWITCHYARD_TEST_TIMEOUT seconds before ctest kills a test that set no timeout (default 900)
#   SWITCHYARD_CMAKE_ARGS   extra arguments for every configure, e.g. "-DSWITCHYARD_CUDA=OFF"
#                           (they stay in the build's CMake cache)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD

steps=${SWITCHYARD_TEST_BUILDS:-release install python asan tsan}
ctest_jobs=${SWITCHYARD_CTEST_JOBS:-2}
read -r -a cmake_args <<<"${SWITCHYARD_CMAKE_ARGS:-}"
test_timeout=${SWITCHYARD_TEST_TIMEOUT:-900}

for step in $steps; do
  case "$step" in
    release|debug|asan|tsan|cpu|install|python) ;;
    *) echo "run-tests: unknown step '$step' in SWITCHYARD_TEST_BUILDS (expected release, install, python, asan, tsan, debug, cpu)" >&2
       exit 2 ;;
  esac
done

passed=()
current=""
started_all=$SECONDS
summary() {
  local status=$?
  echo
  echo "== summary ($(( (SECONDS - started_all) / 60 ))m$(( (SECONDS - started_all) % 60 ))s)"
  if [[ ${#passed[@]} -gt 0 ]]; then
    printf '   passed: %s\n' "${passed[@]}"
  fi
  if [[ $status -ne 0 ]]; then
    echo "   FAILED: ${current:-setup} (exit $status)"
  else
    echo "   all passed"
  fi
}
trap summary EXIT

bash scripts/install-deps.sh --mpi

# The CUDA toolkit is often installed without being on PATH; CMake then would not find nvcc.
if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if command -v "${CUDACXX:-nvcc}" >/dev/null 2>&1; then
  echo "run-tests: nvcc found (${CUDACXX:-$(command -v nvcc)}): the release build compiles the CUDA backend"
else
  echo "run-tests: no nvcc: the release build is CPU only"
fi

elapsed() { echo "$(( ($1) / 60 ))m$(( ($1) % 60 ))s"; }

build_preset() {
  local preset=$1
  echo "== [$preset] configure"
  cmake --preset "$preset" "${cmake_args[@]}"
  echo "== [$preset] build"
  cmake --build --preset "$preset" -j"$(nproc)"
}

run_preset() {
  local preset=$1 started=$SECONDS
  build_preset "$preset"
  echo "== [$preset] test"
  ctest --preset "$preset" -j"$ctest_jobs" --timeout "$test_timeout" --no-tests=error
  passed+=("$preset ($(elapsed $((SECONDS - started))))")
}

# A user's view: install the release build, then find_package(switchyard) from a separate project.
run_install_check() {
  local started=$SECONDS
  build_preset release
  local scratch
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-install.XXXXXX")
  echo "== [install] cmake --install build/release --prefix $scratch/prefix"
  cmake --install build/release --prefix "$scratch/prefix"
  echo "== [install] build and run tests/install against it"
  cmake -S tests/install -B "$scratch/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$scratch/prefix"
  cmake --build "$scratch/consumer"
  "$scratch/consumer/switchyard-install-check"
  rm -rf "$scratch"
  passed+=("install ($(elapsed $((SECONDS - started))))")
}

# A Python user's view: pip install . (nanobind bindings built by scikit-build-core with this
# CMake project), then the pytest suite. Uses the system python3; Debian marks it "externally
# managed" (PEP 668), so pip gets --break-system-packages there (CI is a throwaway machine).
run_python_check() {
  local started=$SECONDS
  local apt_packages=()
  python3 -m pip --version >/dev/null 2>&1 || apt_packages+=(python3-pip)
  python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || apt_packages+=(python3-dev)
  if [[ ${#apt_packages[@]} -gt 0 ]]; then
    echo "== [python] apt-get install ${apt_packages[*]}"
    local as_root=()
    [[ $(id -u) -eq 0 ]] || as_root=(sudo)
    "${as_root[@]}" apt-get update -q
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends "${apt_packages[@]}"
  fi
  local pip_args=(--root-user-action=ignore --disable-pip-version-check)
  if python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")))'; then
    pip_args+=(--break-system-packages)
  fi
  echo "== [python] pip install build and test dependencies"
  python3 -m pip install "${pip_args[@]}" -q "scikit-build-core>=0.10" "nanobind>=3.1" numpy pytest
  echo "== [python] pip install ./ (warnings as errors)"
  local build_args=(--no-build-isolation --config-settings=cmake.define.SWITCHYARD_WERROR=ON)
  if [[ ${#cmake_args[@]} -gt 0 ]]; then
    build_args+=("--config-settings=cmake.args=$(IFS=';'; echo "${cmake_args[*]}")")
  fi
  # No build isolation: the dependencies above, and the CMake and Ninja already installed.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install "${pip_args[@]}" "${build_args[@]}" ./
  echo "== [python] pytest tests/python"
  (cd "$repo_root" && python3 -m pytest tests/python -q -p no:cacheprovider)
  passed+=("python ($(elapsed $((SECONDS - started))))")
}

for step in $steps; do
  current=$step
  if [[ $step == install ]]; then
    run_install_check
  elif [[ $step == python ]]; then
    run_python_check
  else
    run_preset "$step"
  fi
done
current=""
echo "run-tests: builds are under $repo_root/build/"
