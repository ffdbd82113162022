#!/usr/bin/env bash
# Session 42, call 4: gpu-check's sanitizer stage on this build (memcheck, racecheck and synccheck on each suite's
# one-rank cases: normal, low_latency, symmetric, rank masks, the device transport), and the suites of the engines
# whose GPU-scope signals moved into ptx.cuh once more under SWITCHYARD_SIGNAL_SCOPE=sys (the system-scope path,
# whose code did not change). Expected: every run clean / passing.
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|cuda_low_latency_test|cuda_symmetric_test|rank_mask_test|device_transport_test)' \
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry42/c4.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s42c4; CARRY="build/gpu-carry42/c4.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|ERROR SUMMARY"
source scripts/device-call.sh
C=$B/tests/cuda
declare -A FILTER=([normal_engine]='*Small_R1*:*ExpertIdOutOfRange*' [low_latency]='*Small_R1*' [symmetric]='*Small_R1*'
  [rank_mask]='*Small_R1*' [device_transport]='*Small_R1*')
for suite in normal_engine low_latency symmetric rank_mask device_transport; do
  for tool in memcheck racecheck synccheck; do
    step sanitizer-$tool-$suite 90 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool $tool \
      --error-exitcode 1 $C/switchyard_cuda_${suite}_test --gtest_filter="${FILTER[$suite]}"
  done
done
for suite in normal_engine low_latency symmetric; do
  step $suite-sys 150 env SWITCHYARD_SIGNAL_SCOPE=sys $C/switchyard_cuda_${suite}_test --gtest_brief=1
done
echo "total $((SECONDS - step_start)) s"
