# shellcheck shell=bash
# Sourced by the GPU machine's Python scripts (gpu-python-check.sh, deepep-tests.sh, peer-deepep.sh):
# installs the switchyard package offline from the wheels in .deps/wheels (that machine has no package
# registry), and the pieces those scripts share (ensure_switchyard, start_mps_if_shared).
# Expects repo_root and wheels; install_with_cmake sets pythonpath_for_tests (the package runs from
# build/gpu-python/pkg), install_with_pip installs into python3's site-packages.

# Ignored by pip versions that lack these options (the command-line flags would be errors there).
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
if python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")))'; then
  export PIP_BREAK_SYSTEM_PACKAGES=1  # a throwaway machine's system Python (PEP 668)
fi
pythonpath_for_tests=""

install_with_pip() {
  python3 -m pip --version >/dev/null 2>&1 || { echo "no pip for $(command -v python3)"; return 1; }
  [[ -d $wheels ]] || { echo "no $wheels: carry .deps (bash scripts/gpu-python-check.sh --download-wheels makes it)"; return 1; }
  local requirements=("scikit-build-core>=0.10" "nanobind>=3.1" "pytest")
  command -v ninja >/dev/null 2>&1 || requirements+=(ninja)
  echo "== pip install (offline) ${requirements[*]}"
  python3 -m pip install --no-index --find-links "$wheels" "${requirements[@]}" || return 1
  echo "== pip install ./ (offline, no build isolation, CUDA backend required)"
  # --no-deps: numpy (the package's dependency for numpy users) is not needed by the torch tests.
  # Its own build folder (incremental on a warm machine), apart from run-tests.sh's build/python.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -v --no-index --find-links "$wheels" \
    --no-build-isolation --no-deps --config-settings=cmake.define.SWITCHYARD_CUDA=ON \
    --config-settings=cmake.define.SWITCHYARD_TORCH_OPS=ON \
    "--config-settings=build-dir=build/gpu-python/pip-{wheel_tag}" ./ || return 1
}

# No pip: nanobind and pytest unpacked from their wheels, switchyard._C built by CMake, and the
# package run from a staging folder (python/switchyard plus the extension).
install_with_cmake() {
  local build=$repo_root/build/gpu-python site=$repo_root/build/gpu-python/site
  mkdir -p "$site" "$build/pkg/switchyard"
  local wheel
  for wheel in "$wheels"/*.whl; do
    python3 -m zipfile -e "$wheel" "$site" || return 1
  done
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  echo "== cmake configure $build"
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSWITCHYARD_BUILD_PYTHON=ON \
    -DSWITCHYARD_BUILD_TESTS=OFF -DSWITCHYARD_BUILD_BENCH=OFF -DSWITCHYARD_MPI=OFF -DSWITCHYARD_CUDA=ON \
    -DSWITCHYARD_WERROR=OFF -DSWITCHYARD_TORCH_OPS=ON -DPython_EXECUTABLE="$(command -v python3)" -Dnanobind_DIR="$site/nanobind/cmake" \
    || return 1
  echo "== cmake build _C _torch_ops"
  cmake --build "$build" --target _C _torch_ops -j "$(nproc)" || return 1
  cp python/switchyard/*.py "$build/pkg/switchyard/" || return 1
  cp "$build"/python/_C*.so "$build"/python/_torch_ops*.so "$build/pkg/switchyard/" || return 1
  pythonpath_for_tests="$build/pkg:$site"
}


# ---- for the scripts that run switchyard with torch on the GPU machine ---------------------------

# Makes switchyard importable with its CUDA backend for `who` (a script's name, for messages):
# SWITCHYARD_PY_INSTALL=auto (default) uses it as python3 imports it, or from gpu-python-check.sh's
# staging folder, else installs it offline with pip (cmake where pip fails); pip or cmake install that
# way first. Logs to $OUT/install.log; sets pythonpath_for_tests; exits the script when it cannot.
ensure_switchyard() {
  local who=$1
  imports_cuda() {
    PYTHONPATH="$pythonpath_for_tests${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
      'import sys, switchyard; print(switchyard.__file__); sys.exit(not switchyard.cuda_available())' >>"$OUT/install.log" 2>&1
  }
  local install_mode=${SWITCHYARD_PY_INSTALL:-auto}
  if [[ $install_mode == auto ]]; then
    if imports_cuda; then
      echo "== switchyard: importable with CUDA ($(tail -1 "$OUT/install.log")): install skipped"
    else
      pythonpath_for_tests="$repo_root/build/gpu-python/pkg:$repo_root/build/gpu-python/site"
      if imports_cuda; then
        echo "== switchyard: from $repo_root/build/gpu-python/pkg: install skipped"
      else
        pythonpath_for_tests=""
        install_mode=pip
      fi
    fi
  fi
  if [[ $install_mode == pip || $install_mode == cmake ]]; then
    echo "== switchyard: installing ($install_mode, offline; $OUT/install.log)"
    if [[ $install_mode == pip ]] && ! install_with_pip >>"$OUT/install.log" 2>&1; then
      echo "== switchyard: pip install failed; trying cmake"
      install_mode=cmake
    fi
    if [[ $install_mode == cmake ]] && ! install_with_cmake >>"$OUT/install.log" 2>&1; then
      tail -30 "$OUT/install.log"
      echo "$who: could not install switchyard (install.log)" >&2
      exit 1
    fi
  fi
  if ! imports_cuda; then
    tail -20 "$OUT/install.log"
    echo "$who: switchyard does not import with its CUDA backend (install.log)" >&2
    exit 1
  fi
}

# Starts MPS when `max_ranks` processes would share torch's GPUs, unless SWITCHYARD_PY_MPS=0 (the
# caller stops it when mps_started is 1). Exits the script when torch sees no GPU.
start_mps_if_shared() {
  local who=$1 max_ranks=$2 num_gpus
  num_gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  if [[ $num_gpus -lt 1 ]]; then
    echo "$who: torch sees no GPU" >&2
    exit 1
  fi
  if [[ ${SWITCHYARD_PY_MPS:-1} == 1 && $max_ranks -gt $num_gpus ]]; then
    export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps_pipe}
    export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mps_log}
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d >"$OUT/mps.log" 2>&1; then
      mps_started=1
      echo "== mps: started ($max_ranks ranks on $num_gpus GPU(s))"
    else
      echo "== mps: could not start (already running, or unavailable; mps.log): ranks may time-slice"
    fi
  fi
}
