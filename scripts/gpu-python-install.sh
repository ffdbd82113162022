# shellcheck shell=bash
# Sourced by the GPU machine's Python scripts (gpu-python-check.sh, deepep-tests.sh): installs the
# switchyard package offline from the wheels in .deps/wheels (that machine has no package registry).
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
    -DSWITCHYARD_WERROR=OFF -DPython_EXECUTABLE="$(command -v python3)" -Dnanobind_DIR="$site/nanobind/cmake" \
    || return 1
  echo "== cmake build _C"
  cmake --build "$build" --target _C -j "$(nproc)" || return 1
  cp python/switchyard/*.py "$build/pkg/switchyard/" || return 1
  cp "$build"/python/_C*.so "$build/pkg/switchyard/" || return 1
  pythonpath_for_tests="$build/pkg:$site"
}

