#!/usr/bin/env bash
# Session 30's second GPU call: session 29's c2 without the other suites' sanitizer runs (the carry holds the
# normal suite, switchyard-bench and the Python package only: '(normal_engine|switchyard-bench)' with
# SWITCHYARD_PACK_PYTHON=1, plus .deepep-full).
# Written in session 29 for the second GPU call of the next GPU session: compute-sanitizer on the one-rank
# cases of the normal suite (the heap-input case included) and the other suites, then issue 20's measurement
# of the normal engine in place: switchyard-bench as 8 processes with --normal-heap off / on, and the side
# by side with DeepEP V1 at 8 and 4 processes, with and without switchyard's heap inputs, with each
# library's host time per call. Carry: build/gpu-carry30/c2.tar.xz (gpu-pack.sh with SWITCHYARD_PACK_ONLY=
# '(normal_engine|low_latency|symmetric|moe_layer|switchyard-bench)' and SWITCHYARD_PACK_PYTHON=1) and .deepep-full
# (git archive 567632dd of DeepEP, with a COMMIT file).
cd "$(dirname "$0")/../../../.."
CALL=c2; CARRY="build/gpu-carry30/c2.tar.xz"; BUDGET=560
STEP_FILTER="rror|ERROR SUMMARY|Hazard|PASSED|FAILED|MISMATCH|verdict|target|host cost|^  (dispatch|combine) |^combine|^cached|^layout"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
T=$B/tests/cuda
for tool in memcheck racecheck synccheck; do
  step sanitizer-$tool-normal 90 compute-sanitizer --tool $tool --error-exitcode 9 $T/switchyard_cuda_normal_engine_test --gtest_brief=1 --gtest_filter='*Small_R1*:*ExpertIdOutOfRange*'
done
start_mps
for heap in off on; do
  step bench-r8-t4096-heap-$heap 70 $B/tools/bench/switchyard-bench --backend cuda --engine normal --ranks 8 --tokens 4096 --iters 5 --warmup 2 --ranks-as processes --normal-heap $heap --json $base/bench-r8-t4096-heap-$heap.json
  step bench-r8-t128-heap-$heap 40 $B/tools/bench/switchyard-bench --backend cuda --engine normal --ranks 8 --tokens 128 --iters 30 --ranks-as processes --normal-heap $heap --json $base/bench-r8-t128-heap-$heap.json
done
echo quit | nvidia-cuda-mps-control; sleep 2
step peer 150 env DEEPEP_SRC=.deepep-full OUT=$base/peer PEER_RANKS="8 4" PEER_TIMEOUT=70 bash scripts/peer-deepep.sh
step peer-heap 120 env DEEPEP_SRC=.deepep-full OUT=$base/peer-heap PEER_RANKS="8 4" PEER_TIMEOUT=55 PEER_ARGS=--switchyard-heap-inputs bash scripts/peer-deepep.sh
echo "total $((SECONDS - step_start)) s"
