#!/usr/bin/env bash
# Session 44, call 2: (1) session 43's next-c2 (the launch probe's released-busy against released-resident at 8
# and 4 processes; its prediction is in bench/results/2026-12-06-s43/scripts/next-c2.sh). (2) Issue 21's margin at
# 4096 tokens: where the layer's dispatch time goes. The layer is level with torch's two GEMMs alone (session 43,
# c2), its GEMMs ~2 ms faster than torch's and its dispatch and combine ~2 ms together. The combine is at ~0.85 of
# its minimal bound (session 23); the fp8 push dispatch's bound at 8 x 4096 is ~2.2 GB of HBM traffic (~0.52 ms at
# 4.2 TB/s) but the layer's dispatch phase took ~1.0-1.4 ms in earlier sessions. Measured here: the symmetric
# engine's fp8 and bf16 dispatch at 4096 x 8 processes (heap tensors, push, pull combine) with and without the
# phase stamps, and the layer at 4096 x 8 (processes with heap tensors; threads with --timeline for its phases).
# Prediction: the fp8 dispatch at ~0.5-0.6 of its minimal bound, with the push's stores (tables built -> rows
# stored) ~0.6-0.7 ms; if so, the push's own rate is the lever, not the fixed steps (tens of us at this size).
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe|switchyard-bench|switchyard-moe-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry44/c2.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s44c2; CARRY="build/gpu-carry44/c2.tar.xz"; BUDGET=570
STEP_FILTER="rror|released|clock offset|^  symmetric +[0-9]|first blocks|^layer|phase|verdict"
source scripts/device-call.sh
BENCH=$B/tools/bench/switchyard-bench; M=$B/tools/moe_bench/switchyard-moe-bench
start_mps
for procs in 8 4; do
  step probe-$procs 60 $B/tools/launch_probe/switchyard-launch-probe --procs $procs --iters 100 --warmup 10 \
    --resident-us 100 --busy-mib 256
done
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 4096 --symmetric-tokens 4096 --expert-capacity auto
  --iters 8 --warmup 2 --start timer --symmetric-heap on --symmetric-combine pull --ranks-as processes)
step p4096-fp8-stamps 90 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" --dtype fp8 \
  --json "$base/p4096-fp8-stamps.json"
stamps_summary p4096-fp8-stamps
step p4096-fp8 90 $BENCH "${ARGS[@]}" --dtype fp8 --json "$base/p4096-fp8.json"
step p4096-bf16 90 $BENCH "${ARGS[@]}" --json "$base/p4096-bf16.json"
step moe-4096-processes 90 $M --tokens 4096 --ranks-as processes --heap on --gate-up interleaved --check-tokens 0 \
  --warmup 3 --iters 5 --json "$base/moe-4096-processes.json"
echo quit | nvidia-cuda-mps-control; sleep 2
left=$((BUDGET - (SECONDS - step_start) - 10))
[ "$left" -gt 40 ] && step moe-4096-threads-timeline "$left" $M --tokens 4096 --gate-up interleaved --check-tokens 0 \
  --warmup 3 --iters 5 --timeline --json "$base/moe-4096-threads.json"
echo "total $((SECONDS - step_start)) s"
