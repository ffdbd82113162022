#!/usr/bin/env bash
# Prepared in session 43 for the next GPU time (not run): is the ranks' launch spread (the last of 8 ranks' first
# block 19.5 us after the first on an H200, session 43 c1; ~2.8 us a rank on the H100 too, threads alike) the
# memory traffic of the ranks already running? The probe's resident consumers (session 42: the dispatch's grid,
# shared memory and registers, but idle while resident) start 0.6-0.9 us a process apart; released-busy's
# consumers stream through 256 MiB each while resident, as the engines' kernels move rows from their first
# microseconds. In the sampled warm-up calls of c1, where the ranks were not released together, the last rank
# started only ~7.5 us after the first.
# Prediction: if the traffic spaces the launches, released-busy's starts are ~2.5-3 us a process apart (~18-21 us at
# the last of 8) while released-resident stays at ~0.7; if both stay near 0.7, the traffic is ruled out and the next
# suspect is the engines' kernel code itself (session 42's plan item 2: a libswitchyard kernel behind the hold).
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe)' SWITCHYARD_PACK_OUT=build/gpu-carry44/c2.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s44c2; CARRY="build/gpu-carry44/c2.tar.xz"; BUDGET=300
STEP_FILTER="rror|released|clock offset"
source scripts/device-call.sh
start_mps
for procs in 8 4; do
  step probe-$procs 120 $B/tools/launch_probe/switchyard-launch-probe --procs $procs --iters 100 --warmup 10 \
    --resident-us 100 --busy-mib 256
done
echo "total $((SECONDS - step_start)) s"
