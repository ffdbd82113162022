#!/usr/bin/env bash
# Session 26, call 6: the heap receive area's public views (Buffer::symmetric_receive). The symmetric suite (its
# new HeapReceive cases: every rank dispatches into its views, the push announced and bitwise the reference),
# the process-per-rank test with heap tensors at 2, 4 and 8 processes (the fp8 round pushes into the views across
# processes), the low_latency process test (shared round trip), the rank-mask suite; memcheck on the new cases.
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry26/c6.tar.gz"; BUDGET=270
STEP_FILTER="PASSED|FAILED|ERROR SUMMARY|rror|pass|fail"
source scripts/device-call.sh
T=$B/tests/cuda/switchyard_cuda
step symmetric 110 ${T}_symmetric_test --gtest_brief=1
step memcheck-receive 40 compute-sanitizer --tool memcheck --error-exitcode 9 ${T}_symmetric_test --gtest_filter='*HeapReceive*'
step rank-mask 40 ${T}_rank_mask_test --gtest_brief=1
start_mps
for ranks in 2 4 8; do
  step process-symmetric-heap-np$ranks 30 ${T}_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step process-low-latency-np4 30 ${T}_process_ranks_test --ranks 4 --engine low_latency
step process-symmetric-np4 30 ${T}_process_ranks_test --ranks 4 --engine symmetric
echo "total $((SECONDS - step_start)) s"
