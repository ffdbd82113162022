#!/usr/bin/env bash
# Session 25, call 3: the push decision made alike on every rank (every fp8 call where all ranks are threads
# on one GPU; elsewhere outputs in the heap receive area). The symmetric suite by default; memcheck on the
# one-rank fp8 cases and on the layer's push at 2 ranks (outputs allocated before the calls, heap and not);
# then the layer at 4096 tokens beside torch, 4 alternating rounds as threads and as processes (MPS, heap),
# one rank, and 128 tokens.
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry25/c3.tar.gz"; BUDGET=560
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^alone|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|fp8"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
step symmetric 120 ${T}_symmetric_test --gtest_brief=1
step memcheck-sym-r1 60 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*Small_R1_fp8*:*Precast*r1_k1*'
TINY="--ranks 2 --experts 8 --hidden 512 --intermediate 256 --tokens 32 --iters 1 --warmup 0 --check-tokens 2 --gate-up interleaved"
step memcheck-layer-r2 90 compute-sanitizer --tool memcheck --error-exitcode 9 $MB $TINY
step memcheck-layer-r2-heap 90 compute-sanitizer --tool memcheck --error-exitcode 9 $MB $TINY --heap on
for round in 1 2 3 4; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-threads-r$round 30 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-threads-r$round.json"
done
step one-rank 30 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank.json"
step layer-128 30 $MB --tokens 128 --iters 10 --warmup 2 --check-tokens 0 --json "$base/layer-128.json"
step layer-128-warps 30 env SWITCHYARD_SYMMETRIC_PULL=warps $MB --tokens 128 --iters 10 --warmup 2 --check-tokens 0 --json "$base/layer-128-warps.json"
start_mps
for round in 1 2 3 4; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-processes-r$round 45 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-processes-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
