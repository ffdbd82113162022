#!/usr/bin/env bash
# Session 27, call 5: the landed change (GEMM 1's SwiGLU kernel at 4 mainloop stages, Fp8CarveoutForStages).
# Correctness: the MoE suite (the epilogue byte for byte against the separate path, the layer within tolerance
# and run to run), memcheck and racecheck on a small layer, memcheck on the 4-rank heap receive case that ran
# past 40 s in session 26. Then the layer at 4096 x 8 against torch's two fp8 GEMMs with the same protocol
# on both sides (3 warm-up calls, the median of 10: call 4 showed the layer's 5-call median sitting on a
# rising thermal curve, 22 -> 25.5 ms over a run, where torch's took the median of calls 4-13): old (session
# 26's kernels, call 2's s6 binary) and new, as threads and as processes (MPS, heap tensors).
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry27/c5.tar.gz"; BUDGET=560
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|rror|^layer|^alone|fp8:|verdict"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
OLD=$B/vs6/switchyard-moe-bench
step moe-layer 150 ${T}_moe_layer_test --gtest_brief=1
TINY="--experts 8 --hidden 512 --intermediate 256 --tokens 300 --iters 1 --warmup 0 --check-tokens 8 --gate-up interleaved"
step memcheck-layer 60 compute-sanitizer --tool memcheck --error-exitcode 9 $MB --ranks 2 $TINY
step racecheck-layer 90 compute-sanitizer --tool racecheck --error-exitcode 9 $MB --ranks 1 --topk 2 $TINY
PROTO="--tokens 4096 --warmup 3 --iters 10 --check-tokens 0 --gate-up interleaved"
for round in 1 2 3; do
  order=(torch old new)
  for i in 0 1 2; do
    case ${order[$(( (i + round) % 3 ))]} in
      torch) step torch-t$round 30 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json" ;;
      old) step layer-old-t$round 40 $OLD $PROTO --json $base/layer-old-t$round.json ;;
      new) step layer-new-t$round 40 $MB $PROTO --json $base/layer-new-t$round.json ;;
    esac
  done
done
start_mps
for round in 1 2; do
  step torch-p$round 30 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-new-p$round 40 $MB $PROTO --ranks-as processes --heap on --json $base/layer-new-p$round.json
  step layer-old-p$round 40 $OLD $PROTO --ranks-as processes --heap on --json $base/layer-old-p$round.json
done
echo quit | nvidia-cuda-mps-control
step memcheck-heap-receive 120 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*HeapReceive*'
echo "total $((SECONDS - step_start)) s"
