#!/usr/bin/env bash
# Builds switchyard-bench (the `release` preset) and runs it on its defaults (DeepSeek-V3 on cuda, the
# laptop shape on cpu; --shape deepseek-v3 there), every engine that exists, every iteration checked
# bitwise against the reference. Without a GPU it picks the CPU backend. Extra arguments go to the
# bench; its last line is the verdict:
#
#   bash scripts/run-bench.sh
#   bash scripts/run-bench.sh --ranks 4 --tokens 512 --json /tmp/bench.json
#   bash scripts/run-bench.sh --help
#
# SWITCHYARD_CMAKE_ARGS adds arguments to the configure, e.g. "-DSWITCHYARD_CUDA=OFF".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

preset=release
build_dir="$PWD/build/$preset"

read -r -a cmake_args <<<"${SWITCHYARD_CMAKE_ARGS:-}"

bash scripts/install-deps.sh

# The CUDA toolkit is often installed without being on PATH; CMake then would not find nvcc.
if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

echo "== configure ($preset preset: $build_dir)"
cmake --preset "$preset" "${cmake_args[@]}"
echo "== build switchyard-bench"
cmake --build --preset "$preset" --target switchyard-bench -j"$(nproc)"

bench="$build_dir/tools/bench/switchyard-bench"
echo "== $bench $*"
status=0
"$bench" "$@" || status=$?
echo "== build: $build_dir (bench: $bench)"
exit "$status"
