#!/usr/bin/env bash
# Session 47 c10: issue 20's launch spread. c9: a bare stamp kernel launched from the engine's call (its host path
# kept) still starts ~15-18 us apart at the last of 8 in released calls (the dispatch: ~19), where the probe's
# released-bench (the bench's events and marks, no engine) starts 7.7 us apart: the engine's host path carries most
# of it. Between the hold and the kernel that path enqueues only stream-ordered allocations (its tables, and the
# outputs the caller did not pass). The probe's released-bench-outputs: the bench's phase with 4 or 8 such
# allocations between the hold and the consumer.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe)' SWITCHYARD_PACK_OUT=build/gpu-carry47/c10.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
# Predictions: if allocations behind marked holds are it, released-bench-outputs ~2-2.8 us a process (~18-20 us at
# the last of 8); if not, as released-bench (~1 us a process).
cd "$(dirname "$0")/../../../.."
CALL=s47c10; CARRY=${CARRY:-build/gpu-carry47/c10.tar.xz}; BUDGET=${BUDGET:-120}
STEP_FILTER="rror|released-bench|released-outputs|released  "
source scripts/device-call.sh
start_mps
for outputs in 4 8; do
  step probe-outputs-$outputs 60 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
    --resident-us 100 --busy-mib 64 --outputs $outputs
done
echo "total $((SECONDS - step_start)) s"
