#!/usr/bin/env bash
# Session 45 c3: main with the shared-wait backoff knob removed (the wait is again 1254ffe's; KernelContext loses
# its field, so every kernel is rebuilt) and gpu-check's MoE racecheck allow-list. The suites on the GPU (ranks as
# threads), in order of what the change touches; the MoE layer's racecheck through scripts/racecheck_reports.py
# with gpu-check's new pattern; one more racecheck run of the normal ring case that stops intermittently; the
# process ranks (normal, symmetric) at 4. Pack:
#   SWITCHYARD_PACK_ONLY='(normal_engine|cuda_low_latency_test|cuda_symmetric_test|hostile_calls|rank_mask|moe_layer_test|process_ranks)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry45/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# Predictions: every suite passes as before session 44 (normal 228, symmetric 199, MoE 39 ...); the MoE racecheck
# passes with 22-ish reports, all allowed; the normal ring case passes or stops (about 1 in 2).
cd "$(dirname "$0")/../../../.."
CALL=s45c3; CARRY=${CARRY:-build/gpu-carry45/c3.tar.xz}; BUDGET=${BUDGET:-430}
STEP_FILTER="rror|FAILED|PASSED|timed out|racecheck_reports|RACECHECK SUMMARY|test suites ran"
source scripts/device-call.sh
C=$B/tests/cuda
step normal 150 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
MOE_KNOWN=$(sed -n "s/^  \[moe_layer\]='\(.*\)'$/\1/p" scripts/gpu-check.sh | tail -1)
echo "MoE racecheck allow-list: $MOE_KNOWN"
step racecheck-moe 120 compute-sanitizer --tool racecheck $C/switchyard_cuda_moe_layer_test --gtest_filter='*Small_R1*'
python3 scripts/racecheck_reports.py --allow "$MOE_KNOWN" "$base/racecheck-moe.log"
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step low-latency 90 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step rank-mask 60 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 60 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step racecheck-normal-fp8 70 env SWITCHYARD_NORMAL_TEST_TIMEOUT=40 compute-sanitizer --tool racecheck --error-exitcode 1 \
  $C/switchyard_cuda_normal_engine_test --gtest_filter='*Small_R1_fp8'
start_mps
for engine in normal symmetric; do
  step processes-$engine-np4 60 $C/switchyard_cuda_process_ranks_test --ranks 4 --engine $engine
done
echo "total $((SECONDS - step_start)) s"
