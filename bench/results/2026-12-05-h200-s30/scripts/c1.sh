#!/usr/bin/env bash
# Session 30's first GPU call (a GPU was lent 2 h into the session): session 29's c1 (every GPU suite, then the
# processes stage) on main at the end of session 30, which adds the ring-free in-place dispatch (gather_kernel),
# the opening stamps of every normal and internode call, and the in-place combine's range check to what they run.
# The carry holds 6 binaries (the tracked tree is 23 MB of the 64 MiB): the suites that run normal calls, and
# low_latency and symmetric, whose heap offsets moved with the normal region. Build here first:
# bash scripts/gpu-local-build.sh, then
#   SWITCHYARD_PACK_ONLY='(normal_engine|low_latency_test|symmetric_test|cuda_internode|hostile_calls|process_ranks)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry30/c1.tar.xz SWITCHYARD_PACK_PYTHON=1 bash scripts/gpu-pack.sh build/gpu-local
# (about 46 MB with xz), and carry it.
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry30/c1.tar.xz"; BUDGET=560
STEP_FILTER="rror|PASSED|FAILED|MISMATCH|ran |pass|FAIL"
source scripts/device-call.sh
T=$B/tests/cuda
for suite in normal_engine internode hostile_calls low_latency symmetric; do
  step suite-$suite 120 $T/switchyard_cuda_${suite}_test --gtest_brief=1
done
start_mps
for engine in normal low_latency symmetric; do
  for ranks in 2 4 8; do step proc-$engine-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine $engine; done
done
for engine in symmetric normal; do
  for ranks in 2 4 8; do step proc-$engine-heap-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine $engine --heap-tensors on; done
done
for engine in normal low_latency; do
  for ranks in 4 8; do step proc-$engine-np$ranks-2nodes 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --ranks-per-node $((ranks / 2)) --engine $engine; done
done
echo "total $((SECONDS - step_start)) s"
