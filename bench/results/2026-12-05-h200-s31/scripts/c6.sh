#!/usr/bin/env bash
# Session 31's sixth call: the normal suite after c5 (whose one hang was the test's: the call after a
# timeout raises the core's Error, which the test did not catch, leaving rank 1 waiting), with the new
# ACallAfterAFailureThatStoppedTheKernelsIsRefusedQuotingIt. Carry: build/gpu-carry31/c6.tar.xz
# (SWITCHYARD_PACK_ONLY='(normal_engine)' bash scripts/gpu-pack.sh build/gpu-local).
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry31/c6.tar.xz"; BUDGET=120
STEP_FILTER="rror|PASSED|FAILED|written|after the refusal|refused:|Expected|Which is|Actual"
source scripts/device-call.sh
T=$B/tests/cuda
step suite-normal_engine 60 stdbuf -oL $T/switchyard_cuda_normal_engine_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
