#!/usr/bin/env bash
# Session 25, call 1: the fp8 push dispatch (cuda/symmetric/push.cuh). The symmetric suite by default (fp8
# pushed) and with the warps pull forced (fp8 cases), the rank-mask, hostile-call and MoE suites, memcheck on
# the small fp8 cases; then push against the warps pull: the symmetric dispatch at 4096 tokens x 8 threads, and
# the MoE layer at 4096 x 8 threads in alternating rounds beside torch's two fp8 grouped GEMMs, one rank, 128.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry25/c1.tar.gz"; BUDGET=570
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|^layer|^alone|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|fp8|symmetric  "
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
MB=$B/tools/moe_bench/switchyard-moe-bench
SB=$B/tools/bench/switchyard-bench
step symmetric 200 ${T}_symmetric_test --gtest_brief=1
step symmetric-warps-fp8 90 env SWITCHYARD_SYMMETRIC_PULL=warps ${T}_symmetric_test --gtest_brief=1 --gtest_filter='*fp8*:*Fp8*'
step moe-layer 150 ${T}_moe_layer_test --gtest_brief=1
step rank-mask 120 ${T}_rank_mask_test --gtest_brief=1
step hostile 60 ${T}_hostile_calls_test --gtest_brief=1
step memcheck-fp8 90 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*Small_R1_fp8*:*R2_fp8*:*R4_fp8_round*'
for round in 1 2; do
  step sym-push-r$round 40 $SB --backend cuda --engine symmetric --ranks 8 --tokens 4096 --dtype fp8 --json "$base/sym-push-r$round.json"
  step sym-warps-r$round 40 env SWITCHYARD_SYMMETRIC_PULL=warps $SB --backend cuda --engine symmetric --ranks 8 --tokens 4096 --dtype fp8 --json "$base/sym-warps-r$round.json"
done
for round in 1 2 3; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-push-r$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-push-r$round.json"
  step layer-warps-r$round 40 env SWITCHYARD_SYMMETRIC_PULL=warps $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-warps-r$round.json"
done
step one-rank-push 40 $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-push.json"
step one-rank-warps 40 env SWITCHYARD_SYMMETRIC_PULL=warps $MB --ranks 1 --tokens 32768 --iters 3 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/one-rank-warps.json"
step layer-128-push-checked 60 $MB --tokens 128 --iters 5 --warmup 1 --check-tokens 4 --json "$base/layer-128-push-checked.json"
echo "total $((SECONDS - step_start)) s"
