#!/usr/bin/env bash
# Session 36, call 10: the 4-rank 128-token layout + dispatch in the side by side (switchyard ~135 us of device
# time, c1) against the bench's fresh dispatch at the same shape (65 us, c9): where do the other ~60 us go? The
# side by side once more at 4 x 128 with SWITCHYARD_NORMAL_PHASES=stamps (the clock stamps without events):
# the notify's points, the rows kernel's start and the host's counts-seen and launched stamps per call.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench)' SWITCHYARD_PACK_PYTHON=1 \
#   SWITCHYARD_PACK_OUT=build/gpu-carry36/c10.tar.xz bash scripts/gpu-pack.sh build/gpu-local
# carry it, .deepep-full and .deps/wheels.
cd "$(dirname "$0")/../../../.."
CALL=c10; CARRY="build/gpu-carry36/c10.tar.xz"; BUDGET=300
STEP_FILTER="rror|fail|^==|median|entered|^published|^exchanged|^notify|^rows|^layout"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
step peer-4x128 150 env SWITCHYARD_NORMAL_PHASES=stamps DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="4" \
  PEER_TOKENS=128 PEER_TIMEOUT=60 PEER_ARGS="--switchyard-heap-inputs --sleep-us 2000" bash scripts/peer-deepep.sh
python3 scripts/normal_stamps.py < "$base/peer-4x128.log" | tee "$base/peer-stamps.summary"
echo "total $((SECONDS - step_start)) s"
