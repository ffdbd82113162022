#!/usr/bin/env bash
# Session 45 c1 (prepared in session 44 as next-c1.sh): the shared-wait backoff knob
# (SWITCHYARD_SHARED_WAIT_BACKOFF_NS, cuda/backend/shared_wait_backoff.hpp), built in session 44 and never run.
# (1) The normal suite's one-rank cases and the knob's own tests (the reference bits with the reducing warps
# sleeping 200 ns between polls; the parsing). (2) The hypothesis of session 44's c3: racecheck stops two one-rank
# ring cases (Small_R1_fp8, Small_R1_tuned) because 23 warps spin on shared memory without backoff. The two cases
# under racecheck with the knob at 0 and at 200, each bounded at 40 s a wait. (3) What the knob costs or gives on
# the hardware: the normal engine with rings (no heap inputs), 8 processes, 4096 and 128 tokens, 0 against 200 in
# alternation.
# Predictions: (1) passes. (2) at 0 both cases time out as in c3; at 200 both pass with 0 hazards (if they still
# stop, the spinning is ruled out and the next suspect is the tool's handling of the reducing warps' TMA store
# waits). (3) the combine at 4096 level within the rounds' spread or up to ~3 % faster (the waiting warps' polls
# leave issue slots to the reducing ones); at 128 within +-3 us. If (2) and (3) hold, 200 becomes the default and
# gpu-check's normal racecheck passes as it is.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|normal_engine_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry45/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s45c1; CARRY="build/gpu-carry45/c1.tar.xz"; BUDGET=570
STEP_FILTER="rror|FAILED|PASSED|passed|failed|timed out|hazard|RACECHECK SUMMARY|^  normal +[0-9]"
source scripts/device-call.sh
BENCH=$B/tools/bench/switchyard-bench; T=$B/tests/cuda/switchyard_cuda_normal_engine_test
step normal-r1-and-backoff 150 $T --gtest_brief=1 --gtest_filter='*Small_R1*:CudaNormalSharedWaitBackoff.*'
for backoff in 0 200; do
  step racecheck-backoff-$backoff 100 env SWITCHYARD_SHARED_WAIT_BACKOFF_NS=$backoff SWITCHYARD_NORMAL_TEST_TIMEOUT=40 \
    compute-sanitizer --tool racecheck --error-exitcode 1 $T --gtest_filter='*Small_R1_fp8:*Small_R1_tuned*'
done
start_mps
N=(--backend cuda --engine normal --ranks 8 --ranks-as processes --start timer --iters 8 --warmup 2)
for tokens in 4096 128; do
  for backoff in 0 200 0 200; do
    left=$((BUDGET - (SECONDS - step_start) - 10))
    [ "$left" -gt 45 ] || break
    step n$tokens-backoff-$backoff-$SECONDS 45 env SWITCHYARD_SHARED_WAIT_BACKOFF_NS=$backoff $BENCH "${N[@]}" \
      --tokens $tokens --json "$base/n$tokens-backoff-$backoff-$SECONDS.json"
  done
done
echo "total $((SECONDS - step_start)) s"
