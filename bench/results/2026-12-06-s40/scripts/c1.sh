#!/usr/bin/env bash
# Session 39, call 6: the barrier-to-first-row gap of the push (c5: 9.6 us, passed -> issued) A/B.
# Change: each source record copied with independent 8-byte loads through L2 (one round trip, not one per
# dependent field read), and the begins' counts loaded a group of 8 sources at a time before summing.
# Prediction: passed -> issued 9.6 -> 3-5 us; the dispatch at 128 x 8 processes -4 to -6 us (130.9 / 132.2 in
# c5); combine unchanged. Old build (c5's) against new, one round (device time nearly spent); then the suite.
# Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry39/c6.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local   (c5.tar.xz is the old build)
cd "$(dirname "$0")/../../../.."
CALL=s40c1; CARRY="build/gpu-carry39/c6.tar.xz"; BUDGET=300
STEP_FILTER="rror|FAILED|PASSED|^  symmetric +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/old" && tar -C "$B/old" -xf build/gpu-carry39/c5.tar.xz
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
start_mps
for round in 1 2; do
  for build in old new; do
    bin=$B/tools/bench/switchyard-bench; [[ $build == old ]] && bin=$B/old/tools/bench/switchyard-bench
    step p128-$build-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --json "$base/p128-$build-$round.json"
    python3 scripts/symmetric_stamps.py < "$base/p128-$build-$round.log" > "$base/p128-$build-$round.summary" 2>&1
    grep -E '^(barrier|last load|stores|released)' "$base/p128-$build-$round.summary"
  done
done
echo quit | nvidia-cuda-mps-control; sleep 2
step symmetric 220 $B/tests/cuda/switchyard_cuda_symmetric_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
