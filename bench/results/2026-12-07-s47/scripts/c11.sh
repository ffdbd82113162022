#!/usr/bin/env bash
# Session 47 c11: issue 20's launch spread. c10: stream-ordered allocations behind the bench's hold are not it. The
# engine's processes (and its ranks as threads, which show the same spread) hold GiBs of heap each, the probe's
# almost nothing: the probe with --footprint-gib 0, 4 and 8 a process (8 processes), then with a switchyard Buffer
# of the decode call's shape in each (--with-buffer).
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe)' SWITCHYARD_PACK_OUT=build/gpu-carry47/c11.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
# Predictions: if the memory a process holds delays its launches, released-bench's starts widen with the footprint
# (toward ~2-2.8 us a process at 4-8 GiB); else they stay at ~1 us a process. With the Buffer held: ~2-2.8 us a
# process if something the Buffer sets up (its mappings, pool settings or streams) is it.
cd "$(dirname "$0")/../../../.."
CALL=s47c11; CARRY=${CARRY:-build/gpu-carry47/c11.tar.xz}; BUDGET=${BUDGET:-120}
STEP_FILTER="rror|released-bench |released-heavy|released  "
source scripts/device-call.sh
start_mps
for gib in 0 4 8; do
  step probe-footprint-$gib 60 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
    --resident-us 100 --busy-mib 64 --footprint-gib $gib
done
# Then a connected switchyard Buffer in each process (the decode call's: heap, peers mapped by IPC, the pool's
# settings, its streams), nothing called on it (--with-buffer: the probe as session 47 left it).
step probe-with-buffer 90 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
  --resident-us 100 --busy-mib 64 --with-buffer
echo "total $((SECONDS - step_start)) s"
