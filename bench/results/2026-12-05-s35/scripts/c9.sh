#!/usr/bin/env bash
# Session 35's last GPU minutes: the normal suite on the build without late outputs (the withdrawn gather's case
# in the default path), and memcheck on that case.
# Pack: SWITCHYARD_PACK_ONLY='normal_engine_test' SWITCHYARD_PACK_OUT=build/gpu-carry35/c9.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c9; CARRY="build/gpu-carry35/c9.tar.xz"; BUDGET=120
STEP_FILTER="rror|FAILED|PASSED|SUMMARY"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda_normal_engine_test
step suite-normal 60 $T --gtest_brief=1
step memcheck-withdrawn 50 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_brief=1 \
  --gtest_filter='*OutputsFailAfterTheCounts*'
echo "total $((SECONDS - step_start)) s"
