#!/usr/bin/env bash
# Session 41, call 1: signals between ranks at GPU scope where every rank is on this GPU (device/peer_signal.cuh:
# the cross-rank barrier, wait_for_peer, the symmetric release's done words, the low_latency send kernels'
# fences and signals) against system scope (SWITCHYARD_SIGNAL_SCOPE=sys, as before), alternating, with the
# symmetric dispatch's new per-block stamps of each grid sync and the signal (scripts/symmetric_stamps.py's step
# table). Prediction: the barrier's signal and the release shorter by the fences' difference; symmetric dispatch
# -2 to -6 us at 128 x 8 processes, combine -1 to -3; low_latency (a system fence in every thread of every send
# block) -2 to -10 us a phase; 4096 x 8 level. Then the suites of the changed engines, both scopes, rank masks
# and a killed rank (wait_for_peer's masking); c2 the rest.
# Pack: SWITCHYARD_PACK_ONLY='(cuda_symmetric_test|cuda_low_latency_test|process_ranks_test|switchyard-bench|rank_mask_test|killed_rank_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry41/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s41c1; CARRY="build/gpu-carry41/c1.tar.xz"; BUDGET=570
STEP_FILTER="rror|FAILED|PASSED|passed|failed|killed|^  (symmetric|low_latency) +[0-9]"
source scripts/device-call.sh
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
LL=(--backend cuda --engine low_latency --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer)
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  sed -n '/^phase/,$p' "$base/$1.summary" | grep -vE '^(start|counted|last load|walked) '; }
BENCH=$B/tools/bench/switchyard-bench; C=$B/tests/cuda
start_mps
for round in 1 2; do
  for scope in sys gpu; do
    step p128-$scope-$round 40 env SWITCHYARD_SIGNAL_SCOPE=$scope SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" \
      --ranks-as processes --json "$base/p128-$scope-$round.json"
    summary p128-$scope-$round
    step ll128-$scope-$round 40 env SWITCHYARD_SIGNAL_SCOPE=$scope $BENCH "${LL[@]}" --ranks-as processes \
      --json "$base/ll128-$scope-$round.json"
  done
done
for scope in sys gpu; do
  step p4096-$scope 60 env SWITCHYARD_SIGNAL_SCOPE=$scope $BENCH --backend cuda --engine symmetric --ranks 8 \
    --tokens 4096 --iters 6 --warmup 2 --start timer --symmetric-heap on --symmetric-combine pull \
    --expert-capacity auto --ranks-as processes --json "$base/p4096-$scope.json"
done
for ranks in 2 8; do
  step processes-sym-heap-np$ranks 60 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step processes-ll-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine low_latency
step killed-sym-np4 60 $C/switchyard_cuda_killed_rank_test --ranks 4 --engine symmetric
step killed-ll-np4 60 $C/switchyard_cuda_killed_rank_test --ranks 4 --engine low_latency
echo quit | nvidia-cuda-mps-control; sleep 2
for scope in sys gpu; do
  step t128-$scope 40 env SWITCHYARD_SIGNAL_SCOPE=$scope SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" \
    --json "$base/t128-$scope.json"
  summary t128-$scope
done
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step low_latency 90 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step rank_mask 90 $C/switchyard_cuda_rank_mask_test --gtest_brief=1
step sanitizer-symmetric 60 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
step symmetric-sys 150 env SWITCHYARD_SIGNAL_SCOPE=sys $C/switchyard_cuda_symmetric_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
