#!/usr/bin/env bash
# Prepared in session 43 for the next GPU time (not run): what session 43 owes on main's build (201d731's stamp
# record, which c1 ran with the symmetric, rank-mask and np8 process-rank suites; the row tables are the
# two-pass form again, as c1 ran them). (1) The decode dispatch with stamps, two rounds, for reference against c1
# (compare on the same card only). (2) The suites that call the symmetric dispatch and did not run on 201d731: MoE,
# process ranks np2, a killed rank. (3) gpu-check's sanitizer runs that are owed or new: the normal suite's
# racecheck with SWITCHYARD_NORMAL_TEST_TIMEOUT=120 (owed since session 42), and the symmetric suite's racecheck
# through scripts/racecheck_reports.py (the known false reports allowed, anything else failing).
# Predictions: every suite passes; racecheck normal 0 hazards; racecheck symmetric ~77 reports, all of the known
# pair, so racecheck_reports.py passes it.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|moe_layer_test|cuda_symmetric_test|process_ranks_test|killed_rank_test|normal_engine_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry44/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s44c1; CARRY="build/gpu-carry44/c1.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|passed|failed|hazard|RACECHECK SUMMARY|racecheck_reports|^  symmetric +[0-9]|first blocks"
source scripts/device-call.sh
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
BENCH=$B/tools/bench/switchyard-bench; C=$B/tests/cuda
start_mps
for round in 1 2; do
  step p128-stamps-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" --json "$base/p128-stamps-$round.json"
  stamps_summary p128-stamps-$round
done
step processes-sym-heap-np2 60 $C/switchyard_cuda_process_ranks_test --ranks 2 --engine symmetric --heap-tensors on
step killed-symmetric-np4 60 $C/switchyard_cuda_killed_rank_test --ranks 4 --engine symmetric
echo quit | nvidia-cuda-mps-control; sleep 2
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step racecheck-symmetric 60 compute-sanitizer --tool racecheck $C/switchyard_cuda_symmetric_test --gtest_filter='*Small_R1*'
python3 scripts/racecheck_reports.py --allow 'RowTables::build|load_count\(' "$base/racecheck-symmetric.log"
step racecheck-normal 200 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool racecheck \
  --error-exitcode 1 $C/switchyard_cuda_normal_engine_test --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
echo "total $((SECONDS - step_start)) s"
