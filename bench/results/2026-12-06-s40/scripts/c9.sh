#!/usr/bin/env bash
# Session 40, call 9: the prefill side of this session's push changes, and a killed rank. The flat walk deals
# ~32768 rows a receiver at 4096 tokens x 8 (4 rounds of every warp's lanes) where the old walk took each
# source's share in turn: prediction, dispatch at 4096 x 8 processes (heap tensors, push, pull combine) level or
# a few us faster than session-start main (s39's c5 build; s39 c2 measured 1605.0 us on an H100); combine
# unchanged. Then the killed-rank test on the symmetric engine (4 processes under MPS), which c4 missed.
# Pack: SWITCHYARD_PACK_ONLY='(killed_rank_test|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry40f/c9.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local; s39c5.tar.xz = build/gpu-carry39/c5.tar.xz (the old bench).
cd "$(dirname "$0")/../../../.."
CALL=s40c9; CARRY="build/gpu-carry40f/c9.tar.xz"; BUDGET=420
STEP_FILTER="rror|FAILED|PASSED|passed|survivor|^  symmetric +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/old" && tar -C "$B/old" -xf build/gpu-carry40f/s39c5.tar.xz
ARGS=(--backend cuda --engine symmetric --ranks 8 --start timer --symmetric-tokens 4096 --expert-capacity auto
  --iters 6 --warmup 2 --ranks-as processes --symmetric-heap on --symmetric-combine pull)
start_mps
step killed-symmetric-np4 90 $B/tests/cuda/switchyard_cuda_killed_rank_test --ranks 4 --engine symmetric
step p4096-new 120 $B/tools/bench/switchyard-bench "${ARGS[@]}" --json "$base/p4096-new.json"
step p4096-old 120 $B/old/tools/bench/switchyard-bench "${ARGS[@]}" --json "$base/p4096-old.json"
echo "total $((SECONDS - step_start)) s"
