#!/usr/bin/env bash
# Session 26, call 2: GEMM 1's SwiGLU pair in one CTA (paired_tile_scheduler.cuh) instead of a cluster of two.
# The MoE suite (the epilogue against the separate path byte for byte; the layer interleaved against halves),
# memcheck and racecheck on a small layer, the rank-mask suite with its fp8 (push) variants; then the layer at
# one rank and at 4096 x 8 (threads; processes with heap tensors), this build against call 1's (the cluster
# pair) and torch's two fp8 grouped GEMMs, alternating in every round.
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry26/c2.tar.gz"; BUDGET=540
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^  (dispatch|gemm 1|combine)|verdict|rror|torch|fp8:|Hazard|hazard"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
MB1=$B/tools/moe_bench/switchyard-moe-bench-c1
step moe-layer 150 ${T}_moe_layer_test --gtest_brief=1
TINY="--ranks 2 --experts 8 --hidden 512 --intermediate 256 --tokens 300 --iters 1 --warmup 0 --check-tokens 8 --gate-up interleaved"
step memcheck-layer 60 compute-sanitizer --tool memcheck --error-exitcode 9 $MB $TINY
step racecheck-layer 90 compute-sanitizer --tool racecheck --error-exitcode 9 $MB --ranks 1 --experts 4 --hidden 512 --intermediate 256 --tokens 300 --iters 1 --warmup 0 --check-tokens 8 --gate-up interleaved
step one-rank-new 40 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-new.json"
step one-rank-c1 40 $MB1 --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-c1.json"
for round in 1 2 3; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-new-t$round 30 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-new-t$round.json"
  step layer-c1-t$round 30 $MB1 --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-c1-t$round.json"
done
step layer-128-new 40 $MB --tokens 128 --iters 5 --warmup 1 --check-tokens 4 --gate-up interleaved --json "$base/layer-128-new.json"
step rank-mask 150 ${T}_rank_mask_test --gtest_brief=1
start_mps
for round in 1 2 3; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-new-p$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-new-p$round.json"
  step layer-c1-p$round 40 $MB1 --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-c1-p$round.json"
done
step layer-check-processes 60 $MB --tokens 512 --iters 2 --warmup 1 --check-tokens 16 --ranks-as processes --heap on --gate-up interleaved
echo "total $((SECONDS - step_start)) s"
