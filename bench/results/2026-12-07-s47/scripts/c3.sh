#!/usr/bin/env bash
# Session 47 c3: the symmetric dispatch's row tables built with segmented warp sums and sliced walks (d5479ac), and
# block 0 routing alone when a call's pairs fit one batch of its routing warps (607212d), against c2's bench
# (old/switchyard-bench, main at 111f6f2), alternating; SWITCHYARD_SYMMETRIC_ROUTING=every on the new build
# isolates the tables. Then the suites that run the symmetric dispatch, with the default routing and with every
# block routing, the sanitizers on the one-rank cases and the tables' test, the normal suite's racecheck with
# its narrowed filter (be053e8), and the process ranks.
# Pack: SWITCHYARD_PACK_ONLY='(cuda_symmetric_test|rank_mask|moe_layer|hostile_calls|normal_engine|process_ranks|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry47/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
#   plus build/gpu-carry47/c3-old-bench.tar.xz (c2's bench as old/switchyard-bench).
# Predictions (H100; c2's figures as the reference):
#   one rank, 128 tokens (132 blocks, 256 local experts, 1024 pairs): tables' build 6.5 -> ~1.5 us; first block
#   -> routed 11.0 (median) / 13.8 (last) -> ~5-6 us; dispatch 46.8 -> 33-37 us; `every` alone (tables only)
#   ~41-42 us.
#   8 processes (16 blocks a rank, 32 local experts, 1024 pairs): tables' build -0.3 to -1 us, routing -1 to -2 us;
#   dispatch 112.7 -> 110-111.5 us (inside two rounds' spread at the low end).
#   Row tables test passes (both builds, every shape); symmetric 199 + the new tests, rank masks 42/42, MoE 40/40,
#   hostile 6/6, all with the default routing and (symmetric, rank masks) with `every`; memcheck 0 errors;
#   racecheck on the symmetric one-rank cases only the known false reports, and none in the tables' test
#   (its kernel has no named barrier); the normal racecheck passes in well under its 170 s.
cd "$(dirname "$0")/../../../.."
CALL=s47c3; CARRY=${CARRY:-"build/gpu-carry47/c3.tar.xz build/gpu-carry47/c3-old-bench.tar.xz"}; BUDGET=${BUDGET:-580}
STEP_FILTER="rror|FAILED|PASSED|timed out|test suites ran|^  symmetric +[0-9]|racecheck_reports|SUMMARY"
source scripts/device-call.sh
C=$B/tests/cuda
SYM=$C/switchyard_cuda_symmetric_test
ONE=(--backend cuda --engine symmetric --ranks 1 --tokens 128 --iters 40 --warmup 5 --symmetric-heap on
  --symmetric-combine pull)
for round in 1 2; do
  step one-rank-old-$round 40 $B/old/switchyard-bench "${ONE[@]}" --json "$base/one-rank-old-$round.json"
  step one-rank-every-$round 40 env SWITCHYARD_SYMMETRIC_ROUTING=every $B/tools/bench/switchyard-bench "${ONE[@]}" \
    --json "$base/one-rank-every-$round.json"
  step one-rank-new-$round 40 $B/tools/bench/switchyard-bench "${ONE[@]}" --json "$base/one-rank-new-$round.json"
done
step one-rank-stamps 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $B/tools/bench/switchyard-bench "${ONE[@]}" \
  --json "$base/one-rank-stamps.json"
stamps_summary one-rank-stamps
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
start_mps
for round in 1 2; do
  step eight-old-$round 40 $B/old/switchyard-bench "${EIGHT[@]}" --json "$base/eight-old-$round.json"
  step eight-every-$round 40 env SWITCHYARD_SYMMETRIC_ROUTING=every $B/tools/bench/switchyard-bench "${EIGHT[@]}" \
    --json "$base/eight-every-$round.json"
  step eight-new-$round 40 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --json "$base/eight-new-$round.json"
done
step processes-symmetric-heap-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric --heap-tensors on
step processes-symmetric-np4 60 $C/switchyard_cuda_process_ranks_test --ranks 4 --engine symmetric
echo quit | nvidia-cuda-mps-control; sleep 2
step row-tables 60 $SYM --gtest_filter='SymmetricRowTablesCuda.*:SymmetricCudaGrid.*' --gtest_brief=1
step symmetric 150 $SYM --gtest_brief=1
step symmetric-every 150 env SWITCHYARD_SYMMETRIC_ROUTING=every $SYM --gtest_brief=1
step rank-mask 45 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step rank-mask-every 45 env SWITCHYARD_SYMMETRIC_ROUTING=every $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step hostile 45 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step memcheck-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $SYM \
  --gtest_filter='*Small_R1*:SymmetricRowTablesCuda.*' --gtest_brief=1
step racecheck-symmetric 120 bash -c "compute-sanitizer --tool racecheck $SYM --gtest_filter='*Small_R1*' \
  --gtest_brief=1 > '$base/racecheck-symmetric-raw.log' 2>&1; python3 scripts/racecheck_reports.py \
  --allow 'RowTables::build|load_count\(' '$base/racecheck-symmetric-raw.log'"
step racecheck-normal 150 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool racecheck --error-exitcode 1 \
  $C/switchyard_cuda_normal_engine_test --gtest_brief=1 \
  --gtest_filter='EdgeCases/*Small_R1_fp8_wide_rings:Biases/*Small_R1_fp8_wide_rings:*Small_R1_fp8_heap_inputs*:*ExpertIdOutOfRange*'
step racecheck-row-tables 60 compute-sanitizer --tool racecheck --error-exitcode 1 $SYM \
  --gtest_filter='SymmetricRowTablesCuda.*' --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
