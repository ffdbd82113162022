#!/usr/bin/env bash
# Session 31's second call, after session 30's c3 (the normal suite, memcheck, the bench in place against
# rings): issue 20's side by side with DeepEP V1, built here from .deepep-full, at 8 and 4 processes under
# MPS, with switchyard's deep_ep on ring inputs and then on heap-resident inputs (the in-place path).
# Carry: build/gpu-carry31/c2.tar.xz (SWITCHYARD_PACK_ONLY='(normal_engine|switchyard-bench)'
#   SWITCHYARD_PACK_PYTHON=1 bash scripts/gpu-pack.sh build/gpu-local) and .deepep-full (git archive
#   567632dd of DeepEP, with a COMMIT file).
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry31/c2.tar.xz"; BUDGET=560
STEP_FILTER="rror|PASSED|FAILED|MISMATCH|verdict|target|host cost|^  (dispatch|combine) |^combine|^cached|^layout"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
step peer 280 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=120 bash scripts/peer-deepep.sh
step peer-heap 200 env DEEPEP_SRC=.deepep-full OUT=$base/peer-heap PEER_RANKS="8 4" PEER_TIMEOUT=90 PEER_ARGS=--switchyard-heap-inputs bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
