#!/usr/bin/env bash
# Session 24, call 1: GEMM 1's SwiGLU epilogue on 64 gate + 64 up channel tiles (W1 interleaved in 64-row
# blocks, the cluster pair trading one amax per row). The MoE suite (the epilogue test against the separate
# path on W1 in halves; the layer interleaved against halves), memcheck and racecheck on the epilogue; then
# halves against interleaved (the epilogue) at one rank, and at 4096 tokens as 8 threads and 8 processes in
# alternating rounds beside torch's two fp8 grouped GEMMs, and at 128 tokens.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry24/c1.tar.gz"; BUDGET=570
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^layer|^alone|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|fp8"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
step moe-layer 150 ${T}_moe_layer_test --gtest_brief=1
step memcheck-epilogue 60 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_moe_layer_test --gtest_filter='*Epilogue*:*Small_R1_fp8*'
step racecheck-epilogue 60 compute-sanitizer --tool racecheck --error-exitcode 9 ${T}_moe_layer_test --gtest_filter='MoeSwigluEpilogue/*no_clamp*'
for round in 1 2; do
  step one-rank-halves-r$round 40 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --json "$base/one-rank-halves-r$round.json"
  step one-rank-interleaved-r$round 40 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-interleaved-r$round.json"
done
step one-rank-interleaved-checked 90 $MB --ranks 1 --tokens 32768 --iters 2 --warmup 1 --gate-up interleaved --json "$base/one-rank-interleaved-checked.json"
for round in 1 2; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-threads-halves-r$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --json "$base/layer-threads-halves-r$round.json"
  step layer-threads-interleaved-r$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-threads-interleaved-r$round.json"
done
step layer128-halves 30 $MB --tokens 128 --iters 20 --warmup 3 --json "$base/layer128-halves.json"
step layer128-interleaved 30 $MB --tokens 128 --iters 20 --warmup 3 --gate-up interleaved --json "$base/layer128-interleaved.json"
start_mps
for round in 1 2; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-processes-halves-r$round 60 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --json "$base/layer-processes-halves-r$round.json"
  step layer-processes-interleaved-r$round 60 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-processes-interleaved-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
