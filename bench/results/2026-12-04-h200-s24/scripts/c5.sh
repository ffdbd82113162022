#!/usr/bin/env bash
# Session 24, call 5 (call 4's build, the landed code): racecheck and synccheck on the epilogue test (does
# call 2's report inside CUTLASS's two-scale mainloop stand on this build?), and the layer at 128 tokens,
# halves against interleaved (both checked against the reference).
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry24/c4.tar.gz"; BUDGET=300
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^layer|^alone|^weights|verdict|rror"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda_moe_layer_test
MB=$B/tools/moe_bench/switchyard-moe-bench
step racecheck-epilogue 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$T" --gtest_filter='*MoeSwigluEpilogue*no_clamp*'
grep -E "Race reported" "$base/racecheck-epilogue.log" | sed 's/+0x[0-9a-f]*//' | sort | uniq -c | head
step synccheck-epilogue 60 compute-sanitizer --tool synccheck --error-exitcode 9 "$T" --gtest_filter='*MoeSwigluEpilogue*'
step layer128-halves 75 $MB --tokens 128 --iters 20 --warmup 3 --json "$base/layer128-halves.json"
step layer128-interleaved 75 $MB --tokens 128 --iters 20 --warmup 3 --gate-up interleaved --json "$base/layer128-interleaved.json"
echo "total $((SECONDS - step_start)) s"
