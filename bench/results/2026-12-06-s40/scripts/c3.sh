#!/usr/bin/env bash
# Session 40, call 3: the push's walk flattened over its sources, and the records, counts and begins loaded in
# one pass (c2's stamps: drained -> walked ~18 us, passed -> issued 8.4 us at 128 x 8 processes, H100).
# Prediction: drained -> walked (median) 18 -> <= 3 us; passed -> issued 8.4 -> 3-4 us; released (median) ~109
# -> 90-95 us; dispatch 130 -> 112-118 us as processes, 118.5 -> 100-106 as threads; combine unchanged. Old
# build = c2's bench (main plus the stamps; build/gpu-carry40o/old.tar.xz holds it alone), two rounds each,
# alternating; then the suites the kernel's change touches (every path now loads its tables in
# load_call_tables); c4.sh runs the rest (rank masks, hostile calls, a killed rank, the MoE layer).
# Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|process_ranks_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry40a/c3a.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s40c3; CARRY="build/gpu-carry40a/c3a.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|passed|^  symmetric +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/old" && tar -C "$B/old" -xf build/gpu-carry40o/old.tar.xz
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  grep -E '^(barrier|tables|last load|stores|walked|released)' "$base/$1.summary"; }
start_mps
for round in 1 2; do
  for build in old new; do
    bin=$B/tools/bench/switchyard-bench; [[ $build == old ]] && bin=$B/old/tools/bench/switchyard-bench
    step p128-$build-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --ranks-as processes \
      --json "$base/p128-$build-$round.json"
    summary p128-$build-$round
  done
done
C=$B/tests/cuda
for ranks in 2 4 8; do
  step processes-heap-np$ranks 60 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step processes-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric
echo quit | nvidia-cuda-mps-control; sleep 2
for build in old new; do
  bin=$B/tools/bench/switchyard-bench; [[ $build == old ]] && bin=$B/old/tools/bench/switchyard-bench
  step t128-$build 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --json "$base/t128-$build.json"
  summary t128-$build
done
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step sanitizer-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
echo "total $((SECONDS - step_start)) s"
