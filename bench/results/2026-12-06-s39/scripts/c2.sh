#!/usr/bin/env bash
# Session 39, call 2: the bf16 push against the pull it replaces (bench/NOTES.md, session 39, the prediction).
# 128 tokens x 8 processes with heap tensors (x, recv_x in a bf16 receive area, y; pull combine), and as
# threads; 4096 x 8 as threads and as processes with heap tensors. SWITCHYARD_SYMMETRIC_PULL=tma is the pull
# (zero-copy: x read in place), unset the push; alternating, two rounds at 128.
# Prediction (written before the run): 128 x 8 processes, the dispatch moves 132 MB instead of 235 (x read once,
# not once per row): its pull phase ~60-68 us -> ~35-45, dispatch 133 -> 105-115 us on an H100 (H200 ~118 -> ~95);
# combine unchanged (+-3). 4096 x 8: 7.5 GB -> 4.2 GB, 2554 us -> 1450-1800 (the push's stores run below the pull's
# TMA rate: the fp8 push reached ~2.5 TB/s where the pull ~3). Threads like processes.
# Pack: the same carry as c1.
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry39/c1.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|^  symmetric +[0-9]|copy bandwidth|minimal"
source scripts/device-call.sh
BENCH=($B/tools/bench/switchyard-bench --backend cuda --engine symmetric --ranks 8 --start timer)
SYM=(--symmetric-heap on --symmetric-combine pull)
for round in 1 2; do
  for pull in push tma; do
    env_pull=(); [[ $pull == tma ]] && env_pull=(SWITCHYARD_SYMMETRIC_PULL=tma)
    step t128-$pull-$round 40 env "${env_pull[@]}" SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --tokens 128 \
      --iters 40 --warmup 5 --ranks-as threads "${SYM[@]}" --json "$base/t128-$pull-$round.json"
  done
done
start_mps
for round in 1 2; do
  for pull in push tma; do
    env_pull=(); [[ $pull == tma ]] && env_pull=(SWITCHYARD_SYMMETRIC_PULL=tma)
    step p128-$pull-$round 40 env "${env_pull[@]}" SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --tokens 128 \
      --iters 40 --warmup 5 --ranks-as processes "${SYM[@]}" --json "$base/p128-$pull-$round.json"
    python3 scripts/symmetric_stamps.py < "$base/p128-$pull-$round.log" > "$base/p128-$pull-$round.summary" 2>&1
    grep -E "^(start|barrier|released)" "$base/p128-$pull-$round.summary" | head -4
  done
done
for pull in push tma; do
  env_pull=(); [[ $pull == tma ]] && env_pull=(SWITCHYARD_SYMMETRIC_PULL=tma)
  step p4096-$pull 120 env "${env_pull[@]}" "${BENCH[@]}" --symmetric-tokens 4096 --expert-capacity auto \
    --iters 10 --warmup 2 --ranks-as processes "${SYM[@]}" --json "$base/p4096-$pull.json"
done
echo quit | nvidia-cuda-mps-control; sleep 2
for pull in push tma; do
  env_pull=(); [[ $pull == tma ]] && env_pull=(SWITCHYARD_SYMMETRIC_PULL=tma)
  step t4096-$pull 120 env "${env_pull[@]}" "${BENCH[@]}" --symmetric-tokens 4096 --expert-capacity auto \
    --iters 10 --warmup 2 --ranks-as threads --json "$base/t4096-$pull.json"
done
echo "total $((SECONDS - step_start)) s"
