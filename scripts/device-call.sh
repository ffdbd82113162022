# Sourced by a per-call script under bench/results/<session>/scripts (run from the repository root on the
# GPU machine): the set-up every call repeats. It makes the call's log folder out/$CALL and a binaries
# folder build/g-$CALL (exported as base and B), unpacks each carried tarball into B, brings the logs back
# whatever happens (an EXIT trap that also stops MPS if the call started it) and sources device-step.sh.
#
#   CALL=c1; CARRY="build/gpu-carry23/c1.tar.gz"; BUDGET=300; STEP_FILTER="^layer|rror"
#   source scripts/device-call.sh      # (assignments in front of `source` would not outlive it)
#   step one-rank 60 "$B/tools/moe_bench/switchyard-moe-bench" --ranks 1 --tokens 32768
#   start_mps   # processes: MPS up until the call ends
#   use_carried_python   # pytest steps: the carried package and .deps/wheels' pytest
#   stamps_summary p128   # after a step run with SWITCHYARD_SYMMETRIC_STAMPS=1: its stamps' step table
set -uo pipefail
: "${CALL:?device-call.sh: set CALL, the name of the call (c1, ...)}"
base=$PWD/out/$CALL
B=$PWD/build/g-$CALL
mkdir -p "$base" "$B"
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; tar -C out -czf "$OUT/$CALL-logs.tar.gz" "$CALL" 2>/dev/null; true' EXIT
# tar finds the compression (gzip or xz) itself.
for tarball in ${CARRY:-}; do tar -C "$B" -xf "$tarball" || echo "device-call.sh: could not unpack $tarball"; done
STEP_TAR=$CALL
BUDGET=${BUDGET:-540}
start_mps() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
}
# The carried Python package ($B/pkg, scripts/gpu-pack.sh with SWITCHYARD_PACK_PYTHON=1) and pytest from the
# carried .deps/wheels (the GPU machine has no package registry) on the path of the call's pytest steps.
use_carried_python() {
  python3 -c 'import pytest' 2>/dev/null ||
    python3 -m pip install -q --no-index --find-links .deps/wheels --target /tmp/pytest-site pytest
  export PYTHONPATH=$B/pkg:/tmp/pytest-site
}
# The symmetric dispatch's stamps (SWITCHYARD_SYMMETRIC_STAMPS=1) in step `name`'s log, read by
# scripts/symmetric_stamps.py into $base/name.summary; prints its step table.
stamps_summary() {  # name
  python3 scripts/symmetric_stamps.py < "$base/$1.log" > "$base/$1.summary" 2>&1
  sed -n '/^step/,$p' "$base/$1.summary"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader 2>&1 || true
source "$(dirname "${BASH_SOURCE[0]}")/device-step.sh"
