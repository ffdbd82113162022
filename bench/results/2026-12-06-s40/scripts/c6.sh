#!/usr/bin/env bash
# Session 40, call 6: a probe build (not committed: c5's source with the routing's two stamps moved into the tables' read) that
# splits c3's ~7 us between the barrier and the tables: "counted" = participants read (the mask), "routed" =
# records, counts and begins read (before the tables' build), "tables loaded" = built.
# (c5's dynamic deal was reverted after c5, so the MoE suite is not run here: c4 ran it on the code that stays.)
# build/gpu-carry40m/probe.tar.xz holds the probe's switchyard-bench.
cd "$(dirname "$0")/../../../.."
CALL=s40c6; CARRY=""; BUDGET=120
STEP_FILTER="rror|FAILED|PASSED|passed|^  symmetric +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/probe" && tar -C "$B/probe" -xf build/gpu-carry40m/probe.tar.xz
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
step t128-probe 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $B/probe/tools/bench/switchyard-bench "${ARGS[@]}" \
  --json "$base/t128-probe.json"
python3 scripts/symmetric_stamps.py < "$base/t128-probe.log" > "$base/t128-probe.summary" 2>&1
sed -n '/^phase/,$p' "$base/t128-probe.summary"
echo "total $((SECONDS - step_start)) s"
