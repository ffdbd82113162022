#!/usr/bin/env bash
# Session 47 c9: issue 20's launch spread, the engine's host path against its kernel. c7: the dispatch returning at
# its start stamp keeps the staircase. Experiment build (not main: c9-stamp-kernel.patch on main at 0a92e8b,
# packed as exp/switchyard-bench): with SWITCHYARD_EXPERIMENT_STAMP_KERNEL=1 the engine's call (its whole host path,
# allocations included) launches a bare kernel instead of the dispatch, with the same parameters and grid, no
# dynamic shared memory, no named barrier, that only stamps its start; =2 the same with the dispatch's 200 KiB. The
# combines return at their entry (SWITCHYARD_EXPERIMENT_RETURN_AT_START) so that nothing reads the unwritten
# outputs; c7's early return and a control run again beside them.
# Predictions: the bare kernel keeps the staircase (~18-20 us at the last of 8) if the engine's host path is what
# spaces the launches; it falls to ~8-13 us (the probe's released-bench) if the dispatch kernel's own attributes do.
cd "$(dirname "$0")/../../../.."
CALL=s47c9; CARRY=${CARRY:-build/gpu-carry47/c9-exp-bench.tar.xz}; BUDGET=${BUDGET:-150}
STEP_FILTER="rror|^  symmetric +[0-9]|first blocks|last rank's first block"
source scripts/device-call.sh
BENCH=$B/exp/switchyard-bench
start_mps
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull --ranks-as processes)
run_variant() {  # name, env assignments...
  local name=$1; shift
  step $name 40 env "$@" SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${EIGHT[@]}" --json "$base/$name.json"
  stamps_summary $name > /dev/null
  grep -E "first blocks|last rank's first block" "$base/$name.summary" | head -3
}
for round in 1 2; do
  run_variant bare-$round SWITCHYARD_EXPERIMENT_STAMP_KERNEL=1 SWITCHYARD_EXPERIMENT_RETURN_AT_START=1
  run_variant bare-smem-$round SWITCHYARD_EXPERIMENT_STAMP_KERNEL=2 SWITCHYARD_EXPERIMENT_RETURN_AT_START=1
done
run_variant early SWITCHYARD_EXPERIMENT_RETURN_AT_START=1
run_variant control SWITCHYARD_EXPERIMENT_NONE=1
echo "total $((SECONDS - step_start)) s"
