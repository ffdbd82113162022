#!/usr/bin/env bash
# Session 28, call 6: the landed normal combine (coordinator receiver, 24 warps, the token's ring rows looked
# up once, atomics for the block's handoffs): GPU suites that run the normal engine, processes under MPS,
# switchyard-bench as processes, then issue 20's side by side with DeepEP V1 at 8 and 4 processes.
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry28/c6.tar.gz"; BUDGET=480
STEP_FILTER="rror|^  (dispatch|combine)|verdict|PASSED|FAILED|MISMATCH|target|^combine|^cached|^layout|ran "
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
for suite in normal_engine hostile_calls internode rank_mask; do step suite-$suite 90 $T/switchyard_cuda_${suite}_test --gtest_brief=1; done
start_mps
for ranks in 8 4 2; do step proc-normal-np$ranks 60 $T/switchyard_cuda_process_ranks_test --ranks $ranks --engine normal; done
step proc-normal-2x4 60 $T/switchyard_cuda_process_ranks_test --ranks 8 --ranks-per-node 4 --engine normal
for ranks in 8 4; do
  step bench-r$ranks-t4096 60 $B/switchyard-bench --backend cuda --engine normal --ranks $ranks --tokens 4096 --iters 5 --warmup 2 --ranks-as processes --json $base/bench-r$ranks-t4096.json
  step bench-r$ranks-t128 30 $B/switchyard-bench --backend cuda --engine normal --ranks $ranks --tokens 128 --iters 30 --ranks-as processes --json $base/bench-r$ranks-t128.json
done
echo quit | nvidia-cuda-mps-control; sleep 2
step peer 240 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=120 bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
