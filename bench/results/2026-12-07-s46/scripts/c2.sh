#!/usr/bin/env bash
# Session 46 c2: main at 738610b on the GPU (the first try, packed at c8102e4, got no machine).
#   (1) 1bd223c: the MoE layer builds one runner per GEMM whose tile its few-rows and many-rows pairs share (with
#       SwiGLU in GEMM 1 and rows written home both pairs were the same kernels twice): the MoE suite.
#   (2) c8102e4: a symmetric call refused because the ranks' calls differ leaves the Buffer usable (host change in
#       cuda_backend.cpp's classification): the hostile-calls suite, whose mismatch test now makes the next call alike
#       and checks it against the reference (symmetric: goes through; low_latency: refused for good, saying so); the
#       symmetric and low_latency suites, whose host error path this is.
#   (2b) 738610b: low_latency's refusal for a peer's other shape stops that call's waits alone
#       (LowLatencyDeviceState::mismatched_sequence) instead of the rank for good: the low_latency suites (one node
#       and two), the hostile mismatch test for both engines, memcheck on the one-rank low_latency cases.
#   (4) Why racecheck stops the normal suite's small-ring cases (c1: a receiver waited with its sender's tail at 0):
#       the reading is that the tool does not keep a channel's sender and receiver blocks running together. The
#       new case Small_R1_fp8_wide_rings is Small_R1_fp8 with rings that hold a channel's every token (64 slots
#       for 20), so no sender waits for its receiver: racecheck on it 3 times, and Small_R1_fp8 once beside it.
#       Predicted, if the reading holds: the wide rings pass 3 of 3 (0 hazards); Small_R1_fp8 passes or stops.
#   (3) ncu's source page (SASS, per instruction: executed instructions and stall samples) of the one-rank symmetric
#       dispatch at 128 tokens: c1's SourceCounters section printed only totals (17.8 M warp instructions).
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|cuda_low_latency_test|cuda_low_latency_internode_test|cuda_symmetric_test|hostile_calls|moe_layer_test|normal_engine)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry46/c2.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# Predictions: (1) MoE 40/40 (39 + the new CPU-side test); (2) hostile 7 ran, 6 passed (one needs two GPUs), the
#   mismatch test passing for both engines (its next call going through); symmetric 199/199, low_latency 59/59,
#   low_latency across nodes as before, memcheck 0 errors; (3) one or two loops hold most
#   instructions (a poll, or a per-block walk over all 256 local experts, which a one-rank call has and an
#   8-rank call has not).
cd "$(dirname "$0")/../../../.."
CALL=s46c2; CARRY=${CARRY:-build/gpu-carry46/c2.tar.xz}; BUDGET=${BUDGET:-500}
STEP_FILTER="rror|FAILED|PASSED|timed out|test suites ran"
source scripts/device-call.sh
C=$B/tests/cuda
step hostile 60 $C/switchyard_cuda_hostile_calls_test
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step symmetric 120 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step low-latency 60 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step low-latency-internode 90 $C/switchyard_cuda_low_latency_internode_test --gtest_brief=1
step memcheck-low-latency 90 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_low_latency_test \
  --gtest_filter='*Small_R1*' --gtest_brief=1
step ncu-dispatch-sass 150 ncu --clock-control none -k regex:symmetric_dispatch -s 3 -c 1 --section SourceCounters \
  --page source --print-source sass --csv $B/tools/bench/switchyard-bench --backend cuda --engine symmetric \
  --ranks 1 --tokens 128 --iters 3 --warmup 2 --symmetric-heap on --symmetric-combine pull
wc -l "$base/ncu-dispatch-sass.log"
head -c 3000 "$base/ncu-dispatch-sass.log" | tail -c 1500
for run in 1 2 3; do
  step racecheck-wide-rings-$run 60 env SWITCHYARD_NORMAL_TEST_TIMEOUT=40 compute-sanitizer --tool racecheck \
    --error-exitcode 1 $C/switchyard_cuda_normal_engine_test --gtest_filter='EdgeCases/*Small_R1_fp8_wide_rings'
done
step racecheck-small-rings 60 env SWITCHYARD_NORMAL_TEST_TIMEOUT=40 compute-sanitizer --tool racecheck \
  --error-exitcode 1 $C/switchyard_cuda_normal_engine_test --gtest_filter='EdgeCases/*Small_R1_fp8'
echo "total $((SECONDS - step_start)) s"
