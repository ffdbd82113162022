#!/usr/bin/env bash
# Session 36, call 5: where the timer start's kernel-start spread comes from (c1-c3: the ranks' first kernels
# start ~5 us apart each after their holds end together, up to ~39 us at 8 processes; ~13-19 us with the host
# barrier start). switchyard-launch-probe's new released modes hold every process's stream until one moment
# and time the consumer queued behind: the gather-like grid (16 x 512, 192 KiB), the same without shared
# memory, a notify-like block (1 x 1024, 128 KiB), and one warp.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|switchyard-launch-probe)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry36/c5.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry36/c5.tar.xz"; BUDGET=300
STEP_FILTER="rror|fail|^==|^released|^host-launch|^back"
source scripts/device-call.sh
start_mps
P=$B/tools/launch_probe/switchyard-launch-probe
step probe 60 $P --procs 4,8 --iters 100
step probe-noshared 40 $P --procs 8 --iters 100 --shared-kib 0
step probe-notify 40 $P --procs 8 --iters 100 --blocks 1 --threads 1024 --shared-kib 128
echo "total $((SECONDS - step_start)) s"
