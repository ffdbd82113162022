#!/usr/bin/env bash
# Session 42, call 4: first, the symmetric dispatch's start stamp moved before the block's first global load (the
# state's call count): whether the ranks' ~2.8 us a rank of start spread is the launch or that first load.
# Prediction: if the load serialises (e.g. a page walk per MPS client), the first-instruction spread falls to
# ~0.7 us a rank (~5 us at the last); if it stays ~2.8 us a rank, the launch itself is it. Then gpu-check's
# sanitizer stage on this build (memcheck, racecheck and synccheck on each suite's one-rank cases: normal,
# low_latency, symmetric, rank masks), and the suites of the engines whose GPU-scope signals moved into ptx.cuh
# once more under SWITCHYARD_SIGNAL_SCOPE=sys (the system-scope path, whose code did not change). Expected: every
# run clean / passing.
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|cuda_low_latency_test|cuda_symmetric_test|rank_mask_test|switchyard-bench)' \
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry42/c4.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s42c4; CARRY="build/gpu-carry42/c4.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|ERROR SUMMARY|^  symmetric +[0-9]|first blocks|^(signal|loads|tables)"
source scripts/device-call.sh
C=$B/tests/cuda
start_mps
for round in 1 2; do
  step sym128-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $B/tools/bench/switchyard-bench --backend cuda \
    --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer --symmetric-heap on \
    --symmetric-combine pull --ranks-as processes --json "$base/sym128-$round.json"
  python3 scripts/symmetric_stamps.py < "$base/sym128-$round.log" > "$base/sym128-$round.summary" 2>&1
  sed -n '/^phase/,/^counted/p;/^first blocks/p' "$base/sym128-$round.summary"
done
echo quit | nvidia-cuda-mps-control; sleep 2
declare -A FILTER=([normal_engine]='*Small_R1*:*ExpertIdOutOfRange*' [low_latency]='*Small_R1*' [symmetric]='*Small_R1*'
  [rank_mask]='*Small_R1*')
for suite in normal_engine low_latency symmetric rank_mask; do
  for tool in memcheck racecheck synccheck; do
    step sanitizer-$tool-$suite 90 env SWITCHYARD_NORMAL_TEST_TIMEOUT=120 compute-sanitizer --tool $tool \
      --error-exitcode 1 $C/switchyard_cuda_${suite}_test --gtest_filter="${FILTER[$suite]}"
  done
done
for suite in normal_engine low_latency symmetric; do
  step $suite-sys 150 env SWITCHYARD_SIGNAL_SCOPE=sys $C/switchyard_cuda_${suite}_test --gtest_brief=1
done
echo "total $((SECONDS - step_start)) s"
