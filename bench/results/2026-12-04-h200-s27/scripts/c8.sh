#!/usr/bin/env bash
# Session 27, call 8: call 7 found the 4-stage GEMM 1 10 % slower at 128 tokens x 8 (32 rows per expert, the
# GEMMs streaming weights): 3328-3383 us against 3035-3087. The 4 stages are now a tile of their own, m128_l2
# (both fp8 kinds), which the layer takes for GEMM 1 at many rows only (moe_few_rows false); few rows keep
# m128 (every stage that fits) for the SwiGLU kernel. Here: the MoE suite (the tile test over every tile,
# m128_l2 included, and the SwiGLU epilogue test in m128_l2); memcheck on a small layer at many rows; the
# 128-token layer (back to ~3.05 ms expected); the layer at 512, 1024, 2048 tokens (128, 256, 512 rows per
# expert) with GEMM 1 in m128_l2 (default) and m128 (SWITCHYARD_MOE_GEMM_TILES=m128,m128); the tile sweep at
# one rank with W1 in halves (m128_l2 for GEMM 1 of halves and for GEMM 2); 4096 x 8 against torch.
cd "$(dirname "$0")/../../../.."
CALL=c8; CARRY="build/gpu-carry27/c8.tar.gz"; BUDGET=420
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|rror|^layer|^alone|^weights|fp8:|verdict|^  m1|^  m6|tiles "
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
step moe-layer 150 ${T}_moe_layer_test --gtest_brief=1
step memcheck-layer 60 compute-sanitizer --tool memcheck --error-exitcode 9 $MB --ranks 2 --experts 8 --hidden 512 --intermediate 256 --tokens 300 --iters 1 --warmup 0 --check-tokens 8 --gate-up interleaved
for round in 1 2; do
  step l128-r$round 30 $MB --tokens 128 --check-tokens 2 --gate-up interleaved --json $base/l128-r$round.json
done
for tokens in 512 1024 2048; do
  step l$tokens-l2 30 $MB --tokens $tokens --check-tokens 0 --gate-up interleaved --json $base/l$tokens-l2.json
  step l$tokens-m128 30 env SWITCHYARD_MOE_GEMM_TILES=m128,m128 $MB --tokens $tokens --check-tokens 0 --gate-up interleaved --json $base/l$tokens-m128.json
done
step tiles-halves 90 $MB --ranks 1 --tokens 32768 --check-tokens 0 --gate-up halves --gemm-tiles --warmup 1 --iters 3 --json $base/tiles-halves.json
for round in 1 2; do
  step torch-r$round 30 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-r$round.json"
  step l4096-l2-r$round 40 $MB --tokens 4096 --check-tokens 0 --gate-up interleaved --json $base/l4096-l2-r$round.json
  step l4096-m128-r$round 40 env SWITCHYARD_MOE_GEMM_TILES=m128,m128 $MB --tokens 4096 --check-tokens 0 --gate-up interleaved --json $base/l4096-m128-r$round.json
done
echo "total $((SECONDS - step_start)) s"
