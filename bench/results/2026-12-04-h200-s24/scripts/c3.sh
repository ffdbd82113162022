#!/usr/bin/env bash
# Session 24, call 3: few-row calls with W1 interleaved take fp8_w1_interleaved_to_bf16 (pingpong tiles, W1's
# scales per 64 rows) and the separate SwiGLU kernel instead of the m128 epilogue. The MoE suite, memcheck
# on the epilogue test (both interleaved kinds against halves) and the smallest fp8 layer; racecheck on the
# halves fp8 GEMM's tile test (is call 2's report inside CUTLASS's cp.async scale loads there as well?);
# 128 tokens halves against interleaved; two more alternating rounds at 4096 tokens as 8 threads.
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry24/c3.tar.gz"; BUDGET=480
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^layer|^alone|^weights|^  (dispatch|gemm|swiglu|combine)|verdict|rror|torch|fp8"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda_moe_layer_test
MB=$B/tools/moe_bench/switchyard-moe-bench
step moe-layer 150 $T --gtest_brief=1
step memcheck-epilogue 90 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='*Epilogue*:*Small_R1_fp8*'
step racecheck-tiles 120 compute-sanitizer --tool racecheck --error-exitcode 9 $T --gtest_filter='MoeGroupedGemmTiles.*'
grep -E "Race reported" "$base/racecheck-tiles.log" | sed 's/+0x[0-9a-f]*//' | sort | uniq -c | head
step layer128-halves 75 $MB --tokens 128 --iters 20 --warmup 3 --json "$base/layer128-halves.json"
step layer128-interleaved 75 $MB --tokens 128 --iters 20 --warmup 3 --gate-up interleaved --json "$base/layer128-interleaved.json"
for round in 1 2; do
  step torch-t$round 25 python3 tools/peer/torch_grouped_gemm.py --tokens 4096 --recipes fp8 --json "$base/torch-t$round.json"
  step layer-threads-halves-r$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --json "$base/layer-threads-halves-r$round.json"
  step layer-threads-interleaved-r$round 40 $MB --tokens 4096 --iters 5 --warmup 1 --check-tokens 0 --gate-up interleaved --json "$base/layer-threads-interleaved-r$round.json"
done
echo "total $((SECONDS - step_start)) s"
