#!/usr/bin/env bash
# Session 40, call 5: the push's units dealt out dynamically (a rank counter the warps take from), with rows in
# ~4 units a pusher at decode sizes. c3's stamps: the blocks of one rank drained 66-95 us after the call's first
# block at 128 x 8 processes (one unit a warp, fixed), and the call ends with its last block.
# Prediction: drained first -> last 28 -> <= 15 us; released (last) ~105 -> 95-99; dispatch 119.3 -> 110-114 us as
# processes, 106.5 -> 98-102 as threads; combine unchanged. Old build = c3's new bench (build/gpu-carry40o).
# Then the suites of the change (symmetric, memcheck, process ranks, rank masks, hostile); c6 runs the MoE
# layer's. Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|process_ranks_test|rank_mask_test|hostile_calls_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry40c/c5.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s40c5; CARRY="build/gpu-carry40c/c5.tar.xz"; BUDGET=480
STEP_FILTER="rror|FAILED|PASSED|passed|^  symmetric +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/old" && tar -C "$B/old" -xf build/gpu-carry40o/old5.tar.xz
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
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 60 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
