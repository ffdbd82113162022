#!/usr/bin/env bash
# Session 42, call 6: is c4/c5's racecheck report a false one of the tool? Every reported pair has a routing warp
# (warps 2+, which synchronise among themselves on named barrier 1 with a thread count) on one side and warp 0 on
# the other, across a __syncthreads. named_barrier_racecheck.cu (beside this script; nvcc -O3 -arch=sm_90a
# -lineinfo, carried in build/racecheck-probe): warps 0-3 write, __syncthreads, warp 0 reads; with argument 1,
# warps 2-3 first take part in bar.sync 1, 64. Prediction: 0 hazards without the named barrier; if racecheck
# reports the same kind of RAW hazard with it (writers warps 2-3 only), the symmetric reports are the tool's.
cd "$(dirname "$0")/../../../.."
mkdir -p "$OUT"
for named in 0 1; do
  echo "== named=$named"
  timeout 60 compute-sanitizer --tool racecheck --racecheck-report all build/racecheck-probe/named_barrier_racecheck $named 2>&1 | tee "$OUT/named-$named.log" | grep -E "hazard|Thread|SUMMARY|named barrier" | head -12
done
