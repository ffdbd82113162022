#!/usr/bin/env bash
# Session 42, call 3: c2 ruled out residency and registers (released-resident and released-heavy started 3.3-7.4
# us after the moment, as the short consumer). What an engine's call puts between the hold and its kernel that
# the probe's consumer lacks: its outputs' stream-ordered allocations (a symmetric dispatch: the tables,
# recv_count, layout_range and src_info). The probe's new released-outputs mode makes N small allocations there
# (freed after the consumer), N = 1, 4, 8. Prediction (hypothesis: each allocation between the hold and the
# kernel serialises across the processes as c2's timing event does, ~2.3 us a process): earliest to last
# ~0.6 us a process at N = 1 (as released-kept), ~2-3 at N = 4; if N = 4 and 8 read as released, allocations
# are ruled out too. And released-marks (new): the hold and an end mark writing host-mapped words, as the bench
# times a phase; the probe's own hold writes none. Prediction: as released, unless those writes serialise the
# releases (then ~2-3 us a process, the engines' spread). Then the suites c1 and c2 left: internode, low_latency across nodes, the device transport,
# the host-mapped words. On whatever card comes (an H200 is issue 20's), the decode figures of both engines at
# 128 x 8 processes (the symmetric one with its stamps).
# Pack: SWITCHYARD_PACK_ONLY='(launch-probe|cuda_internode_test|low_latency_internode_test|device_transport_test|mapped_host_words_test|switchyard-bench)' \
#   SWITCHYARD_PACK_OUT=build/gpu-carry42/c3.tar.xz bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=s42c3; CARRY="build/gpu-carry42/c3.tar.xz"; BUDGET=500
STEP_FILTER="rror|FAILED|PASSED|passed|failed|^released(-kept|-outputs|-event|-marks|) |^  (symmetric|low_latency) +[0-9]|^copy"
source scripts/device-call.sh
C=$B/tests/cuda
start_mps
for outputs in 1 4 8; do
  step probe8-outputs$outputs 120 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 40 --warmup 5 \
    --shared-kib 200 --outputs $outputs
done
BENCH=$B/tools/bench/switchyard-bench
step sym128 40 env SWITCHYARD_SYMMETRIC_STAMPS=1 $BENCH --backend cuda --engine symmetric --ranks 8 --tokens 128 \
  --iters 40 --warmup 5 --start timer --symmetric-heap on --symmetric-combine pull --ranks-as processes \
  --json "$base/sym128.json"
python3 scripts/symmetric_stamps.py < "$base/sym128.log" > "$base/sym128.summary" 2>&1; sed -n '/^step/,$p' "$base/sym128.summary"
step ll128 40 $BENCH --backend cuda --engine low_latency --ranks 8 --tokens 128 --iters 40 --warmup 5 \
  --start timer --ranks-as processes --json "$base/ll128.json"
echo quit | nvidia-cuda-mps-control; sleep 2
step internode 200 $C/switchyard_cuda_internode_test --gtest_brief=1
step low_latency_internode 90 $C/switchyard_cuda_low_latency_internode_test --gtest_brief=1
step device_transport 60 $C/switchyard_cuda_device_transport_test --gtest_brief=1
step mapped_host_words 30 $C/switchyard_cuda_mapped_host_words_test --gtest_brief=1
echo "total $((SECONDS - step_start)) s"
