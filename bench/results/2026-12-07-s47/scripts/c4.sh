#!/usr/bin/env bash
# Session 47 c4: issue 20's launch spread (the decode dispatch's ranks start ~2.8 us a process apart, 19.6 us at the
# last of 8, where the probe's consumers start ~0.6 us apart; ruled out so far: grid shape, shared memory,
# registers, residency, parameter size, L1/shared split, allocations, host-mapped marks, the running grids' memory
# traffic). Still different: the kernel's code, ~19 K instructions against the probe's few hundred bytes. The probe's
# new modes (f5bb77d): released-big-code (a resident consumer carrying ~256 KB of straight-line code it does not
# run) and released-big-run (every thread runs it once at its start). Then the decode call's stamps on main.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-launch-probe|switchyard-bench)' SWITCHYARD_PACK_OUT=build/gpu-carry47/c4.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
# Predictions: if the launched kernel's size spaces the launches, released-big-code's starts ~2-3 us a process
# apart (~20 us at the last of 8); if the cold code of the grids already running delays the later launches,
# released-big-run's do; if neither, both at the resident consumer's ~0.6 us a process, and code size is ruled out.
cd "$(dirname "$0")/../../../.."
CALL=s47c4; CARRY=${CARRY:-build/gpu-carry47/c4.tar.xz}; BUDGET=${BUDGET:-300}
STEP_FILTER="rror|released|clock offset|^  symmetric +[0-9]|first blocks|^step|last rank"
source scripts/device-call.sh
BENCH=$B/tools/bench/switchyard-bench
start_mps
step probe-8 120 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 100 --warmup 10 --resident-us 100 \
  --busy-mib 256
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
for round in 1 2; do
  step eight-stamps-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${EIGHT[@]}" --json "$base/eight-stamps-$round.json"
  stamps_summary eight-stamps-$round
done
echo "total $((SECONDS - step_start)) s"
