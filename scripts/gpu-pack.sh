#!/usr/bin/env bash
# Packs the CUDA build's GPU binaries (test suites, bench, soak) into one compressed tarball that a
# `run` on the GPU machine carries, so that the device's minutes go to tests and timings rather than
# to a 4-minute build there. Build here first (nvcc is on this machine; about 10 minutes on 2 cores):
#
#   cmake -S . -B build/gpu-local -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWITCHYARD_CUDA=ON \
#     -DSWITCHYARD_MPI=OFF -DSWITCHYARD_GTEST_SOURCE=$PWD/.deps/googletest
#   cmake --build build/gpu-local -j2
#   bash scripts/gpu-pack.sh build/gpu-local        # writes build/gpu-carry/binaries.tar.gz
#
# On the GPU machine (carry build/gpu-carry): SWITCHYARD_GPU_PREBUILT=build/gpu-carry/binaries.tar.gz
# bash scripts/gpu-check.sh unpacks it into its build folder instead of building. Both machines are
# x86-64 with CUDA 13; the binaries need only libcudart and libnccl, which the GPU image has.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build/gpu-local}
out=build/gpu-carry
mkdir -p "$out"
binaries=()
for path in "$build"/tests/cuda/switchyard_*_test "$build"/tests/bench/*_cuda_test \
  "$build"/tools/bench/switchyard-bench "$build"/tools/soak/switchyard-soak "$build"/tools/moe_bench/switchyard-moe-bench \
  "$build"/tools/peer_probe/switchyard-peer-probe; do
  [[ -x $path ]] && binaries+=("${path#"$build"/}")
done
[[ ${#binaries[@]} -gt 0 ]] || { echo "gpu-pack: no binaries under $build" >&2; exit 2; }
tar -C "$build" -cf - "${binaries[@]}" | gzip -9 >"$out/binaries.tar.gz"
echo "gpu-pack: ${#binaries[@]} binaries from $build ($(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty))" \
  "-> $out/binaries.tar.gz ($(du -h "$out/binaries.tar.gz" | cut -f1))"
