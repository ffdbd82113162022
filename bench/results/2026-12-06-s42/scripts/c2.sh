#!/usr/bin/env bash
# Session 42, call 2: where the engines' ~2.8 us a rank of start spread comes from (c1: the symmetric dispatch's
# first blocks 0, 2.8, 5.7, ... 19.7 us after the moment at 8 processes, where session 36's probe consumers,
# short kernels, started ~0.6 us a process apart): the launch probe's new released-resident (the consumer's
# blocks stay on their SMs 100 us, as an engine's kernel waits for its peers) and released-heavy (the same
# with ~106 registers a thread, the dispatch's 116) beside released, with the dispatch's grid (16 x 512,
# 200 KiB). Prediction (hypothesis: a launch under MPS waits behind the other processes' resident grids):
# released 3-8 us earliest to last; released-resident and/or released-heavy ~0-20 us (2.5-3 us a process).
# If all three read alike, residency and registers are ruled out. Then the suites of the engines c1 did not
# run on this build (normal, low_latency, rank masks, killed ranks) and the GPU pytest.
# Pack: SWITCHYARD_PACK_ONLY='(launch-probe|normal_engine_test|cuda_low_latency_test|rank_mask_test|killed_rank_test)' \
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry42/c2.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it and .deps/wheels.
cd "$(dirname "$0")/../../../.."
CALL=s42c2; CARRY="build/gpu-carry42/c2.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|passed|failed|killed|^released|starts after"
source scripts/device-call.sh
use_carried_python
C=$B/tests/cuda
start_mps
step probe8 120 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 40 --warmup 5 --shared-kib 200
step probe4 90 $B/tools/launch_probe/switchyard-launch-probe --procs 4 --iters 40 --warmup 5 --shared-kib 200
for engine in symmetric low_latency normal; do
  step killed-$engine-np4 60 $C/switchyard_cuda_killed_rank_test --ranks 4 --engine $engine
done
step pytest-gpu 150 python3 -m pytest -q tests/python/test_cuda_tensors.py tests/python/test_cuda_ranks.py \
  tests/python/test_layout_entry.py tests/python/test_moe.py -p no:cacheprovider
echo quit | nvidia-cuda-mps-control; sleep 2
step normal 120 $C/switchyard_cuda_normal_engine_test --gtest_brief=1
step low_latency 90 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
