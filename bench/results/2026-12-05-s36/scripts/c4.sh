#!/usr/bin/env bash
# Session 36, call 4: the symmetric bf16 pull by TMA (the automatic choice for bf16) against warps, as 8
# processes with heap tensors, at 128 tokens (stamps, two rounds alternating) and at 4096 (session 18's
# hypothesis: warps -5 to -10 us of the 128-token pull, as fp8 went 13-15 % faster by warps in session 16).
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY=""; BUDGET=420
STEP_FILTER="rror|FAILED|fail|^==|^  symmetric +[0-9]|^stores|^barrier"
source scripts/device-call.sh
step build 300 bash scripts/device-build.sh switchyard-bench
B=$PWD/build/dev
start_mps
BENCH=($B/tools/bench/switchyard-bench --backend cuda --ranks 8 --iters 40 --warmup 5 --ranks-as processes
  --start timer --engine symmetric --symmetric-heap on --symmetric-combine pull)
for round in 1 2; do
  for pull in tma warps; do
    step p128-$pull-$round 40 env SWITCHYARD_SYMMETRIC_PULL=$pull SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" \
      --tokens 128 --json "$base/p128-$pull-$round.json"
    python3 scripts/symmetric_stamps.py < "$base/p128-$pull-$round.log" > "$base/p128-$pull-$round.summary"
    grep -E "^(barrier|stores)" "$base/p128-$pull-$round.summary"
  done
done
for pull in tma warps; do
  step p4096-$pull 60 env SWITCHYARD_SYMMETRIC_PULL=$pull "${BENCH[@]}" --tokens 4096 --symmetric-tokens 4096 \
    --expert-capacity auto --iters 20 --json "$base/p4096-$pull.json"
done
echo "total $((SECONDS - step_start)) s"
