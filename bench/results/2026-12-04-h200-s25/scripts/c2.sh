#!/usr/bin/env bash
# Session 25, call 2: the fp8 push after call 1 (the pre-cast push's per-lane loop fixed; automatic pushes into
# caller-given outputs and the heap receive area, SWITCHYARD_SYMMETRIC_PULL=push also into the library's own;
# the MoE layer's recv_x in the heap receive area with --heap on, so processes push too). Suites: symmetric by
# default, push forced and warps forced (fp8), MoE; memcheck on the MoE layer's multi-rank fp8 cases and the
# symmetric one-rank fp8 cases pushed; small-shape layer checked as threads and processes with the heap; then
# push against the warps pull at 4096 tokens (symmetric bench; the layer as threads and processes beside torch).
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry25/c2.tar.gz"; BUDGET=590
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^alone|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|fp8|^symmetric|stream-ordered"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
SB=$B/tools/bench/switchyard-bench
step symmetric 120 ${T}_symmetric_test --gtest_brief=1
step symmetric-push 120 env SWITCHYARD_SYMMETRIC_PULL=push ${T}_symmetric_test --gtest_brief=1
step symmetric-warps-fp8 60 env SWITCHYARD_SYMMETRIC_PULL=warps ${T}_symmetric_test --gtest_brief=1 --gtest_filter='*fp8*:*Fp8*'
step moe-layer 120 ${T}_moe_layer_test --gtest_brief=1
step sanitizer-help 10 bash -c "compute-sanitizer --help | grep -i -A3 stream-ordered"
step memcheck-moe-fp8 120 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_moe_layer_test --gtest_filter='*fp8_r2_k1*:*fp8_r4_some*:*Precast*r2_k1*:*fp8_r2_capacity*'
step memcheck-sym-push-r1 60 env SWITCHYARD_SYMMETRIC_PULL=push compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*Small_R1_fp8*:*Precast*:*r1*fp8*'
SMALL="--experts 32 --hidden 1024 --intermediate 256 --tokens 96 --iters 2 --warmup 1 --check-tokens 4"
step small-threads-heap-checked 60 $MB $SMALL --heap on --gate-up interleaved
step sym-default-r1 40 $SB --backend cuda --engine symmetric --ranks 8 --tokens 4096 --dtype fp8 --json "$base/sym-default-r1.json"
step sym-push-r1 40 env SWITCHYARD_SYMMETRIC_PULL=push $SB --backend cuda --engine symmetric --ranks 8 --tokens 4096 --dtype fp8 --json "$base/sym-push-r1.json"
for round in 1 2 3; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-push-r$round 30 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-push-r$round.json"
  step layer-warps-r$round 30 env SWITCHYARD_SYMMETRIC_PULL=warps $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-warps-r$round.json"
done
start_mps
step small-processes-heap-checked 60 $MB $SMALL --heap on --gate-up interleaved --ranks-as processes
for round in 1 2 3; do
  step torch-p$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-p$round.json"
  step layer-processes-push-r$round 45 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-processes-push-r$round.json"
  step layer-processes-warps-r$round 45 env SWITCHYARD_SYMMETRIC_PULL=warps $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --ranks-as processes --heap on --gate-up interleaved --json "$base/layer-processes-warps-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
