#!/usr/bin/env bash
# Session 52 c2 (NOT RUN: 11 starts failed (00:13-01:57), then new machines were paused; session 51's, on carry 52: main f6189d7, resolve() keyed by the stream id alone and a capturing stream's GPU read from its context): c1's decisive part alone, for when the device time left is short (six starts failed before it):
# is the dependent launch's memcheck failure (s49 c2) the tool's, and is memcheck clean on our kernels with the
# launch on? Then the symmetric decode bench off and on. Same binaries and predictions as c1 (its header).
cd "$(dirname "$0")/../../../.."
CALL=s52c2; CARRY=${CARRY:-"build/gpu-carry52/all.tar.xz"}; BUDGET=${BUDGET:-240}
STEP_FILTER="round|FAIL|PASSED|SUMMARY|pass \\(|rror|kernel launches|^  dispatch  |^  combine  "
source scripts/device-call.sh
C=$B/tests/cuda
R=bench/results/2026-12-07-s49/scripts/pdl_sanitizer_repro.cu
step repro-build 60 nvcc -arch=sm_90a -o "$base/pdl_repro" "$R"
step repro-plain 20 "$base/pdl_repro"
step repro-memcheck 45 compute-sanitizer --tool memcheck "$base/pdl_repro"
SWITCHYARD_DEPENDENT_LAUNCH=on step memcheck-on-symmetric 60 compute-sanitizer --tool memcheck --error-exitcode 1 \
  $C/switchyard_cuda_symmetric_test --gtest_filter='*Small_R1*:-*InputsThePreviousKernelWritesLate*' --gtest_brief=1
SWITCHYARD_DEPENDENT_LAUNCH=on step memcheck-on-late-writer 30 compute-sanitizer --tool memcheck --error-exitcode 1 \
  $C/switchyard_cuda_symmetric_test --gtest_filter='*InputsThePreviousKernelWritesLate*' --gtest_brief=1
SB=$B/tools/bench/switchyard-bench
SYM=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
start_mps
SWITCHYARD_DEPENDENT_LAUNCH=off step sym8-off 30 $SB "${SYM[@]}" --json "$base/sym8-off.json"
SWITCHYARD_DEPENDENT_LAUNCH=on step sym8-on 30 $SB "${SYM[@]}" --json "$base/sym8-on.json"
echo quit | nvidia-cuda-mps-control; sleep 1
SWITCHYARD_DEPENDENT_LAUNCH=on step memcheck-on-moe 60 compute-sanitizer --tool memcheck --error-exitcode 1 \
  $C/switchyard_cuda_moe_layer_test --gtest_filter='*Small_R1*' --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
