#!/usr/bin/env bash
# Session 20, call 4: the wider fp8 tiles (m128_n192, m128_n160; NOTES "wider fp8 GEMM tiles: the
# prediction"). The grouped GEMM tile test (every tile bitwise against m128, N with partial tiles), then
# moe-bench --gemm-tiles (every tile interleaved in each round, slowest rank's median, each checked
# bitwise against m128 on the layer's rows): one rank with all 256 experts (32768 tokens), and 8 ranks at
# 4096 tokens; then the layer at 4096 tokens with the best tile pair (SWITCHYARD_MOE_GEMM_TILES) beside
# the default, interleaved.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
base=$PWD/out/c4; B=$PWD/build/g4
mkdir -p "$base" "$B"
trap 'tar -C out -czf "$OUT/c4-logs.tar.gz" c4 2>/dev/null; true' EXIT
BUDGET=${BUDGET:-380}; STEP_TAR=c4
STEP_FILTER="^  m|^tiles|verdict|^layer|^alone|PASSED|FAILED|ERROR SUMMARY|rror"
source scripts/device-step.sh
tar -C "$B" -xzf build/gpu-carry4/t4.tar.gz
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
T=$B/tests/cuda/switchyard_cuda_moe_layer_test; M=$B/tools/moe_bench/switchyard-moe-bench
step tile-test 90 "$T" --gtest_filter='*GroupedGemmTile*:*SwigluEpilogue*'
step tiles-one-rank 120 "$M" --ranks 1 --tokens 32768 --iters 3 --warmup 1 --gemm-tiles \
  --json "$base/tiles-one-rank.json"
step tiles-8-ranks 120 "$M" --tokens 4096 --iters 3 --warmup 1 --gemm-tiles --json "$base/tiles-8-ranks.json"
step memcheck-tiles 80 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  --gtest_filter='Kinds/MoeGroupedGemmTiles.*'
echo "total $((SECONDS - step_start)) s"
