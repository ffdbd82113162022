#!/usr/bin/env bash
# The Python package on the GPU machine, in one call: installs switchyard offline from the wheels in
# .deps/wheels (that machine has no package registry), starts MPS (and stops it on exit, always), and
# runs the GPU pytest suite: torch CUDA tensors in this process, and ranks as processes grouped by
# torch.distributed (gloo). Logs and a JUnit XML go to $OUT (or ./out/gpu-python-check); a short
# summary is printed last. Exit status 0 only when the install and every test passed (tests of CUDA
# engines that raise switchyard.Unsupported are skipped, and listed).
#
#   bash scripts/gpu-python-check.sh                    # on the GPU machine (carry .deps there)
#   bash scripts/gpu-python-check.sh --download-wheels  # on a machine with PyPI: fills .deps/wheels
#
# Environment:
#   SWITCHYARD_PY_INSTALL   pip (default): `pip install .` through scikit-build-core, as users install;
#                           it falls back to cmake when pip is missing or fails (said in the summary).
#                           cmake: builds switchyard._C with CMake and runs the package from the tree.
#   SWITCHYARD_PY_TESTS     pytest paths (default: the GPU tests; "tests/python" adds the CPU suite,
#                           which needs numpy)
#   SWITCHYARD_PY_PYTEST_ARGS  extra pytest arguments, e.g. "-k deep_ep"
#   SWITCHYARD_PY_TIMEOUT   seconds for the whole pytest run (default 300; it takes about a minute)
#   SWITCHYARD_PY_MPS       1 (default): run under MPS; 0: without (the rank processes time-slice)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD
wheels=$repo_root/.deps/wheels

# What .deps/wheels holds: the build backend, nanobind, pytest and ninja, with their dependencies,
# for CPython 3.10 to 3.13 (all pure Python except ninja, whose one wheel fits every version).
if [[ ${1:-} == --download-wheels ]]; then
  set -e
  mkdir -p "$wheels"
  for version in 3.10 3.11 3.12 3.13; do
    python3 -m pip download -q -d "$wheels" --only-binary=:all: --implementation cp --python-version "$version" \
      --platform manylinux2014_x86_64 "scikit-build-core==1.1.2" "nanobind==3.1.0" "pytest==9.2.0" "ninja==1.13.2"
  done
  # pip evaluates these dependencies' markers for the running interpreter; Python 3.10 needs them.
  python3 -m pip download -q -d "$wheels" --only-binary=:all: --implementation cp --python-version 3.10 \
    --platform manylinux2014_x86_64 exceptiongroup tomli typing_extensions
  ls -la "$wheels"
  du -sh "$wheels"
  exit 0
fi

OUT=${OUT:-$repo_root/out/gpu-python-check}
mkdir -p "$OUT"
install_mode=${SWITCHYARD_PY_INSTALL:-pip}
# The GPU tests, and the CPU suite's tests that need torch (they skip in CI, which has no torch).
torch_cpu_tests="tests/python/test_moe.py::test_torch_tensors_in_and_out tests/python/test_moe.py::test_torch_precast_fp8_x"
tests=${SWITCHYARD_PY_TESTS:-"tests/python/test_cuda_tensors.py tests/python/test_cuda_ranks.py $torch_cpu_tests"}
read -r -a extra_pytest_args <<<"${SWITCHYARD_PY_PYTEST_ARGS:-}"
pytest_timeout=${SWITCHYARD_PY_TIMEOUT:-300}
declare -a SUMMARY=()
status=0
note() { SUMMARY+=("$1"); echo "== $1"; }
print_summary() {
  echo
  echo "==== gpu-python-check summary ($OUT)"
  for line in "${SUMMARY[@]}"; do echo "  $line"; done
}

# ---- the machine -------------------------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
{
  echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  echo "python: $(command -v python3) $(python3 --version 2>&1)"
  python3 -c 'import torch; print("torch:", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1
  python3 -c 'import numpy; print("numpy:", numpy.__version__)' 2>&1 | tail -1
  python3 -m pip --version 2>&1 | tail -1
  echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
  echo "cmake: $(cmake --version 2>&1 | head -1)"
  echo "ninja: $(ninja --version 2>&1 | head -1)"
  echo "/dev/shm: $(df -h /dev/shm 2>&1 | tail -1)"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if ! python3 -c 'import torch' >/dev/null 2>&1; then
  note "torch: not importable by $(command -v python3): nothing to test"
  print_summary
  exit 1
fi

# ---- install -----------------------------------------------------------------------------------
source "$repo_root/scripts/gpu-python-install.sh"

install_start=$SECONDS
installed=""
if [[ $install_mode == pip ]]; then
  if install_with_pip >"$OUT/install.log" 2>&1; then
    installed=pip
  else
    note "install (pip): FAILED, trying cmake (see install.log)"
    tail -30 "$OUT/install.log"
    status=1
  fi
fi
if [[ -z $installed ]]; then
  if install_with_cmake >"$OUT/install-cmake.log" 2>&1; then
    installed=cmake
  else
    note "install (cmake): FAILED (install-cmake.log)"
    tail -40 "$OUT/install-cmake.log"
    print_summary
    exit 1
  fi
fi
check_import='import switchyard, sys; print(switchyard.__file__, "cuda_available:", switchyard.cuda_available()); sys.exit(not switchyard.cuda_available())'
if ! (cd "$OUT" && PYTHONPATH="$pythonpath_for_tests${PYTHONPATH:+:$PYTHONPATH}" python3 -c "$check_import") >>"$OUT/install.log" 2>&1; then
  note "install ($installed): switchyard does not import, or has no CUDA backend (install.log)"
  tail -20 "$OUT/install.log"
  print_summary
  exit 1
fi
note "install ($installed): ok, CUDA backend ($((SECONDS - install_start)) s)"
# Built with SWITCHYARD_TORCH_OPS=ON against this torch: the tests require it to load, not skip.
export SWITCHYARD_EXPECT_TORCH_OPS=1

# ---- MPS ---------------------------------------------------------------------------------------
mps_started=0
stop_mps() {
  if [[ $mps_started == 1 ]]; then
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    mps_started=0
  fi
}
trap stop_mps EXIT
trap 'exit 143' TERM INT  # so that the EXIT trap stops MPS when this script is stopped
# The GPU tests run up to 8 rank processes (test_cuda_ranks.py); MPS when they share the GPUs.
start_mps_if_shared gpu-python-check 8
if [[ ${SWITCHYARD_PY_MPS:-1} != 1 ]]; then
  note "mps: not used (SWITCHYARD_PY_MPS=0)"
elif [[ $mps_started == 1 ]]; then
  note "mps: started"
else
  note "mps: not started (a GPU per rank, or it could not start: see mps.log): rank processes may time-slice"
fi

# ---- pytest ------------------------------------------------------------------------------------
read -r -a test_paths <<<"$tests"
test_start=$SECONDS
# SWITCHYARD_TEST_REQUIRE_CUDA: "no torch / no CUDA" fails here instead of skipping.
SWITCHYARD_TEST_REQUIRE_CUDA=1 PYTHONPATH="$pythonpath_for_tests${PYTHONPATH:+:$PYTHONPATH}" \
  timeout -k 15 "$pytest_timeout" python3 -m pytest "${test_paths[@]}" -v -rs -p no:cacheprovider --durations=8 \
  --junitxml="$OUT/pytest-gpu.xml" "${extra_pytest_args[@]}" >"$OUT/pytest.log" 2>&1
pytest_status=$?
stop_mps
result_line=$(grep -E '^=+ .*(passed|failed|error|skipped).* in [0-9.]+s' "$OUT/pytest.log" | tail -1)
if [[ $pytest_status == 0 ]]; then
  note "pytest: pass ($((SECONDS - test_start)) s): ${result_line:-?} (pytest.log)"
else
  status=1
  [[ $pytest_status == 124 || $pytest_status == 137 ]] && note "pytest: TIMED OUT after $pytest_timeout s"
  note "pytest: FAIL rc=$pytest_status ($((SECONDS - test_start)) s): ${result_line:-?} (pytest.log)"
  grep -E '^(FAILED|ERROR) ' "$OUT/pytest.log" | head -20
  tail -60 "$OUT/pytest.log"
fi
while IFS= read -r line; do note "  $line"; done < <(grep -E '^SKIPPED ' "$OUT/pytest.log" | head -12)
print_summary
exit $status
