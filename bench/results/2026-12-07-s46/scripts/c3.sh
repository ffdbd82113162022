#!/usr/bin/env bash
# Session 46 c3: the symmetric dispatch's write_layout as one range of [L, C] entries dealt to every helper thread
# (c2's ncu source page: the per-expert loop in every helper warp was 65 % of the one-rank dispatch's 17.7 M warp
# instructions). The new build against c2's bench (old/switchyard-bench, the loop as it was), alternating, then the
# suites that run the symmetric dispatch.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|cuda_symmetric_test|rank_mask|moe_layer_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry46/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
#   plus build/gpu-carry46/c3-old-bench.tar.xz (c2's bench as old/switchyard-bench).
# Predictions: one rank, 128 tokens (heap, pull combine; the ncu case, 132 blocks, 256 local experts): dispatch
#   5-8 us faster (the loop was ~7 us of ~80); 8 processes, 128 tokens (issue 20's decode call; 16 blocks and
#   32 local experts a rank): 0.5-1.5 us faster, inside the rounds' spread; symmetric 199/199, rank masks 42/42,
#   MoE 40/40; memcheck on the symmetric one-rank cases 0 errors.
cd "$(dirname "$0")/../../../.."
CALL=s46c3; CARRY=${CARRY:-"build/gpu-carry46/c3.tar.xz build/gpu-carry46/c3-old-bench.tar.xz"}; BUDGET=${BUDGET:-400}
STEP_FILTER="rror|FAILED|PASSED|timed out|test suites ran|^  symmetric +[0-9]"
source scripts/device-call.sh
C=$B/tests/cuda
ONE=(--backend cuda --engine symmetric --ranks 1 --tokens 128 --iters 40 --warmup 5 --symmetric-heap on
  --symmetric-combine pull)
for round in 1 2; do
  step one-rank-old-$round 40 $B/old/switchyard-bench "${ONE[@]}" --json "$base/one-rank-old-$round.json"
  step one-rank-new-$round 40 $B/tools/bench/switchyard-bench "${ONE[@]}" --json "$base/one-rank-new-$round.json"
done
step symmetric 120 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step rank-mask 45 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step memcheck-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*' --gtest_brief=1
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
start_mps
for round in 1 2; do
  step eight-old-$round 40 $B/old/switchyard-bench "${EIGHT[@]}" --json "$base/eight-old-$round.json"
  step eight-new-$round 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --json "$base/eight-new-$round.json"
done
echo quit | nvidia-cuda-mps-control; sleep 2
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
