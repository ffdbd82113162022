#!/usr/bin/env bash
# The first GPU call after session 32 (which had no GPU). Session 31's owed c6 (every suite its last changes
# touch: the abort's two scopes, the normal suite's fixed hang, the round trip after a refusal) plus session
# 32's normal-engine changes, none of them run yet:
#   - the fresh dispatch's counts polled from the notify's host-mapped post (SWITCHYARD_NORMAL_COUNTS=poll;
#     copy stays the default): the normal suite under both, and its new tests (CudaNormalCountReadback.*,
#     the capture refusal, the timeout and bad-expert cases under both readbacks);
#   - the handle's tables and the outputs carved from one allocation each (every normal case runs them);
#   - SWITCHYARD_NORMAL_PHASES=1: the 128-token fresh dispatch's phase breakdown, the figure session 31's plan
#     asked for, with copy against poll, in place and on rings (the "normal phases:" lines, one per rank);
#   - the in-place closing barrier held by the gather's / combine's last block (close_call_by_last_block): the
#     suite's heap-input cases and refusals, and the process tests with heap inputs (one process per rank).
# Repack first (main moves on):
#   SWITCHYARD_PACK_ONLY='(normal_engine|cuda_internode_test|low_latency_test|symmetric_test|rank_mask|hostile_calls|process_ranks|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry32/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c1; CARRY="build/gpu-carry32/c1.tar.xz"; BUDGET=540
STEP_FILTER="rror|PASSED|FAILED|ERROR SUMMARY|written|after the refusal|refused:|normal phases|^  (dispatch|combine) "
source scripts/device-call.sh
T=$B/tests/cuda
step suite-normal_engine 90 $T/switchyard_cuda_normal_engine_test --gtest_brief=1
step suite-normal_engine-poll 90 env SWITCHYARD_NORMAL_COUNTS=poll $T/switchyard_cuda_normal_engine_test --gtest_brief=1
step memcheck-normal 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
for suite in internode low_latency symmetric rank_mask hostile_calls; do
  step suite-$suite 90 $T/switchyard_cuda_${suite}_test --gtest_brief=1
done
start_mps
for ranks in 2 8; do
  for heap in off on; do
    step processes-normal-np$ranks-heap-$heap 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine normal \
      --heap-tensors $heap
  done
done
BENCH=$B/tools/bench/switchyard-bench
for heap in on off; do
  for counts in copy poll; do
    step bench-r8-t128-heap-$heap-$counts 60 env SWITCHYARD_NORMAL_COUNTS=$counts SWITCHYARD_NORMAL_PHASES=1 \
      $BENCH --backend cuda --engine normal --ranks 8 --tokens 128 --iters 30 --warmup 3 --ranks-as processes \
      --normal-heap $heap --json $base/bench-r8-t128-heap-$heap-$counts.json
  done
done
for counts in copy poll; do  # issue 20's other target: 4 ranks at 24 SMs (12 channels)
  step bench-r4-t128-heap-on-$counts 60 env SWITCHYARD_NORMAL_COUNTS=$counts SWITCHYARD_NORMAL_PHASES=1 \
    $BENCH --backend cuda --engine normal --ranks 4 --tokens 128 --iters 30 --warmup 3 --ranks-as processes \
    --normal-heap on --channels 12 --json $base/bench-r4-t128-heap-on-$counts.json
done
step bench-r8-t4096-heap-on-poll 60 env SWITCHYARD_NORMAL_COUNTS=poll SWITCHYARD_NORMAL_PHASES=1 \
  $BENCH --backend cuda --engine normal --ranks 8 --tokens 4096 --iters 5 --warmup 2 --ranks-as processes \
  --normal-heap on --json $base/bench-r8-t4096-heap-on-poll.json
echo "total $((SECONDS - step_start)) s"
