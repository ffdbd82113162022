#!/usr/bin/env bash
# Session 25, call 5: the push's casting loop (4 passes a round, each slot's destination fetched once a
# round). The symmetric and MoE suites, memcheck (one-rank fp8 cases; the layer's push at 2 ranks), Nsight
# Compute on the dispatch kernel at one rank, then the layer beside torch at 4096 tokens as threads and as
# processes (3 alternating rounds each) and one rank.
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry25/c5.tar.gz"; BUDGET=450
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^  (dispatch|combine)|verdict|rror|torch|fp8|Duration|DRAM Throughput"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
step symmetric 120 ${T}_symmetric_test --gtest_brief=1
step moe-layer 110 ${T}_moe_layer_test --gtest_brief=1
step memcheck-sym-r1 40 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*Small_R1_fp8*:*Precast*r1_k1*'
TINY="--ranks 2 --experts 8 --hidden 512 --intermediate 256 --tokens 32 --iters 1 --warmup 0 --check-tokens 2 --gate-up interleaved"
step memcheck-layer-r2-heap 40 compute-sanitizer --tool memcheck --error-exitcode 9 $MB $TINY --heap on
step ncu-dispatch-one-rank 40 ncu --clock-control none --section SpeedOfLight --kernel-name regex:symmetric_dispatch --launch-skip 1 --launch-count 1 $MB --ranks 1 --tokens 32768 --warmup 1 --iters 1 --check-tokens 0 --gate-up interleaved
for round in 1 2 3; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-threads-r$round 30 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-threads-r$round.json"
done
step one-rank 30 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank.json"
start_mps
for round in 1 2 3; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-processes-r$round 45 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-processes-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
