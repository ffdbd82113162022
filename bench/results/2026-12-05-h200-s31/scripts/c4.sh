#!/usr/bin/env bash
# Session 31's fourth call. c2 showed deep_ep's calls through switchyard._torch_ops running on the Buffer's
# own stream whenever torch's current stream was its default one (reported as 0): unordered with the
# caller, timed by events that bracketed nothing, racing the next call. Fixed in _torch_ops (the default
# stream goes as cudaStreamLegacy); this call runs the GPU Python tests of _torch_ops (now also on the
# default stream) and the side by side again, which now also checks each case's last timed call. Then the
# CUDA suites for the abort's two scopes (a refused call's abort is that call's only; a failed wait's is
# for good and later calls are refused loudly instead of returning having done nothing), and the in-place
# combine reducing in both blocks of a channel (switchyard-bench --normal-heap on, 8 processes).
# Carry: build/gpu-carry31/c4.tar.xz (SWITCHYARD_PACK_ONLY='(normal_engine|cuda_internode_test|
#   hostile_calls|rank_mask|switchyard-bench)' SWITCHYARD_PACK_PYTHON=1 bash scripts/gpu-pack.sh
#   build/gpu-local), .deps/wheels (pytest) and .deepep-full.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry31/c4.tar.xz"; BUDGET=500
STEP_FILTER="rror|passed|failed|PASSED|FAILED|MISMATCH|check |verdict|target|^  (dispatch|combine) |^combine|^cached|^layout"
source scripts/device-call.sh
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links .deps/wheels --target /tmp/pytest-site pytest
export PYTHONPATH=$B/pkg:/tmp/pytest-site SWITCHYARD_EXPECT_TORCH_OPS=1
T=$B/tests/cuda
step pytest-cuda-tensors 120 python3 -m pytest -q -x tests/python/test_cuda_tensors.py -p no:cacheprovider
step peer 180 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=80 bash scripts/peer-deepep.sh
step peer-heap 150 env DEEPEP_SRC=.deepep-full OUT=$base/peer-heap PEER_RANKS="8 4" PEER_TIMEOUT=70 PEER_ARGS=--switchyard-heap-inputs bash scripts/peer-deepep.sh
start_mps
for tokens in 4096 128; do
  iters=5; [[ $tokens == 128 ]] && iters=30
  step bench-r8-t$tokens-heap-on 60 $B/tools/bench/switchyard-bench --backend cuda --engine normal --ranks 8 --tokens $tokens --iters $iters --warmup 2 --ranks-as processes --normal-heap on --json $base/bench-r8-t$tokens-heap-on.json
done
echo quit | nvidia-cuda-mps-control; sleep 2
for suite in normal_engine internode hostile_calls rank_mask; do
  step suite-$suite 90 $T/switchyard_cuda_${suite}_test --gtest_brief=1
done
echo "total $((SECONDS - step_start)) s"
