#!/usr/bin/env bash
# Session 48 c1: issue 20's launch spread. Session 47 (c4-c10) tied the decode call's ~19 us start staircase at
# 8 processes to the engine's call, not its kernel; only a timing event between the hold and the consumer
# (the probe's released-event, sessions 36 and 42) draws the same staircase in the probe. Question: what does
# the call put on the stream between the bench's hold kernel and the dispatch (combine) kernel beside the launch?
# A CUPTI injection library (scripts/api_window_trace.cpp, built here on the dev machine) prints the driver
# calls each process makes from the hold's launch to the engine kernel's launch (windows 20-23: timed calls).
# Then session 47's prepared c11 (the probe with a held footprint, and with a Buffer).
# Pack (every binary and the Python package: 8.5 MB with gpu-pack.sh's large dictionary):
#   SWITCHYARD_PACK_PYTHON=1 SWITCHYARD_PACK_OUT=build/gpu-carry48/all.tar.xz bash scripts/gpu-pack.sh build/gpu-local
#   g++ -O2 -fPIC -shared -std=c++17 -I/usr/local/cuda/include bench/results/2026-12-07-s48/scripts/api_window_trace.cpp \
#     -L/usr/local/cuda/lib -lcupti -o build/gpu-carry48/libapi_window_trace.so
# Predictions: if a stream operation that the front end completes like an event (a stream-ordered free, an event
# record or wait, a memset) sits in the window, the trace shows it (cuMemFreeAsync, cuEventRecord,
# cuStreamWaitEvent, cuMemsetD*Async); else only cuMemAllocAsync and the launch, and the cause is below the API.
# Second hypothesis, CUDA's work queues: an engine's process holds more streams than the probe's (the bench's, the
# Buffer's own, the timer reader's, the copy-bandwidth one), and streams beyond CUDA_DEVICE_MAX_CONNECTIONS (8)
# share hardware queues, where a kernel that waits for its stream blocks whatever queued behind it (another
# rank's hold, then its kernel): a staircase of one launch a rank. If so, CUDA_DEVICE_MAX_CONNECTIONS=32 takes
# the last rank's first block from ~19 us to <= ~8 us (dispatch 112 -> ~95-100 us on an H100), and =1 widens it.
# c11's predictions are in session 47's c11.sh: with the footprint ~2-2.8 us a process if memory held is it,
# else ~1; with the Buffer ~2-2.8 us a process if something the Buffer sets up is it.
cd "$(dirname "$0")/../../../.."
CALL=s48c1; CARRY=${CARRY:-build/gpu-carry48/all.tar.xz}; BUDGET=${BUDGET:-420}
STEP_FILTER="^  dispatch  |^  combine  |rror|released-bench |released  |^  symmetric +[0-9]|window|cuMemFree|cuEvent|cuStreamWait|cuMemset"
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
B_EIGHT="$B/tools/bench/switchyard-bench ${EIGHT[*]}"
export SWITCHYARD_SYMMETRIC_STAMPS=1
step control-threads 60 $B_EIGHT
stamps_summary control-threads | tail -3
step conn32-threads 60 env CUDA_DEVICE_MAX_CONNECTIONS=32 $B_EIGHT
stamps_summary conn32-threads | tail -3
start_mps
step control-eight-stamps 60 $B_EIGHT --ranks-as processes
stamps_summary control-eight-stamps | tail -3
step conn32-eight 60 env CUDA_DEVICE_MAX_CONNECTIONS=32 $B_EIGHT --ranks-as processes
stamps_summary conn32-eight | tail -3
step conn1-eight 60 env CUDA_DEVICE_MAX_CONNECTIONS=1 $B_EIGHT --ranks-as processes
stamps_summary conn1-eight | tail -3
unset SWITCHYARD_SYMMETRIC_STAMPS
step trace-eight 60 env CUDA_INJECTION64_PATH=$TRACE $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes
step control-eight 60 $B/tools/bench/switchyard-bench "${EIGHT[@]}" --ranks-as processes
for gib in 0 4 8; do
  step probe-footprint-$gib 60 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
    --resident-us 100 --busy-mib 64 --footprint-gib $gib
done
step probe-with-buffer 90 $B/tools/launch_probe/switchyard-launch-probe --procs 8 --iters 60 --warmup 10 \
  --resident-us 100 --busy-mib 64 --with-buffer
# The MPS server's own queues: the daemon started with 32 connections.
echo quit | nvidia-cuda-mps-control; sleep 2
CUDA_DEVICE_MAX_CONNECTIONS=32 start_mps
export SWITCHYARD_SYMMETRIC_STAMPS=1
step conn32-daemon-eight 60 env CUDA_DEVICE_MAX_CONNECTIONS=32 $B_EIGHT --ranks-as processes
stamps_summary conn32-daemon-eight | tail -3
echo "total $((SECONDS - step_start)) s"
