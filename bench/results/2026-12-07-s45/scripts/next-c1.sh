#!/usr/bin/env bash
# Prepared in session 45 for the next GPU time (not run; c3.sh, the same checks, never got a machine: three starts
# failed after c2). (1) c3.sh: main with the shared-wait backoff knob removed (its device code is again session 43's byte for
# byte: `git diff ab0a61d^ HEAD -- src/device src/cuda/normal` is empty) and gpu-check's MoE racecheck allow-list,
# on the GPU: the suites, the MoE racecheck through scripts/racecheck_reports.py, one more racecheck run of the
# normal ring case that stops intermittently, process ranks at 4. (2) Where the one-rank symmetric dispatch's 17.7 M
# warp instructions go (session 45's c2: ~30x what moving and casting 1024 rows takes): ncu's SourceCounters on its
# details page, the instructions executed and the stall reasons per source line.
# Predictions: (1) as c3.sh says. (2) one or two loops hold most of the instructions (a poll, or a per-block walk
# over all experts or all routing blocks); if it is a wait, the 8-rank decode call (16 blocks a rank) pays it too
# and it is issue 20's next lever.
# Pack: as c3.sh (build/gpu-carry45/c3.tar.xz) plus switchyard-bench, or c3's pack alone with the bench added:
#   SWITCHYARD_PACK_ONLY='(switchyard-bench|normal_engine|cuda_low_latency_test|cuda_symmetric_test|hostile_calls|rank_mask|moe_layer_test|process_ranks)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry46/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
here=$(dirname "$0")
CARRY=${CARRY:-build/gpu-carry46/c1.tar.xz} BUDGET=${BUDGET:-420} bash "$here/c3.sh"
CALL=s46c1-ncu; CARRY=${CARRY:-build/gpu-carry46/c1.tar.xz}; BUDGET=150
STEP_FILTER="rror|Duration"
source scripts/device-call.sh
step ncu-dispatch-source 120 ncu --clock-control none -k regex:symmetric_dispatch -s 3 -c 1 --section SourceCounters \
  --section WarpStateStats --print-details all $B/tools/bench/switchyard-bench --backend cuda --engine symmetric \
  --ranks 1 --tokens 128 --iters 3 --warmup 2 --symmetric-heap on --symmetric-combine pull
sed -n '/Source Counters/,$p' "$base/ncu-dispatch-source.log" | head -60
