#!/usr/bin/env bash
# Session 36, call 6: c5's probe released its processes' kernels within 3.3-7.7 us of the moment (no ~5 us step
# per process), so the engines' 39 us spread comes from something between the hold and their first kernel.
# Hypothesis: the calls' stream-ordered allocations (the symmetric dispatch allocates ~470 MB of outputs a call
# at 128 tokens x 8 ranks) from the default pool, whose release threshold 0 gives its memory back at every
# synchronisation, so each call maps it again. released-alloc (the pool as CUDA leaves it) against
# released-kept (its memory kept), at 64 and 512 MiB.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe)' SWITCHYARD_PACK_OUT=build/gpu-carry36/c6.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c6; CARRY="build/gpu-carry36/c6.tar.xz"; BUDGET=200
STEP_FILTER="rror|fail|^==|^released"
source scripts/device-call.sh
start_mps
P=$B/tools/launch_probe/switchyard-launch-probe
step probe-64 60 $P --procs 8 --iters 60 --alloc-mib 64
step probe-512 60 $P --procs 8 --iters 60 --alloc-mib 512
echo "total $((SECONDS - step_start)) s"
