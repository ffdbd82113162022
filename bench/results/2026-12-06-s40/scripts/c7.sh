#!/usr/bin/env bash
# Session 40, call 7: the symmetric row tables built with warp scans (cuda/symmetric/tables.cuh on
# device/warp_scan.cuh; the low_latency table's scan moved onto the same helper, same arithmetic). c6's probe:
# the barrier -> tables span at 128 x 8 is 0.9 us mask + 3.3 us loads + 2.5 us build (threads, H100).
# Prediction: passed -> tables loaded 6.9 -> ~4.5 us; dispatch -2 us (processes 119 -> ~117, threads 106.5 ->
# ~104.5); combine 0 to -2 (it builds the same tables); low_latency unchanged. Old = c3's bench
# (build/gpu-carry40o/old5.tar.xz). Then the symmetric and low_latency suites, process ranks, memcheck; c8 the rest.
# Pack: SWITCHYARD_PACK_ONLY='(symmetric_test|low_latency_test|process_ranks_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry40d/c7.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s40c7; CARRY="build/gpu-carry40d/c7.tar.xz"; BUDGET=480
STEP_FILTER="rror|FAILED|PASSED|passed|^  (symmetric|low_latency) +[0-9]"
source scripts/device-call.sh
mkdir -p "$B/old" && tar -C "$B/old" -xf build/gpu-carry40o/old5.tar.xz
ARGS=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
summary() { python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  grep -E '^(barrier|tables|last load|stores|walked|released)' "$base/$1.summary"; }
start_mps
for round in 1 2; do
  for build in old new; do
    bin=$B/tools/bench/switchyard-bench; [[ $build == old ]] && bin=$B/old/tools/bench/switchyard-bench
    step p128-$build-$round 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --ranks-as processes \
      --json "$base/p128-$build-$round.json"
    summary p128-$build-$round
  done
done
C=$B/tests/cuda
for ranks in 2 8; do
  step processes-heap-np$ranks 60 $C/switchyard_cuda_process_ranks_test --ranks $ranks --engine symmetric --heap-tensors on
done
step processes-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine symmetric
step processes-ll-np8 60 $C/switchyard_cuda_process_ranks_test --ranks 8 --engine low_latency
echo quit | nvidia-cuda-mps-control; sleep 2
for build in old new; do
  bin=$B/tools/bench/switchyard-bench; [[ $build == old ]] && bin=$B/old/tools/bench/switchyard-bench
  step t128-$build 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $bin "${ARGS[@]}" --json "$base/t128-$build.json"
  summary t128-$build
  step ll128-$build 40 $bin --backend cuda --engine low_latency --ranks 8 --tokens 128 --iters 40 --warmup 5 \
    --start timer --json "$base/ll128-$build.json"
done
step symmetric 150 $C/switchyard_cuda_symmetric_test --gtest_brief=1
step low_latency 120 $C/switchyard_cuda_low_latency_test --gtest_brief=1
step sanitizer-symmetric 90 compute-sanitizer --tool memcheck --error-exitcode 1 $C/switchyard_cuda_symmetric_test \
  --gtest_filter='*Small_R1*'
echo "total $((SECONDS - step_start)) s"
