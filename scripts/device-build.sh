#!/usr/bin/env bash
# Builds named targets on the GPU machine (16 cores: minutes, where this 2-core machine takes an hour from
# nothing), for a device call that has no carried build: the CUDA build with the Python modules against the
# machine's own torch, in build/dev, with the Python package staged in build/dev/pkg (put it on PYTHONPATH).
# Needs .deps (scripts/gpu-deps.sh; nanobind's wheel in .deps/wheels) carried with the call.
#
#   bash scripts/device-build.sh switchyard-bench switchyard_cuda_normal_engine_test _C _torch_ops
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build/dev
site=$build/site
mkdir -p "$site" "$build/pkg/switchyard"
for wheel in .deps/wheels/nanobind-*.whl; do python3 -m zipfile -e "$wheel" "$site"; done
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSWITCHYARD_CUDA=ON -DSWITCHYARD_MPI=OFF \
  -DSWITCHYARD_GTEST_SOURCE="$PWD/.deps/googletest" -DSWITCHYARD_CUTLASS_DIR="$PWD/.deps/cutlass" \
  -DSWITCHYARD_BUILD_PYTHON=ON -DSWITCHYARD_TORCH_OPS=ON -DSWITCHYARD_WERROR=OFF \
  -DPython_EXECUTABLE="$(command -v python3)" -Dnanobind_DIR="$PWD/$site/nanobind/cmake" >"$build-configure.log"
cmake --build "$build" -j "$(nproc)" --target "$@"
if compgen -G "$build/python/_C*.so" >/dev/null; then
  cp python/switchyard/*.py "$build/pkg/switchyard/"
  cp "$build"/python/_C*.so "$build/pkg/switchyard/"
  compgen -G "$build/python/_torch_ops*.so" >/dev/null && cp "$build"/python/_torch_ops*.so "$build/pkg/switchyard/"
fi
echo "device-build: $build ($*)"
