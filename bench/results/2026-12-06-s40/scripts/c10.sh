#!/usr/bin/env bash
# Session 40, call 10: c9's 4096-token A/B again (a second round as processes, then threads), the same builds.
cd "$(dirname "$0")/../../../.."
CALL=s40c10; CARRY="build/gpu-carry40f/c9.tar.xz"; BUDGET=200
STEP_FILTER="rror|FAILED|^  symmetric +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/old" && tar -C "$B/old" -xf build/gpu-carry40f/s39c5.tar.xz
ARGS=(--backend cuda --engine symmetric --ranks 8 --start timer --symmetric-tokens 4096 --expert-capacity auto
  --iters 6 --warmup 2 --symmetric-heap on --symmetric-combine pull)
start_mps
step p4096-old 120 $B/old/tools/bench/switchyard-bench "${ARGS[@]}" --ranks-as processes --json "$base/p4096-old.json"
step p4096-new 120 $B/tools/bench/switchyard-bench "${ARGS[@]}" --ranks-as processes --json "$base/p4096-new.json"
echo quit | nvidia-cuda-mps-control; sleep 2
step t4096-new 120 $B/tools/bench/switchyard-bench "${ARGS[@]}" --json "$base/t4096-new.json"
step t4096-old 120 $B/old/tools/bench/switchyard-bench "${ARGS[@]}" --json "$base/t4096-old.json"
echo "total $((SECONDS - step_start)) s"
