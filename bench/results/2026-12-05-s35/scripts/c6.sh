#!/usr/bin/env bash
# Session 35's third call: (1) the GPU clock's start for the side by side (src/cuda/timing/gpu_timer.hpp;
# its pytest); (2) switchyard-launch-probe: where the ~45 us between the notify's end and the rows kernel's
# start goes at 8 processes (host seeing the flag, the host's own part, or the launch reaching the GPU);
# (3) the bench's stamps with the children's output appended (c4's lines overwrote each other); (4) the side by
# side with every rank's stream held until one moment on the GPU's clock (c5's 128-token figures at 8 ranks
# carried the gloo barrier's skew: per-rank minimums 116-127 us against medians of 1154-2594 for DeepEP's
# cached dispatch), heap inputs then staged.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|switchyard-launch-probe)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry35/c6.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it, .deps/wheels (pytest) and .deepep-full.
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry35/c6.tar.xz"; BUDGET=580
STEP_FILTER="rror|passed|failed|^==|^clock|^host-launch|^back-to-back|median|target|warning|^layout|^cached|^combine"
source scripts/device-call.sh
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links .deps/wheels --target /tmp/pytest-site pytest
export PYTHONPATH=$B/pkg:/tmp/pytest-site
step pytest-timer 60 python3 -m pytest -q tests/python/test_cuda_tensors.py -k gpu_timer -p no:cacheprovider
start_mps
P=$B/tools/launch_probe/switchyard-launch-probe
step probe-gather-grid 120 $P --procs 1,4,8 --iters 200
step probe-no-shared 60 $P --procs 8 --shared-kib 0 --iters 200
step stamps-normal 40 env SWITCHYARD_NORMAL_PHASES=1 $B/tools/bench/switchyard-bench --backend cuda --engine normal \
  --ranks 8 --tokens 128 --iters 30 --warmup 3 --ranks-as processes --normal-heap on --json "$base/stamps-normal.json"
python3 scripts/normal_stamps.py < "$base/stamps-normal.log" | tee "$base/stamps-normal.summary"
echo quit | nvidia-cuda-mps-control; sleep 2
for inputs in heap staged; do
  step peer-$inputs 200 env DEEPEP_SRC=.deepep-full OUT=$base/peer-$inputs PEER_RANKS="8 4" PEER_TIMEOUT=110 \
    PEER_ARGS="--switchyard-$inputs-inputs --sleep-us 2000" bash scripts/peer-deepep.sh
done
echo "total $((SECONDS - step_start)) s"
