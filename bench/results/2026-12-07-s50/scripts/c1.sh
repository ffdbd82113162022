#!/usr/bin/env bash
# Session 50 c1: is the dependent launch's memcheck failure (s49 c2) the tool's or ours?
# 1. s49/scripts/pdl_sanitizer_repro.cu (two kernels outside the library: a writer that triggers its dependents at its start
#    and writes 300 us later, a reader launched with programmatic stream serialization that waits with
#    griddepcontrol.wait), plain and under compute-sanitizer memcheck.
# 2. gpu-check's sanitizer stage whole (owed since s46's build): memcheck, racecheck and synccheck on every suite's
#    one-rank cases, then memcheck with SWITCHYARD_DEPENDENT_LAUNCH=on on normal_engine, symmetric, low_latency.
# 3. The late-writer test under memcheck with the launch on, alone (s49 c2's failure, again, last).
# Pack: SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry50/all.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# Predictions (written before the run):
# - repro plain: 5 of 5 rounds sum 65536. Under memcheck: some rounds short (the tool starts the dependent at the
#   trigger and does not hold it at the wait), which would make s49's failure the tool's; if it is clean under the
#   tool too, the library has a read before its wait and the default stays off until it is found.
# - sanitizer stage: every run passes (racecheck with its known false reports); memcheck with the launch on: 0
#   errors on the three suites (the late-writer case left out).
# - the late-writer test under memcheck: fails as in s49 c2 (out-of-bounds writes in push_copied_row).
cd "$(dirname "$0")/../../../.."
CALL=s50c1; CARRY=${CARRY:-"build/gpu-carry50/all.tar.xz"}; BUDGET=${BUDGET:-500}
STEP_FILTER="round|FAIL|PASSED|SUMMARY|pass \(|rror"
source scripts/device-call.sh
R=bench/results/2026-12-07-s49/scripts/pdl_sanitizer_repro.cu
step bench-header 40 $B/tools/bench/switchyard-bench --backend cuda --engine symmetric --ranks 2 --tokens 16 --iters 2 --warmup 1 --json $base/bench-header.json
grep -h "kernel launches" $base/bench-header.log
step repro-build 60 nvcc -arch=sm_90a -o "$base/pdl_repro" "$R"
step repro-plain 20 "$base/pdl_repro"
step repro-memcheck 60 compute-sanitizer --tool memcheck "$base/pdl_repro"
step sanitizer 380 env OUT=$base/gpu-check SWITCHYARD_GPU_BUILD=$B SWITCHYARD_GPU_STAGES=sanitizer \
  SWITCHYARD_SANITIZER_TIMEOUT=120 bash scripts/gpu-check.sh
grep -h "^== " $base/sanitizer.log | tail -40
step late-writer-memcheck 45 env SWITCHYARD_DEPENDENT_LAUNCH=on compute-sanitizer --tool memcheck --error-exitcode 1 \
  $B/tests/cuda/switchyard_cuda_symmetric_test --gtest_filter='*InputsThePreviousKernelWritesLate*' --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
