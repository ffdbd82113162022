#!/usr/bin/env bash
# Session 43, call 1: (1) session 42's open racecheck report, its minimal kernel (s42 c6: warps 2-3 in a counted
# named barrier before a __syncthreads, then a cross-warp read of shared memory), run both ways; (2) the symmetric
# dispatch clearing its shared stamp record only when the call stamps (216 bytes of shared stores off every
# block's start with stamps off): its suites, rank masks, memcheck and racecheck; (3) the decode dispatch with
# stamps (the ranks' start spread and steps, for reference) and without (the case the change is for).
# Predictions:
#   (1) 0 hazards without the named barrier; if the same RAW kind appears with it, the symmetric reports are the
#       tool's (then: a line beside gpu-check's sanitizer filter, with the evidence).
#   (2) the suites pass bitwise; dispatch time unchanged within noise (-0.1 to -0.3 us at most: 27 stores a block).
# Build the probe: nvcc -O3 -arch=sm_90a -lineinfo -o build/racecheck-probe/named_barrier_racecheck \
#   bench/results/2026-12-06-s42/scripts/named_barrier_racecheck.cu
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|cuda_symmetric_test|rank_mask_test|process_ranks_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry43/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s43c1; CARRY="build/gpu-carry43/c1.tar.xz"; BUDGET=500
STEP_FILTER="rror|FAILED|PASSED|passed|failed|hazard|RACECHECK SUMMARY|ERROR SUMMARY|named barrier|^  (symmetric|low_latency) +[0-9]"
source scripts/device-call.sh
for named in 0 1; do
  step named-barrier-$named 60 compute-sanitizer --tool racecheck --racecheck-report all \
    build/racecheck-probe/named_barrier_racecheck $named
done
C=$B/tests/cuda
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step rank-mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step memcheck-symmetric 60 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
step racecheck-symmetric 90 compute-sanitizer --tool racecheck $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  sed -n '/^step/,$p' "$base/$1.summary"; }
BENCH=$B/tools/bench/switchyard-bench; C=$B/tests/cuda
start_mps
step p128-stamps 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" --json "$base/p128-stamps.json"
summary p128-stamps
step p128-nostamps 40 $BENCH "${ARGS[@]}" --json "$base/p128-nostamps.json"
step processes-sym-heap-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
echo "total $((SECONDS - step_start)) s"
