#!/usr/bin/env bash
# Session 42, call 1: the symmetric dispatch's fixed steps on the SM clock (stamps now carry clock64 beside
# %globaltimer, and a new phase splits the tables step into the loads and the build), with the caches evicted
# before every timed phase (the default) and not (--cache-flush off, new), alternating; low_latency both ways;
# then the suites on this build (the signal helpers moved into device/ptx.cuh: their SASS differs only in
# LD/ST -> LDG/STG of the GPU-scope signal words, NOTES), the owed MoE suite included.
# Prediction (hypothesis: the ~7 us tables step, which no change to its loads or its arithmetic has moved, is
# mostly instruction fetch of cold code after the barrier, from HBM under the other ranks' row traffic):
#   - flush on: loads ~3-4 us and build ~2-3 us for the last rank on the SM clock (c6 of session 40 read 3.3 and
#     2.5 on %globaltimer);
#   - flush off: the build <= 1 us (its code warm in L2), the loads -0.5 to -1.5 us; dispatch -3 to -8 us.
#   If the build stays at 2-3 us with the flush off, the hypothesis is wrong.
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|cuda_symmetric_test|moe_layer_test|hostile_calls_test|process_ranks_test)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry42/c1.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s42c1; CARRY="build/gpu-carry42/c1.tar.xz"; BUDGET=580
STEP_FILTER="rror|FAILED|PASSED|passed|failed|^  (symmetric|low_latency) +[0-9]"
source scripts/device-call.sh
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
LL=(--backend cuda --engine low_latency --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer)
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  sed -n '/^step/,$p' "$base/$1.summary"; }
BENCH=$B/tools/bench/switchyard-bench; C=$B/tests/cuda
start_mps
for round in 1 2; do
  for flush in on off; do
    step p128-$flush-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH "${ARGS[@]}" --cache-flush $flush \
      --ranks-as processes --json "$base/p128-$flush-$round.json"
    summary p128-$flush-$round
  done
done
for flush in on off; do
  step ll128-$flush 40 $BENCH "${LL[@]}" --cache-flush $flush --ranks-as processes --json "$base/ll128-$flush.json"
done
for ranks in 2 8; do
  step processes-sym-heap-np$ranks 60 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step processes-normal-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine normal
step processes-ll-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine low_latency
echo quit | nvidia-cuda-mps-control; sleep 2
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step moe 120 $C/switchyard_cuda_moe_layer_test --gtest_brief=1
step hostile 40 $C/switchyard_cuda_hostile_calls_test --gtest_brief=1
step sanitizer-symmetric 60 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
echo "total $((SECONDS - step_start)) s"
