#!/usr/bin/env bash
# Compiles and links switchyard._torch_ops (python/torch_ops) against a pinned torch wheel's headers and
# libraries, without importing torch or running anything: so that the module, which only the GPU
# machine (with torch installed) builds and tests, cannot rot unseen in CI. The wheel is downloaded
# once (pip download --no-deps, ~530 MB) into build/deps and only the parts the build reads are
# unpacked (include/, the four libraries it links, version.py).
#
#   bash scripts/check-torch-ops.sh [python]     # python: the interpreter with nanobind (default python3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${1:-python3}
version=$(cat scripts/torch-version.txt)
deps=build/deps/torch-$version
build=build/torch-ops
if [[ ! -f $deps/torch/version.py ]]; then
  mkdir -p "$deps/wheel"
  "$python" -m pip download -q --no-deps --only-binary=:all: "torch==$version" -d "$deps/wheel"
  "$python" - "$deps" <<'PY'
import glob, sys, zipfile
deps = sys.argv[1]
wanted = ("torch/include/", "torch/version.py", "torch/lib/libc10.so", "torch/lib/libc10_cuda.so",
          "torch/lib/libtorch_cpu.so", "torch/lib/libtorch_python.so")
with zipfile.ZipFile(glob.glob(f"{deps}/wheel/torch-*.whl")[0]) as wheel:
    wheel.extractall(deps, [name for name in wheel.namelist() if name.startswith(wanted)])
PY
  rm -rf "$deps/wheel"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWITCHYARD_BUILD_PYTHON=ON -DSWITCHYARD_BUILD_TESTS=OFF \
  -DSWITCHYARD_BUILD_BENCH=OFF -DSWITCHYARD_MPI=OFF -DSWITCHYARD_CUDA=ON -DSWITCHYARD_TORCH_OPS=ON \
  -DSWITCHYARD_TORCH_DIR="$PWD/$deps/torch" -DPython_EXECUTABLE="$(command -v "$python")" >"$build.log" 2>&1 ||
  { tail -30 "$build.log"; exit 1; }
cmake --build "$build" --target _torch_ops >>"$build.log" 2>&1 || { tail -30 "$build.log"; exit 1; }
echo "check-torch-ops: _torch_ops compiled and linked against torch $version ($(ls "$build"/python/_torch_ops*.so))"
