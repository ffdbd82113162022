#!/usr/bin/env bash
# Session 39, call 4: the final build of the session (bf16 push; SymmetricDispatch::push reported; a named
# publish / zero_copy keeps fp8 pulled too; the process test's bf16 receive area).
#   1. process ranks symmetric np2/4/8 with heap tensors (now a second pass per buffer kind: bf16 calls pushed
#      into a bf16 receive area across processes), and np8 plain, under MPS;
#   2. c2's 128-token threads anomaly, in c2's order: a processes bench under MPS, MPS quit, then threads (push,
#      stamps on, twice; the pull once);
#   3. the symmetric suite (default, and the path tests with the pull forced), rank_mask, MoE.
# Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|rank_mask_test|moe_layer_test|process_ranks_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry39/c4.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c4; CARRY="build/gpu-carry39/c4.tar.xz"; BUDGET=560
STEP_FILTER="rror|FAILED|PASSED|SKIPPED|^  symmetric +[0-9]|warning"
source scripts/device-call.sh
C=$B/tests/cuda
BENCH=($B/tools/bench/switchyard-bench --backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40
  --warmup 5 --start timer --symmetric-heap on --symmetric-combine pull)
start_mps
for ranks in 2 4 8; do
  step processes-heap-np$ranks 60 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step processes-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric
step p128-push 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks-as processes --json "$base/p128-push.json"
echo quit | nvidia-cuda-mps-control; sleep 2
for round in 1 2; do
  step t128-push-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks-as threads --json "$base/t128-push-$round.json"
  python3 scripts/symmetric_stamps.py < "$base/t128-push-$round.log" > "$base/t128-push-$round.summary" 2>&1
done
step t128-tma 40 env SWITCHYARD_SYMMETRIC_PULL=tma SWITCHYARD_SYMMETRIC_STAMPS=1 "${BENCH[@]}" --ranks-as threads \
  --json "$base/t128-tma.json"
for f in "$base"/*128*.json; do
  python3 -c "
import json; d=json.load(open('$f'))['results'][0]
print('$(basename $f)', round(d['dispatch_us'],1), round(d['combine_us'],1), 'host', round(d['dispatch_host_us'],1),
      round(d['combine_host_us'],1), 'missed', d['start_holds_missed'], d['symmetric_dispatch'], round(d['design_fraction'],3))" 2>&1
done
step symmetric 220 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step symmetric-tma 90 env SWITCHYARD_SYMMETRIC_PULL=tma $C/switchyard_cuda_symmetric_test --gtest_brief=1 \
  --gtest_filter='*Bf16Dispatches*:*HeapReceive*:SymmetricCudaPath*:Sources*'
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step moe 150 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
