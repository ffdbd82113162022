#!/usr/bin/env bash
# Session 46 c1, session 45's next-c1.sh reordered to fit one call and a 64 MiB carry (the tracked tree is
# ~29.5 MB, so the process-ranks suite is left out of the pack):
#   (1) ncu's SourceCounters with --print-details all on the one-rank symmetric dispatch at 128 tokens: where its
#       17.7 M warp instructions go (session 45's c2: ~30x what moving and casting 1024 rows takes).
#   (2) main at c30daf3 (the backoff knob removed; device code byte-identical to session 43's) on the GPU: the
#       suites, the MoE racecheck through gpu-check's allow-list, one racecheck run of the normal ring case.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|normal_engine|cuda_low_latency_test|cuda_symmetric_test|hostile_calls|rank_mask|moe_layer_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry46/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# Predictions: (1) one or two loops hold most of the instructions (a poll, or a per-block walk over all
#   experts or all routing blocks); (2) every suite passes (normal 228, symmetric 199, MoE 39 ...); the MoE
#   racecheck's reports all allowed; the normal ring case passes or stops (about 1 in 2).
cd "$(dirname "$0")/../../../.."
CALL=s46c1; CARRY=${CARRY:-build/gpu-carry46/c1.tar.xz}; BUDGET=${BUDGET:-560}
STEP_FILTER="rror|FAILED|PASSED|timed out|racecheck_reports|RACECHECK SUMMARY|test suites ran|Duration"
source scripts/device-call.sh
C=$B/tests/cuda
step ncu-dispatch-source 120 ncu --clock-control none -k regex:symmetric_dispatch -s 3 -c 1 --section SourceCounters \
  --section WarpStateStats --print-details all $B/tools/bench/switchyard-bench --backend cuda --engine symmetric \
  --ranks 1 --tokens 128 --iters 3 --warmup 2 --symmetric-heap on --symmetric-combine pull
sed -n '/Source Counters/,$p' "$base/ncu-dispatch-source.log" | head -80
step normal 150 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
step symmetric 120 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
MOE_KNOWN=$(sed -n "s/^  \[moe_layer\]='\(.*\)'$/\1/p" scripts/gpu-check.sh | tail -1)
step racecheck-moe 100 compute-sanitizer --tool racecheck $C/switchyard_cuda_moe_layer_test --gtest_filter='*Small_R1*'
python3 scripts/racecheck_reports.py --allow "$MOE_KNOWN" "$base/racecheck-moe.log"
step low-latency 60 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step rank-mask 45 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 45 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step racecheck-normal-fp8 60 env SWITCHYARD_NORMAL_TEST_TIMEOUT=40 compute-sanitizer --tool racecheck --error-exitcode 1 \
  $C/switchyard_cuda_normal_engine_test --gtest_filter='*Small_R1_fp8'
echo "total $((SECONDS - step_start)) s"
