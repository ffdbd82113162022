#!/usr/bin/env bash
# Compares the SASS of kernel sources between two checkouts, for a change meant to leave the machine code
# alone (a helper moved, a wrapper renamed): each .cu is compiled for sm_90a in both trees, disassembled, and
# compared after taking out what differs by construction (the anonymous namespace's per-path hash, the
# encodings' hex). Lines that still differ are printed, counted by instruction.
#
#   git worktree add /tmp/base HEAD
#   bash scripts/sass-compare.sh /tmp/base . src/cuda/symmetric/dispatch_kernel.cu src/cuda/normal/notify_kernel.cu
#
# Needs nvcc; cuobjdump and nvdisasm from the CUDA toolkit, or (this CPU machine has neither) from PyPI's
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels, unpacked once into build/deps/sass-tools.
# Exit status: 0 when every file's SASS is the same, 1 otherwise.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 BASE_TREE NEW_TREE FILE.cu..." >&2; exit 2; }
base=$(cd "$1" && pwd); new=$(cd "$2" && pwd); shift 2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v cuobjdump >/dev/null || ! command -v nvdisasm >/dev/null; then
  tools=$repo/build/deps/sass-tools
  if [[ ! -x $tools/nvidia/cu13/bin/nvdisasm ]]; then
    mkdir -p "$tools"
    python3 -m pip download -q --no-deps -d "$tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    for wheel in "$tools"/*.whl; do python3 -m zipfile -e "$wheel" "$tools"; done
    chmod +x "$tools"/nvidia/cu13/bin/*
  fi
  export PATH=$tools/nvidia/cu13/bin:$PATH
fi
cutlass=$repo/.deps/cutlass/include
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
sass_of() {  # tree, file, out
  nvcc -DSWITCHYARD_WITH_CUDA=1 -DSWITCHYARD_WITH_CUTLASS=1 -DSWITCHYARD_WITH_NCCL_GIN=1 -I"$1/include" -I"$1/src" \
    ${cutlass:+-isystem="$cutlass"} -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -std=c++17 -cubin -x cu \
    "$1/$2" -o "$3.cubin"
  cuobjdump -sass "$3.cubin" | sed -E 's/_GLOBAL__N__[0-9a-f]+_/_GLOBAL__N__/g; s#/\* 0x[0-9a-f]{16} \*/##g; s/[[:space:]]+$//' \
    | grep -v '^$' > "$3.sass"
}
status=0
for file in "$@"; do
  name=$(echo "$file" | tr / _)
  sass_of "$base" "$file" "$scratch/base-$name"
  sass_of "$new" "$file" "$scratch/new-$name"
  if cmp -s "$scratch/base-$name.sass" "$scratch/new-$name.sass"; then
    echo "same: $file ($(wc -l < "$scratch/new-$name.sass") lines)"
  else
    status=1
    echo "differs: $file"
    diff "$scratch/base-$name.sass" "$scratch/new-$name.sass" | grep '^[<>]' | sed -E 's#/\*[0-9a-f]+\*/##' \
      | awk '{side = $1; $1 = ""; sub(/^ +@!?P[0-9T] +/, " "); print side, $1}' | sort | uniq -c
  fi
done
exit $status
