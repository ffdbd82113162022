#!/usr/bin/env bash
# Session 36, call 11: the carveout hypothesis (released-l1 against released-shared); before it, c7 found the start event spreads the ranks ~2 us each; c6 refuted the allocation hypothesis for the engines (the CUDA backend keeps the default
# pool's memory; released-kept starts like released). Next suspect: the timing event the bench and the side by
# side record between the hold and the call (released-event, timing on; released-untimed, timing off), and now the parameters' size (released-params: 1536 bytes by value, as the engines' kernels take ~1.3-1.5 KB).
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry36/c11.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c11; CARRY="build/gpu-carry36/c11.tar.xz"; BUDGET=200
STEP_FILTER="rror|fail|^==|^released"
source scripts/device-call.sh
start_mps
P=$B/tools/launch_probe/switchyard-launch-probe
step probe 60 $P --procs 4,8 --iters 60 --alloc-mib 64
echo "total $((SECONDS - step_start)) s"
