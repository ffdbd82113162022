#!/usr/bin/env bash
# Session 38, call 4: issue 20's acceptance run, DeepEP V1 (567632dd, built here without NVSHMEM) and
# switchyard.deep_ep side by side, 128 and 4096 tokens, 8 and 4 processes under MPS, with the side by side's
# timer start now timing both libraries from the hold's release to an end mark (release_mark, c3).
# Carry build/gpu-carry38b (c2's pack: the Python package), .deepep-full and .deps/wheels.
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry38b/c2.tar.xz"; BUDGET=520
STEP_FILTER="rror|fail|^==|^\| "
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
step peer 500 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TOKENS="128 4096" PEER_TIMEOUT=110 \
  PEER_ARGS="--switchyard-heap-inputs --sleep-us 2000" bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
