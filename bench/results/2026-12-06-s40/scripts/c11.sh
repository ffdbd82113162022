#!/usr/bin/env bash
# Session 40, call 11: the routing's exchange rows loaded 8 blocks at a time (cuda/symmetric/routing.cuh,
# place_routes), on the last rank's way to the barrier (c2: counted -> routed ~6 us for the last rank at 128 x 8,
# the 16 blocks' rows read one (or a few) at a time). Prediction: routed (last) -1 to -2 us, dispatch -1 to -2 us
# at 128 x 8 processes; 4096 unchanged. Old = c9's build (build/gpu-carry40f/c9.tar.xz). Then the suites the
# routing touches: symmetric, rank masks, the MoE layer.
# Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|rank_mask_test|moe_layer_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry40g/c11.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s40c11; CARRY="build/gpu-carry40g/c11.tar.xz"; BUDGET=330
STEP_FILTER="rror|FAILED|PASSED|^  symmetric +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/old" && tar -C "$B/old" -xf build/gpu-carry40f/c9.tar.xz
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
start_mps
for round in 1 2; do
  for build in old new; do
    bin=$B/tools/bench/switchyard-bench; [[ $build == old ]] && bin=$B/old/tools/bench/switchyard-bench
    step p128-$build-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --json "$base/p128-$build-$round.json"
    python3 scripts/symmetric_stamps.py < "$base/p128-$build-$round.log" > "$base/p128-$build-$round.summary" 2>&1
    grep -E '^(counted|routed|barrier)' "$base/p128-$build-$round.summary"
  done
done
echo quit | nvidia-cuda-mps-control; sleep 2
C=$B/tests/cuda
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
