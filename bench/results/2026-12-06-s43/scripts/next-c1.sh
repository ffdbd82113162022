#!/usr/bin/env bash
# Prepared in session 43 for the next GPU time (not run): what session 43 owes on main's build (the one-pass row
# tables of b751519 and 201d731's stamp record), in one call. (1) The decode dispatch with stamps, two rounds:
# prediction, the tables' build step 2.2 -> 1.2-1.7 us for the last rank (c1 on an H200) and the dispatch -0.5 to
# -1 us (one warp scan and one __syncthreads fewer; compare on the same card only). (2) The suites that call the
# build and did not run on it: MoE, rank masks, process ranks, a killed rank. (3) The normal suite's racecheck as
# gpu-check runs it (SWITCHYARD_NORMAL_TEST_TIMEOUT=120), owed since session 42.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|moe_layer_test|rank_mask_test|process_ranks_test|killed_rank_test|normal_engine_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry44/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s44c1; CARRY="build/gpu-carry44/c1.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|passed|failed|hazard|RACECHECK SUMMARY|^  symmetric +[0-9]|build|first blocks"
source scripts/device-call.sh
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  sed -n '/^step/,$p' "$base/$1.summary"; }
BENCH=$B/tools/bench/switchyard-bench; C=$B/tests/cuda
start_mps
for round in 1 2; do
  step p128-stamps-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" --json "$base/p128-stamps-$round.json"
  summary p128-stamps-$round
done
for ranks in 2 8; do
  step processes-sym-heap-np$ranks 60 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step killed-symmetric-np4 60 $C/switchyard_cuda_killed_rank_test --ranks 4 --engine symmetric
echo quit | nvidia-cuda-mps-control; sleep 2
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step rank-mask 60 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step racecheck-normal 200 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool racecheck \
  --error-exitcode 1 $C/switchyard_cuda_normal_engine_test --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
echo "total $((SECONDS - step_start)) s"
