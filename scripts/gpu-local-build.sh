#!/usr/bin/env bash
# The CUDA build of everything a GPU call runs, made on this (CPU) machine so that the device's minutes
# go to runs: the test suites, the bench tools and the Python package (_C and _torch_ops for the GPU
# machine's CPython 3.12 and torch), in build/gpu-local. Then pack a carry with scripts/gpu-pack.sh.
# About 15 minutes on 2 cores from nothing (the CUTLASS GEMMs take most of it); incremental after that.
#
#   bash scripts/gpu-local-build.sh
#   SWITCHYARD_PACK_ONLY='(normal_engine|process_ranks)_' SWITCHYARD_PACK_OUT=build/gpu-carry/c1.tar.xz \
#     SWITCHYARD_PACK_PYTHON=1 bash scripts/gpu-pack.sh build/gpu-local
#
# Environment: SWITCHYARD_GPU_PYTHON, the interpreter to build the Python modules for (default: pyenv's
# 3.12.1, the GPU machine's version); it gets a virtual environment in build/py312-venv with nanobind,
# numpy and pytest (the last two for running the CPU Python tests against this build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${SWITCHYARD_GPU_PYTHON:-/root/.pyenv/versions/3.12.1/bin/python}
venv=build/py312-venv
[[ -d .deps/googletest && -d .deps/cutlass/include ]] || bash scripts/gpu-deps.sh
if [[ ! -x $venv/bin/python ]]; then
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q nanobind numpy pytest
fi
torch_version=$(cat scripts/torch-version.txt)
torch_dir=$PWD/build/deps/torch-$torch_version/torch
# The torch wheel's headers and libraries that _torch_ops builds against (downloaded once).
# check-torch-ops.sh downloads them, then compiles _torch_ops on its own (its result does not matter here).
[[ -f $torch_dir/version.py ]] || bash scripts/check-torch-ops.sh "$PWD/$venv/bin/python" >/dev/null || true
[[ -f $torch_dir/version.py ]] || { echo "gpu-local-build: no torch headers at $torch_dir" >&2; exit 1; }
cmake -S . -B build/gpu-local -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWITCHYARD_CUDA=ON -DSWITCHYARD_MPI=OFF \
  -DSWITCHYARD_GTEST_SOURCE="$PWD/.deps/googletest" -DSWITCHYARD_CUTLASS_DIR="$PWD/.deps/cutlass" \
  -DSWITCHYARD_BUILD_PYTHON=ON -DSWITCHYARD_TORCH_OPS=ON -DSWITCHYARD_TORCH_DIR="$torch_dir" \
  -DPython_EXECUTABLE="$PWD/$venv/bin/python" >build/gpu-local-configure.log
cmake --build build/gpu-local -j "$(nproc)"
echo "gpu-local-build: build/gpu-local ($(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty))"
