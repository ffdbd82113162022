#!/usr/bin/env bash
# For the next GPU call (not run in session 31: no device time was left). The suites that session 31's last
# changes touch, none of them run since: the normal suite (whose c5 hang was its test's: the call after a
# timeout raises the core's Error, which the test did not catch, leaving rank 1 waiting; plus the round trip
# after a refusal and ACallAfterAFailureThatStoppedTheKernelsIsRefusedQuotingIt), and, since waits now watch
# only an abort for good (rank_aborted) while a refused call's kernels stop at their start (call_stopped),
# internode, low_latency, symmetric, rank masks and hostile calls. Repack first (main moves on):
#   SWITCHYARD_PACK_ONLY='(normal_engine|cuda_internode_test|low_latency_test|symmetric_test|rank_mask|hostile_calls)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry31/c6.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry31/c6.tar.xz"; BUDGET=400
STEP_FILTER="rror|PASSED|FAILED|written|after the refusal|refused:|Expected|Which is|Actual"
source scripts/device-call.sh
T=$B/tests/cuda
for suite in normal_engine internode low_latency symmetric rank_mask hostile_calls; do
  step suite-$suite 90 stdbuf -oL $T/switchyard_cuda_${suite}_test --gtest_brief=1
done
echo "total $((SECONDS - step_start)) s"
