#!/usr/bin/env bash
# Session 47 c6: issue 20's launch spread: c5 ruled out the bench's cache flush, c4 the kernel's code size. The
# probe's released-event (a timing event between the hold and the consumer) is the one mode that reproduces the
# engines' ~2-2.8 us a process; the bench records its phase's start event before the hold and its stop event after
# the end mark. released-bench (the probe's new mode: that sequence exactly, with the heavy resident consumer) says
# whether the bench's own events space the launches.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe)' SWITCHYARD_PACK_OUT=build/gpu-carry47/c6.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
# Predictions: released-bench ~2-2.8 us a process (~18-20 us at the last of 8) if the events are it (then the
# spread is the yardstick's and DeepEP's alike, and a timing event-free phase clock is the fix); ~0.7-1 us a process
# (as released-marks) if not, and the engine's own call is what is left.
cd "$(dirname "$0")/../../../.."
CALL=s47c6; CARRY=${CARRY:-build/gpu-carry47/c6.tar.xz}; BUDGET=${BUDGET:-150}
STEP_FILTER="rror|released|clock offset"
source scripts/device-call.sh
start_mps
step probe-8 120 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 100 --warmup 10 --resident-us 100 \
  --busy-mib 256
echo "total $((SECONDS - step_start)) s"
