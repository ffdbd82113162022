#!/usr/bin/env bash
# Builds and runs switchyard's test suite, stopping at the first failure:
#
#   format   every tracked C++ and CUDA source matches .clang-format (scripts/check-format.sh);
#   release  the Release preset, with the CUDA backend compiled when nvcc is found (so CUDA code
#            never rots; GPU tests skip themselves without a GPU), and the mpirun tests;
#   install  installs that build to a temporary prefix, then builds against it, as a user would:
#            tests/install (find_package(switchyard) + a 1-rank round trip) with the CUDA toolkit
#            hidden, again with COMPONENTS cuda when the build has CUDA, and the README's C++
#            examples (examples/cpp, mpi_round_trip under mpirun when MPI is found), run as written;
#   python   installs the Python package (switchyard, with switchyard.deep_ep) into a virtual
#            environment of its own, build/python-venv, runs its pytest suite (tests/python: ranks as
#            processes, CPU backend) and the README's Python example (examples/python);
#   asan     ASan + UBSan, CPU backend;
#   tsan     ThreadSanitizer, CPU backend;
#   fuzz     the libFuzzer targets (scripts/run-fuzz.sh: clang, ASan + UBSan, the committed seed
#            corpus), SWITCHYARD_FUZZ_SECONDS each (default 30); its python target needs the python
#            step's build/python-venv first, and runs only where that exists.
#
#   bash scripts/run-tests.sh
#   SWITCHYARD_TEST_BUILDS="release install" bash scripts/run-tests.sh   # a subset, in this order
#
# Each step prints one line, "== [step] N ran, M passed, K need a GPU (skipped)", and the output of
# any test that failed. The rest is in the build folder: build/<preset>/configure.log, build.log and
# ctest.log (every test's result), and skipped-tests.txt (each skipped test with its reason). On a
# terminal, the build shows ninja's progress line instead of writing build.log.
#
# It changes nothing outside the repository's build/ folder except what it installs with apt-get
# (build tools, MPI, python3-venv when missing). Python packages go into build/python-venv, unless
# SWITCHYARD_PYTHON=system asks for the python3 on PATH (pip install there, with
# --break-system-packages where Debian marks it externally managed).
#
# Other steps: debug, cpu (the presets of the same names). Environment:
#   SWITCHYARD_TEST_BUILDS  steps to run (default: "format release install python asan tsan fuzz")
#   SWITCHYARD_CTEST_JOBS   tests run in parallel (default 2)
#   SWITCHYARD_TEST_TIMEOUT seconds before ctest kills a test that set no timeout (default 900)
#   SWITCHYARD_CMAKE_ARGS   extra arguments for every configure, e.g. "-DSWITCHYARD_CUDA=OFF"
#                           (they stay in the build's CMake cache)
#   SWITCHYARD_PYTHON       venv (default: build/python-venv) or system (the python3 on PATH)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD

steps=${SWITCHYARD_TEST_BUILDS:-format release install python asan tsan fuzz}
ctest_jobs=${SWITCHYARD_CTEST_JOBS:-2}
read -r -a cmake_args <<<"${SWITCHYARD_CMAKE_ARGS:-}"
test_timeout=${SWITCHYARD_TEST_TIMEOUT:-900}
python_mode=${SWITCHYARD_PYTHON:-venv}
venv_dir=$repo_root/build/python-venv

for step in $steps; do
  case "$step" in
    format|release|debug|asan|tsan|cpu|install|python|fuzz) ;;
    *) echo "run-tests: unknown step '$step' in SWITCHYARD_TEST_BUILDS (expected format, release, install, python, asan, tsan, fuzz, debug, cpu)" >&2
       exit 2 ;;
  esac
done
case "$python_mode" in
  venv|system) ;;
  *) echo "run-tests: SWITCHYARD_PYTHON='$python_mode' (expected venv or system)" >&2
     exit 2 ;;
esac

passed=()
step_summaries=()
current=""
started_all=$SECONDS
summary() {
  local status=$?
  echo
  echo "== summary ($(( (SECONDS - started_all) / 60 ))m$(( (SECONDS - started_all) % 60 ))s)"
  if [[ ${#step_summaries[@]} -gt 0 ]]; then
    printf '   %s\n' "${step_summaries[@]}"
  fi
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

apt_install() {
  echo "== apt-get install $*"
  local as_root=()
  [[ $(id -u) -eq 0 ]] || as_root=(sudo)
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends "$@"
}

bash scripts/install-deps.sh --mpi
# The test summaries (tests/support/test_summary.py) and the README checks are Python.
command -v python3 >/dev/null 2>&1 || apt_install python3

# The CUDA toolkit is often installed without being on PATH; CMake then would not find nvcc.
if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if command -v "${CUDACXX:-nvcc}" >/dev/null 2>&1; then
  echo "run-tests: nvcc found (${CUDACXX:-$(command -v nvcc)}): the release build compiles the CUDA backend"
  # The pinned CUTLASS headers (build/deps), which CMake finds there for the CUDA MoE path.
  bash scripts/install-deps.sh --cutlass >/dev/null
else
  echo "run-tests: no nvcc: the release build is CPU only"
fi

elapsed() { echo "$(( ($1) / 60 ))m$(( ($1) % 60 ))s"; }

# Runs a command with its output in a log file; on failure shows the log from its first error
# (ninja's "FAILED:", CMake's "CMake Error"), or all of it.
logged() {
  local log=$1
  shift
  local status=0
  "$@" >"$log" 2>&1 || status=$?
  [[ $status -ne 0 ]] || return 0
  local first_error
  first_error=$(grep -n -m1 -E '^FAILED:|CMake Error|error:' "$log" | cut -d: -f1 || true)
  echo "---- $log${first_error:+ from line $first_error}:"
  tail -n +"${first_error:-1}" "$log"
  echo "----"
  return $status
}

build_preset() {
  local preset=$1 build_dir=$repo_root/build/$1
  mkdir -p "$build_dir"
  echo "== [$preset] configure ($build_dir/configure.log)"
  logged "$build_dir/configure.log" cmake --preset "$preset" "${cmake_args[@]}"
  grep '^-- switchyard' "$build_dir/configure.log" | sed 's/^-- /   /' || true
  if [[ -t 1 ]]; then
    echo "== [$preset] build"
    cmake --build --preset "$preset" -j"$(nproc)"
  else
    echo "== [$preset] build ($build_dir/build.log)"
    logged "$build_dir/build.log" cmake --build --preset "$preset" -j"$(nproc)"
  fi
}

run_preset() {
  local preset=$1 started=$SECONDS build_dir=$repo_root/build/$1
  build_preset "$preset"
  echo "== [$preset] test"
  rm -f "$build_dir/ctest-junit.xml"
  local status=0 summary_line
  ctest --preset "$preset" -j"$ctest_jobs" --timeout "$test_timeout" --no-tests=error \
      --output-junit "$build_dir/ctest-junit.xml" 2>&1 \
    | python3 tests/support/test_summary.py ctest --step "$preset" --junit "$build_dir/ctest-junit.xml" \
        --log "$build_dir/ctest.log" --skipped "$build_dir/skipped-tests.txt" \
    | tee "$build_dir/ctest-summary.txt" || status=$?
  summary_line=$(grep '^== \[' "$build_dir/ctest-summary.txt" | tail -1 || true)
  summary_line=${summary_line#== }
  step_summaries+=("${summary_line%%  (*}")
  [[ $status -eq 0 ]] || return "$status"
  passed+=("$preset ($(elapsed $((SECONDS - started))))")
}

# A user's view: install the release build, then find_package(switchyard) from separate projects.
run_install_check() {
  local started=$SECONDS
  build_preset release
  local scratch
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-install.XXXXXX")
  local prefix=$scratch/prefix
  echo "== [install] cmake --install build/release --prefix $prefix"
  logged "$scratch/install.log" cmake --install build/release --prefix "$prefix"
  local consumer=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix")

  # A CPU-only consumer must not need the CUDA toolkit, even from a build with the CUDA backend.
  echo "== [install] tests/install without the CUDA toolkit (CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)"
  logged "$scratch/consumer.log" cmake -S tests/install -B "$scratch/consumer" "${consumer[@]}" \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
  logged "$scratch/consumer-build.log" cmake --build "$scratch/consumer"
  "$scratch/consumer/switchyard-install-check" | sed 's/^/   /'
  local checks=1
  if grep -q '^set(switchyard_HAS_CUDA ON)' "$prefix"/lib*/cmake/switchyard/switchyardConfig.cmake; then
    echo "== [install] tests/install with find_package(switchyard COMPONENTS cuda)"
    logged "$scratch/cuda-consumer.log" cmake -S tests/install -B "$scratch/cuda-consumer" "${consumer[@]}" \
      -DWITH_CUDA_COMPONENT=ON
    logged "$scratch/cuda-consumer-build.log" cmake --build "$scratch/cuda-consumer"
    "$scratch/cuda-consumer/switchyard-install-check" | sed 's/^/   /'
    checks=2
  fi

  # The README's C++ examples, exactly as the README shows them (tests/readme checks that).
  echo "== [install] examples/cpp, built against the install and run"
  logged "$scratch/examples.log" cmake -S examples/cpp -B "$scratch/examples" "${consumer[@]}" \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_CXX_FLAGS="-Wall -Wextra" \
    -DCMAKE_COMPILE_WARNING_AS_ERROR=ON
  logged "$scratch/examples-build.log" cmake --build "$scratch/examples"
  echo "   \$ round_trip"
  "$scratch/examples/round_trip" | sed 's/^/   /'
  local examples=1
  if [[ -x $scratch/examples/mpi_round_trip ]]; then
    local mpi_flags=()
    # As root on 2 cores (CI), Open MPI needs leave to run as root and to start more processes than cores.
    if mpirun --version 2>&1 | grep -q 'Open MPI\|OpenRTE'; then
      mpi_flags=(--oversubscribe --allow-run-as-root --bind-to none)
    fi
    echo "   \$ mpirun -np 4 mpi_round_trip"
    mpirun -np 4 "${mpi_flags[@]}" "$scratch/examples/mpi_round_trip" | sed 's/^/   /'
    examples=2
  fi
  rm -rf "$scratch"
  step_summaries+=("[install] $checks find_package consumer(s) and $examples README example(s) built and ran")
  passed+=("install ($(elapsed $((SECONDS - started))))")
}

# The interpreter that the python step installs into: its own virtual environment (default), or
# the python3 on PATH with SWITCHYARD_PYTHON=system.
python_for_tests() {
  if [[ $python_mode == system ]]; then
    command -v python3
    return
  fi
  if [[ ! -x $venv_dir/bin/python ]]; then
    echo "== [python] python3 -m venv $venv_dir" >&2
    if ! python3 -m venv "$venv_dir" >"$repo_root/build/python-venv.log" 2>&1; then
      # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in a separate package.
      rm -rf "$venv_dir"
      apt_install python3-venv >&2
      logged "$repo_root/build/python-venv.log" python3 -m venv "$venv_dir" >&2
    fi
  fi
  echo "$venv_dir/bin/python"
}

# A Python user's view: pip install . (nanobind bindings built by scikit-build-core with this
# CMake project), then the pytest suite and the README's example.
run_python_check() {
  local started=$SECONDS
  mkdir -p "$repo_root/build"
  local apt_packages=()
  python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || apt_packages+=(python3-dev)
  if [[ $python_mode == system ]]; then
    python3 -m pip --version >/dev/null 2>&1 || apt_packages+=(python3-pip)
  fi
  if [[ ${#apt_packages[@]} -gt 0 ]]; then
    apt_install "${apt_packages[@]}"
  fi
  local python
  python=$(python_for_tests)
  local pip_args=(--root-user-action=ignore --disable-pip-version-check)
  if [[ $python_mode == system ]] &&
     "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")))'; then
    pip_args+=(--break-system-packages)  # Debian's PEP 668 mark; SWITCHYARD_PYTHON=system asked for it
  fi
  echo "== [python] $python -m pip install build and test dependencies"
  "$python" -m pip install "${pip_args[@]}" -q "scikit-build-core>=0.10" "nanobind>=3.1" numpy pytest
  echo "== [python] pip install ./ (warnings as errors; build/python-install.log)"
  local build_args=(--no-build-isolation --config-settings=cmake.define.SWITCHYARD_WERROR=ON)
  if [[ ${#cmake_args[@]} -gt 0 ]]; then
    build_args+=("--config-settings=cmake.args=$(IFS=';'; echo "${cmake_args[*]}")")
  fi
  # No build isolation: the dependencies above, and the CMake and Ninja already installed.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) logged "$repo_root/build/python-install.log" \
    "$python" -m pip install "${pip_args[@]}" "${build_args[@]}" ./
  echo "== [python] pytest tests/python"
  local junit=$repo_root/build/python-junit.xml
  rm -f "$junit"
  local pytest_status=0
  (cd "$repo_root" && "$python" -m pytest tests/python -q -p no:cacheprovider --junitxml="$junit") || pytest_status=$?
  local summary_line
  summary_line=$(python3 tests/support/test_summary.py junit --step python --junit "$junit" \
    --skipped "$repo_root/build/python-skipped-tests.txt")
  echo "$summary_line"
  summary_line=${summary_line#== }
  step_summaries+=("${summary_line%%  (*}")
  [[ $pytest_status -eq 0 ]] || return "$pytest_status"
  echo "== [python] the README's example: python examples/python/round_trip.py"
  "$python" examples/python/round_trip.py | sed 's/^/   /'
  # switchyard._torch_ops builds only against an installed torch (the GPU machine's); compiled here against
  # a pinned torch wheel's headers so that it cannot rot unseen. It needs the CUDA toolkit's headers.
  if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
    echo "== [python] _torch_ops compiles against torch $(cat scripts/torch-version.txt) (scripts/check-torch-ops.sh)"
    PATH="$PATH:/usr/local/cuda/bin" bash scripts/check-torch-ops.sh "$python" | sed 's/^/   /'
  else
    echo "== [python] _torch_ops: not compiled (no CUDA toolkit here)"
  fi
  passed+=("python ($(elapsed $((SECONDS - started))))")
}

# A fixed-time fuzz run (issue 15): every finding fails the step, naming its input.
run_fuzz_check() {
  local started=$SECONDS
  local targets=(calls connect)
  [[ -x $venv_dir/bin/python || $python_mode == system ]] && targets+=(python)
  echo "== [fuzz] ${targets[*]}, ${SWITCHYARD_FUZZ_SECONDS:-30} s each (build/fuzz)"
  SWITCHYARD_FUZZ_SECONDS=${SWITCHYARD_FUZZ_SECONDS:-30} SWITCHYARD_PYTHON=$python_mode \
    bash scripts/run-fuzz.sh "${targets[@]}"
  step_summaries+=("[fuzz] ${targets[*]}: no finding")
  passed+=("fuzz ($(elapsed $((SECONDS - started))))")
}

for step in $steps; do
  current=$step
  if [[ $step == install ]]; then
    run_install_check
  elif [[ $step == python ]]; then
    run_python_check
  elif [[ $step == fuzz ]]; then
    run_fuzz_check
  elif [[ $step == format ]]; then
    bash scripts/check-format.sh
    step_summaries+=("[format] every tracked C++ and CUDA source matches .clang-format")
    passed+=("format")
  else
    run_preset "$step"
  fi
done
current=""
echo "run-tests: builds are under $repo_root/build/"
