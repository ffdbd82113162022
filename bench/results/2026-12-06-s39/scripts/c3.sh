#!/usr/bin/env bash
# Session 39, call 3: c2's bf16 push as 8 threads at 128 tokens read ~2 ms a phase (tma: 120-124 us), with the
# dispatch's host call at 131-1327 us in some calls and one rank's first block ~1.9 ms late; processes and 4096
# tokens were fine. Discriminators, one run each (same carry as c1):
#   heap on again; heap off (recv_x and x at plain addresses); CUDA_DEVICE_MAX_CONNECTIONS=32; --start barrier;
#   the fp8 push (heap off) and the bf16 pull (tma, heap off) as controls.
cd "$(dirname "$0")/../../../.."
CALL=c3; CARRY="build/gpu-carry39/c1.tar.xz"; BUDGET=400
STEP_FILTER="rror|FAILED|^  symmetric +[0-9]|warning"
source scripts/device-call.sh
BENCH=($B/tools/bench/switchyard-bench --backend cuda --engine symmetric --ranks 8 --tokens 128 --iters 40
  --warmup 5 --ranks-as threads --symmetric-combine pull)
step heap-on 40 "${BENCH[@]}" --start timer --symmetric-heap on --json "$base/heap-on.json"
step heap-off 40 "${BENCH[@]}" --start timer --json "$base/heap-off.json"
step heap-on-conn32 40 env CUDA_DEVICE_MAX_CONNECTIONS=32 "${BENCH[@]}" --start timer --symmetric-heap on \
  --json "$base/heap-on-conn32.json"
step heap-on-barrier 40 "${BENCH[@]}" --start barrier --symmetric-heap on --json "$base/heap-on-barrier.json"
step fp8-heap-off 40 "${BENCH[@]}" --start timer --dtype fp8 --json "$base/fp8-heap-off.json"
step tma-heap-off 40 env SWITCHYARD_SYMMETRIC_PULL=tma "${BENCH[@]}" --start timer --json "$base/tma-heap-off.json"
for f in "$base"/*.json; do
  python3 -c "
import json; d=json.load(open('$f'))['results'][0]
print('$(basename $f)', round(d['dispatch_us'],1), round(d['combine_us'],1), 'host', round(d['dispatch_host_us'],1),
      round(d['combine_host_us'],1), 'missed', d['start_holds_missed'])" 2>&1
done
echo "total $((SECONDS - step_start)) s"
