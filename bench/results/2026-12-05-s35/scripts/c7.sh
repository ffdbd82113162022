#!/usr/bin/env bash
# Session 35's fourth call: (1) switchyard-launch-probe (bounded waits now): the ~45 us between the notify's end
# and the rows kernel's start split into the host seeing the post, the host's own work and the launch reaching
# the GPU, at 1 and 8 processes, with the gather's grid (16 x 512, 192 KiB shared), without the shared memory,
# and one warp; (2) the normal stamps with whole-line writes (the host columns readable); (3) switchyard-bench
# with --start timer (every rank's stream held until one moment on the GPU's clock) for normal, low_latency and
# symmetric at 128 tokens x 8 processes, beside --start barrier: the decode engines' device time without the
# host barrier's skew (issue 20, deliverable 5: <= 80 us a phase).
# Pack: SWITCHYARD_PACK_ONLY='(switchyard-bench|switchyard-launch-probe)' SWITCHYARD_PACK_OUT=build/gpu-carry35/c7.tar.xz \
#   bash scripts/gpu-pack.sh build/gpu-local
cd "$(dirname "$0")/../../../.."
CALL=c7; CARRY="build/gpu-carry35/c7.tar.xz"; BUDGET=400
STEP_FILTER="rror|fail|^==|^clock|^host-launch|^back-to-back|median|^start|warning|^  (normal|low_latency|symmetric) +[0-9]"
source scripts/device-call.sh
start_mps
P=$B/tools/launch_probe/switchyard-launch-probe
step probe-gather-grid 60 $P --procs 1,8 --iters 200
step probe-no-shared 30 $P --procs 8 --shared-kib 0 --iters 200
step stamps-normal 40 env SWITCHYARD_NORMAL_PHASES=1 $B/tools/bench/switchyard-bench --backend cuda --engine normal \
  --ranks 8 --tokens 128 --iters 30 --warmup 3 --ranks-as processes --normal-heap on --start barrier \
  --json "$base/stamps-normal.json"
python3 scripts/normal_stamps.py < "$base/stamps-normal.log" | tee "$base/stamps-normal.summary"
for start in timer barrier; do
  for engine in normal low_latency symmetric; do
    step start-$start-$engine 40 $B/tools/bench/switchyard-bench --backend cuda --engine $engine --ranks 8 --tokens 128 \
      --iters 30 --warmup 3 --ranks-as processes --normal-heap on --start $start --json "$base/start-$start-$engine.json"
  done
done
echo quit | nvidia-cuda-mps-control; sleep 2
echo "total $((SECONDS - step_start)) s"
