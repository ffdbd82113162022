#!/usr/bin/env bash
# Session 47 c8: issue 20's launch spread. c7: a dispatch whose every block returns at its start stamp keeps the
# staircase in released calls (18-21 us at the last of 8, as the full kernel): the launch, not the kernel's work.
# What the probe's consumers never matched: the dispatch asks for 200 KiB of dynamic shared memory plus ~2.8 KB
# static, more than the 196 KB an SM's second-largest L1/shared split gives, so each of its SMs must take the largest
# split (228 KB); the probe's consumers asked for 192 KiB. The probe at 192 and at 200 KiB, alternating.
# Pack: c6's (build/gpu-carry47/c6.tar.xz: the probe at 28b8cf4).
# Predictions: at 200 KiB the resident and heavy consumers' starts ~2-2.8 us a process apart (~18-20 us at the last
# of 8) if the largest split is what spaces the launches; as at 192 KiB (~0.7 us a process) if not.
cd "$(dirname "$0")/../../../.."
CALL=s47c8; CARRY=${CARRY:-build/gpu-carry47/c6.tar.xz}; BUDGET=${BUDGET:-150}
STEP_FILTER="rror|released-resident|released-heavy|released-bench|released  |== "
source scripts/device-call.sh
start_mps
for round in 1 2; do
  for kib in 192 200; do
    step probe-$kib-$round 60 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
      --resident-us 100 --busy-mib 64 --shared-kib $kib
  done
done
echo "total $((SECONDS - step_start)) s"
