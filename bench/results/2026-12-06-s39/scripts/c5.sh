#!/usr/bin/env bash
# Session 39, call 5: where the bf16 push's ~67 us after the barrier go at 128 tokens x 8 (c2). The push's stamps
# now split it: passed -> issued = the begins and tables loaded; issued -> drained = the producer warp's rows
# stored; drained -> released = the walk for src_info / src_slot and the wait for every source's done word.
# Processes with heap tensors (two runs) and threads; then the push tests of the symmetric suite.
# Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry39/c5.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry39/c5.tar.xz"; BUDGET=300
STEP_FILTER="rror|FAILED|PASSED|^  symmetric +[0-9]"
source scripts/device-call.sh
BENCH=($B/tools/bench/switchyard-bench --backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40
  --warmup 5 --start timer --symmetric-heap on --symmetric-combine pull)
start_mps
for round in 1 2; do
  step p128-push-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks-as processes \
    --json "$base/p128-push-$round.json"
  python3 scripts/symmetric_stamps.py < "$base/p128-push-$round.log" > "$base/p128-push-$round.summary" 2>&1
  sed -n '/^phase/,$p' "$base/p128-push-$round.summary"
done
echo quit | nvidia-cuda-mps-control; sleep 2
step t128-push 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks-as threads --json "$base/t128-push.json"
python3 scripts/symmetric_stamps.py < "$base/t128-push.log" > "$base/t128-push.summary" 2>&1
sed -n '/^phase/,$p' "$base/t128-push.summary"
step symmetric-push 90 $B/tests/cuda/switchyard_cuda_symmetric_test --gtest_brief=1 \
  --gtest_filter='*Bf16*:*HeapReceive*:SymmetricCudaPath*'
echo "total $((SECONDS - step_start)) s"
