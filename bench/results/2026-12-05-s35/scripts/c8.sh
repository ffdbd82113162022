#!/usr/bin/env bash
# Session 35's last call, on main's build (dedf780; after_counts the default again): the normal suite (early
# and the withdrawn outputs as opt-in cases), the launch probe (its one-warp consumer fixed), the bench's
# normal fresh dispatch at 128 x 8 processes with the timer start, and the side by side with heap inputs at 8
# and 4 processes (issue 20's quote).
# Pack: SWITCHYARD_PACK_ONLY='(normal_engine_test|switchyard-bench|switchyard-launch-probe)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry35/c8.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it and .deepep-full.
cd "$(dirname "$0")/../../../.."
CALL=c8; CARRY="build/gpu-carry35/c8.tar.xz"; BUDGET=300
STEP_FILTER="rror|FAILED|PASSED|fail|^==|^clock|^mode|^host-launch|^back-to-back|target|^  normal +[0-9]"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
step suite-normal 90 $B/tests/cuda/switchyard_cuda_normal_engine_test --gtest_brief=1
start_mps
step probe 40 $B/tools/launch_probe/switchyard-launch-probe --procs 1,8 --iters 200
step normal-timer 30 $B/tools/bench/switchyard-bench --backend cuda --ranks 8 --tokens 128 --iters 30 --warmup 3 \
  --ranks-as processes --normal-heap on --engine normal --json "$base/normal-timer.json"
echo quit | nvidia-cuda-mps-control; sleep 2
step peer-heap 120 env DEEPEP_SRC=.deepep-full OUT=$base/peer-heap PEER_RANKS="8 4" PEER_TIMEOUT=110 \
  PEER_ARGS="--switchyard-heap-inputs --sleep-us 2000" bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
