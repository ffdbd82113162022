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
#
# For a device call's carry (64 MiB at most), a stripped tarball that also stages the Python package
# (python/switchyard/*.py with the build's _C and _torch_ops modules, as pkg/switchyard: put $B/pkg on
# PYTHONPATH there):
#
#   SWITCHYARD_PACK_OUT=build/gpu-carry29/c1.tar.xz SWITCHYARD_PACK_PYTHON=1 bash scripts/gpu-pack.sh build/gpu-local
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build/gpu-local}
tarball=${SWITCHYARD_PACK_OUT:-build/gpu-carry/binaries.tar.gz}
out=$(dirname "$tarball")
mkdir -p "$out"
binaries=()
for path in "$build"/tests/cuda/switchyard_*_test "$build"/tests/bench/*_cuda_test \
  "$build"/tools/bench/switchyard-bench "$build"/tools/soak/switchyard-soak "$build"/tools/moe_bench/switchyard-moe-bench \
  "$build"/tools/peer_probe/switchyard-peer-probe "$build"/tools/launch_probe/switchyard-launch-probe; do
  [[ -x $path ]] && binaries+=("${path#"$build"/}")
done
# SWITCHYARD_PACK_ONLY: a regex on the paths to keep (each binary links the library's kernels, ~4-5 MB
# alone compressed; .tar.xz stores the repeats once, below).
if [[ -n ${SWITCHYARD_PACK_ONLY:-} ]]; then
  kept=()
  for path in "${binaries[@]}"; do [[ $path =~ $SWITCHYARD_PACK_ONLY ]] && kept+=("$path"); done
  binaries=("${kept[@]}")
fi
[[ ${#binaries[@]} -gt 0 ]] || { echo "gpu-pack: no binaries under $build" >&2; exit 2; }
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
for path in "${binaries[@]}"; do
  mkdir -p "$staging/$(dirname "$path")"
  cp "$build/$path" "$staging/$path"
  [[ -n ${SWITCHYARD_PACK_PYTHON:-} ]] && strip --strip-unneeded "$staging/$path"
done
if [[ -n ${SWITCHYARD_PACK_PYTHON:-} ]]; then
  mkdir -p "$staging/pkg/switchyard"
  cp python/switchyard/*.py "$staging/pkg/switchyard/"
  modules=("$build"/python/switchyard/_C*.so "$build"/python/_C*.so "$build"/python/switchyard/_torch_ops*.so
           "$build"/python/_torch_ops*.so)
  found=0
  for module in "${modules[@]}"; do
    [[ -f $module ]] || continue
    cp "$module" "$staging/pkg/switchyard/" && strip --strip-unneeded "$staging/pkg/switchyard/$(basename "$module")"
    found=$((found + 1))
  done
  [[ $found -gt 0 ]] || { echo "gpu-pack: no _C module under $build/python (configure with -DSWITCHYARD_BUILD_PYTHON=ON)" >&2; exit 2; }
fi
# .tar.xz: a quarter smaller than gzip for these binaries (their kernels' fatbins), a minute slower here. Every
# binary links the same library (~20 MB, mostly its kernels): a dictionary larger than one binary lets xz store
# the repeats as references (the 12 GPU suites and the bench: 7.5 MB instead of ~55), in one thread, since
# threads would split the input into blocks that share no dictionary; unpacking needs ~200 MB of memory.
case $tarball in
  *.xz) tar -C "$staging" -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB >"$tarball" ;;
  *) tar -C "$staging" -cf - . | gzip -9 >"$tarball" ;;
esac
echo "gpu-pack: ${#binaries[@]} binaries from $build ($(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty))" \
  "-> $tarball ($(du -h "$tarball" | cut -f1))"
