#!/usr/bin/env bash
# Session 42, call 5: whether c4's racecheck reports in the symmetric row tables came with this session: racecheck
# on the symmetric suite's one-rank cases with the session's starting build (main at 8923813, built here from a
# worktree: build/gpu-carry42/base) and with this build, one after the other, plus one case alone with the
# tool's full report. Prediction: the same hazards in both (the tables' code did not change this session but for
# one stamp between the loads and the build); if the base is clean, the stamp's placement is the suspect.
# Pack: tar -C /tmp/base/build -cJf build/gpu-carry42/c5-base.tar.xz tests/cuda/switchyard_cuda_symmetric_test
#   SWITCHYARD_PACK_ONLY='(cuda_symmetric_test)' SWITCHYARD_PACK_OUT=build/gpu-carry42/c5.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s42c5; CARRY="build/gpu-carry42/c5.tar.xz"; BUDGET=300
STEP_FILTER="RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED"
source scripts/device-call.sh
mkdir -p "$B/base" && tar -C "$B/base" -xf build/gpu-carry42/c5-base.tar.xz
step racecheck-base 90 compute-sanitizer --tool racecheck --error-exitcode 1 \
  $B/base/tests/cuda/switchyard_cuda_symmetric_test --gtest_filter='*Small_R1*'
step racecheck-new 90 compute-sanitizer --tool racecheck --error-exitcode 1 \
  $B/tests/cuda/switchyard_cuda_symmetric_test --gtest_filter='*Small_R1*'
step racecheck-one-case 60 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 20 \
  $B/tests/cuda/switchyard_cuda_symmetric_test --gtest_filter='EdgeCases/SymmetricCudaRoundTrip.MatchesTheReferenceAndTheCpuEngineBitwiseTwice/Small_R1_bf16_push'
echo "total $((SECONDS - step_start)) s"
