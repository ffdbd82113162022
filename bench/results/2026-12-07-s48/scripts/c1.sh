#!/usr/bin/env bash
# Session 48 c1: issue 20's launch spread. Session 47 (c4-c10) tied the decode call's ~19 us start staircase at
# 8 processes to the engine's call, not its kernel; only a timing event between the hold and the consumer
# (the probe's released-event, sessions 36 and 42) draws the same staircase in the probe. Question: what does
# the call put on the stream between the bench's hold kernel and the dispatch (combine) kernel beside the launch?
# A CUPTI injection library (scripts/api_window_trace.cpp, built here on the dev machine) prints the driver
# calls each process makes from the hold's launch to the engine kernel's launch (windows 20-23: timed calls).
# Then session 47's prepared c11 (the probe with a held footprint, and with a Buffer).
# Then gpu-check's tests stage whole (owed from session 47), in what is left of the call.
# Pack (every binary and the Python package: 8.5 MB with gpu-pack.sh's large dictionary):
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry48/all.tar.xz bash scripts/gpu-pack.sh build/gpu-local
#   g++ -O2 -fPIC -shared -std=c++17 -I/usr/local/cuda/include bench/results/2026-12-07-s48/scripts/api_window_trace.cpp \
#     -L/usr/local/cuda/lib -lcupti -o build/gpu-carry48/libapi_window_trace.so
# Predictions: if a stream operation that the front end completes like an event (a stream-ordered free, an event
# record or wait, a memset) sits in the window, the trace shows it (cuMemFreeAsync, cuEventRecord,
# cuStreamWaitEvent, cuMemsetD*Async); else only cuMemAllocAsync and the launch, and the cause is below the API.
# c11's predictions are in session 47's c11.sh: with the footprint ~2-2.8 us a process if memory held is it,
# else ~1; with the Buffer ~2-2.8 us a process if something the Buffer sets up is it.
cd "$(dirname "$0")/../../../.."
CALL=s48c1; CARRY=${CARRY:-build/gpu-carry48/all.tar.xz}; BUDGET=${BUDGET:-560}
STEP_FILTER="rror|released-bench |released  |^  symmetric +[0-9]|window|cuMemFree|cuEvent|cuStreamWait|cuMemset"
source scripts/device-call.sh
TRACE=$PWD/build/gpu-carry48/libapi_window_trace.so
if ldd "$TRACE" | grep -q "libcupti.*not found"; then
  mkdir -p /tmp/cupti && xz -dc build/gpu-carry48/libcupti.so.13.xz > /tmp/cupti/libcupti.so.13
  export LD_LIBRARY_PATH=/tmp/cupti${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "libcupti: carried"
fi
ldd "$TRACE" | grep cupti
EIGHT=(--backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40 --warmup 5 --start timer
  --symmetric-heap on --symmetric-combine pull)
export SY_TRACE_FROM=timer_wait_kernel SY_TRACE_TO='symmetric_dispatch_kernel|symmetric_pull_combine|symmetric_combine'
export SY_TRACE_FIRST=20 SY_TRACE_COUNT=4
step trace-one 60 env CUDA_INJECTION64_PATH=$TRACE $B/tools/bench/switchyard-bench --backend cuda --engine symmetric \
  --ranks 1 --tokens 128 --iters 40 --warmup 5 --start timer --symmetric-heap on --symmetric-combine pull
step trace-threads 60 env CUDA_INJECTION64_PATH=$TRACE $B/tools/bench/switchyard-bench "${EIGHT[@]}"
start_mps
step trace-eight 60 env CUDA_INJECTION64_PATH=$TRACE $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes
step control-eight 60 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes
for gib in 0 4 8; do
  step probe-footprint-$gib 60 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
    --resident-us 100 --busy-mib 64 --footprint-gib $gib
done
step probe-with-buffer 90 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
  --resident-us 100 --busy-mib 64 --with-buffer
echo quit | nvidia-cuda-mps-control; sleep 2
unset SY_TRACE_FROM SY_TRACE_TO SY_TRACE_FIRST SY_TRACE_COUNT
STEP_FILTER="FAIL|pass \\("
step gpu-check-tests $(( $(step_left) - 5 )) env OUT=$base/gpu-check SWITCHYARD_GPU_BUILD=$B SWITCHYARD_GPU_STAGES=tests \
  SWITCHYARD_GPU_CPU_TESTS=0 bash scripts/gpu-check.sh
grep -h "^== " $base/gpu-check-tests.log | tail -30
echo "total $((SECONDS - step_start)) s"
