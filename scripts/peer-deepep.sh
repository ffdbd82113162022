#!/usr/bin/env bash
# DeepEP as a measured peer (issue 20): builds DeepEP V1 for one node (normal mode, no NVSHMEM) and
# times it and switchyard.deep_ep side by side in the same run, with the same shapes, SMs, processes
# and timing (tools/peer/deepep_side_by_side.py), on the GPU machine. Ranks share the GPU(s) under
# MPS. Prints a table per (ranks, tokens), checks that both libraries return the same bits, and
# prints the verdict against issue 20's targets.
#
# DeepEP's sources never enter this repository: DEEPEP_SRC names a DeepEP checkout (its last V1
# version, 567632dd59810d77b3cc05553df953cc0f779799). It is copied to a temporary folder and patched
# there, never in place: setup.py forced onto its no-NVSHMEM branch and without -rdc=true, and the
# calls of csrc/deep_ep.cpp that exist only with NVSHMEM guarded by DISABLE_NVSHMEM. A patch whose
# anchor is missing stops the script, naming it.
#
#   DEEPEP_SRC=.deepep-full bash scripts/peer-deepep.sh
#   DEEPEP_SRC=.deepep-full PEER_RANKS=8 PEER_TOKENS=4096 bash scripts/peer-deepep.sh
#   DEEPEP_SRC=.deepep-full bash scripts/peer-deepep.sh --patch-only /tmp/deepep-patched   # no build, no GPU
#
# Environment:
#   DEEPEP_SRC        a DeepEP checkout (default: .deepep-full, else .deepep-src, when one exists)
#   PEER_RANKS        rank counts, one run each (default: "8 4")
#   PEER_TOKENS       tokens per rank (default: "128 4096")
#   PEER_TIMEOUT      seconds per run (default 540)
#   PEER_ARGS         more arguments for the harness, e.g. "--iters 50 --num-sms 20"
#   PEER_REBUILD      1: build DeepEP even when build/peer-deepep holds a build of the same sources
#   SWITCHYARD_PY_INSTALL, SWITCHYARD_PY_MPS   as in scripts/deepep-tests.sh
# Logs and results go to $OUT (default ./out/peer-deepep): deepep-build.log, install.log,
# peer-<ranks>.log, results-<ranks>ranks.json. Exit status: 0 when everything built and ran and the
# outputs agreed (a missed target is reported, not an error); 1 otherwise.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
repo_root=$PWD
wheels=$repo_root/.deps/wheels
OUT=${OUT:-$repo_root/out/peer-deepep}

deepep_src=${DEEPEP_SRC:-}
for candidate in .deepep-full .deepep-src; do
  [[ -z $deepep_src && -d $repo_root/$candidate ]] && deepep_src=$repo_root/$candidate
done
if [[ -z $deepep_src || ! -f $deepep_src/setup.py || ! -f $deepep_src/csrc/deep_ep.cpp ]]; then
  echo "peer-deepep: DEEPEP_SRC='${deepep_src}': expected a full DeepEP checkout (setup.py, csrc/deep_ep.cpp)" >&2
  exit 2
fi
deepep_src=$(cd "$deepep_src" && pwd)
deepep_commit=$(cat "$deepep_src/COMMIT" 2>/dev/null || git -C "$deepep_src" rev-parse HEAD 2>/dev/null || echo unknown)

# ---- DeepEP: copy and patch ----------------------------------------------------------------------
# Fails (exit 1, naming the anchor) when DeepEP's sources are not the ones these patches were written for.
patch_deepep() {
  python3 - "$1" <<'EOF'
import re, sys
root = sys.argv[1]

def fail(path, what):
    sys.exit(f"peer-deepep: patch anchor not found in {path}: {what} (DeepEP's sources changed? "
             "these patches were written for 567632dd59810d77b3cc05553df953cc0f779799)")

def edit(path, edits):
    with open(f"{root}/{path}") as f:
        text = f.read()
    for what, pattern, replacement, count in edits:
        text, made = re.subn(pattern, replacement, text, flags=re.DOTALL)
        if made != count:
            fail(path, f"{what}: expected {count} match(es), found {made}")
    with open(f"{root}/{path}", "w") as f:
        f.write(text)
    return text

# setup.py: the no-NVSHMEM branch (intranode kernels only) whatever NVSHMEM this machine has, and no
# relocatable device code (-rdc=true only serves NVSHMEM's device library).
edit("setup.py", [
    ("the NVSHMEM directory check", r"(\n(\s*)if not disable_nvshmem:\n\s*assert os\.path\.exists\(nvshmem_dir\))",
     r"\n\2disable_nvshmem = True  # switchyard peer-deepep: intranode only\1", 1),
    ("'-rdc=true' in nvcc_flags", r"'-rdc=true',\s*", "", 1),
])

# csrc/deep_ep.cpp: the shrink-mode mask calls reach internode_ll.cu, which is built only with NVSHMEM.
guard = ('{indent}#ifndef DISABLE_NVSHMEM{indent}{call}{indent}#else'
         '{indent}EP_HOST_ASSERT(false and "NVSHMEM is disabled during compilation");{indent}#endif')
text = edit("csrc/deep_ep.cpp", [
    ("internode_ll::{update,query,clean}_mask_buffer calls",
     r"(\n[ \t]*)(internode_ll::(?:update|query|clean)_mask_buffer\(.*?\);)",
     lambda m: guard.format(indent=m.group(1), call=m.group(2)), 3),
])

# Every other internode:: / internode_ll:: use must already sit in a DISABLE_NVSHMEM guard: a new
# one would build and then fail to import (an undefined symbol), so stop here instead.
stack = []  # per open #if: (guards NVSHMEM code in its first branch?, in its second branch?)
for number, line in enumerate(text.splitlines(), 1):
    directive = line.strip()
    if directive.startswith("#if"):
        stack.append([directive.startswith("#ifndef DISABLE_NVSHMEM"),
                      directive.startswith("#ifdef DISABLE_NVSHMEM"), False])
    elif directive.startswith("#else"):
        stack[-1][2] = True
    elif directive.startswith("#endif"):
        stack.pop()
    elif re.search(r"\binternode(_ll)?::", line):
        guarded = any((first and not in_else) or (second and in_else) for first, second, in_else in stack)
        if not guarded:
            fail("csrc/deep_ep.cpp", f"line {number} uses NVSHMEM code outside a DISABLE_NVSHMEM guard: {directive}")
print("peer-deepep: patched setup.py (no NVSHMEM, no -rdc=true) and csrc/deep_ep.cpp (3 mask calls guarded)")
EOF
}

copy_deepep() {  # DEEPEP_SRC -> $1, without its git folder
  mkdir -p "$1" && tar -C "$deepep_src" --exclude=.git -cf - . | tar -C "$1" -xf -
}

if [[ ${1:-} == --patch-only ]]; then
  [[ -n ${2:-} ]] || { echo "usage: $0 --patch-only DEST" >&2; exit 2; }
  copy_deepep "$2" && patch_deepep "$2" || exit 1
  echo "peer-deepep: patched copy of $deepep_src in $2"
  exit 0
fi

mkdir -p "$OUT"
work=$(mktemp -d)
mps_started=0
# shellcheck disable=SC2317  # reached through the trap
cleanup() {
  if [[ $mps_started == 1 ]]; then
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    echo "== mps: stopped"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# ---- switchyard ----------------------------------------------------------------------------------
# Used as it is when python3 imports it with CUDA (or from gpu-python-check.sh's staging folder);
# else installed offline by scripts/gpu-python-install.sh.
# shellcheck source=scripts/gpu-python-install.sh
source "$repo_root/scripts/gpu-python-install.sh"
ensure_switchyard peer-deepep

# ---- DeepEP: build (or reuse the build of the same sources and patches) ---------------------------
# torch's extension builder compiles in parallel only with ninja; without it the build is serial.
if ! command -v ninja >/dev/null 2>&1 && [[ -d $wheels ]]; then
  python3 -m pip install -q --no-index --find-links "$wheels" ninja >>"$OUT/deepep-build.log" 2>&1
fi
command -v ninja >/dev/null 2>&1 || echo "== DeepEP: no ninja: the build runs one file at a time"
script_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
deepep_build=$repo_root/build/peer-deepep/${deepep_commit:0:12}-$script_hash
if [[ ${PEER_REBUILD:-0} != 1 ]] && compgen -G "$deepep_build/deep_ep_cpp*.so" >/dev/null; then
  echo "== DeepEP $deepep_commit: reusing the build in $deepep_build (PEER_REBUILD=1 rebuilds)"
else
  echo "== DeepEP $deepep_commit: copying $deepep_src to $work/deepep and patching it there"
  copy_deepep "$work/deepep" && patch_deepep "$work/deepep" || exit 1
  echo "== DeepEP: building (intranode, no NVSHMEM, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}; $OUT/deepep-build.log)"
  started=$SECONDS
  if ! (cd "$work/deepep" && env -u NVSHMEM_DIR TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
    MAX_JOBS="${MAX_JOBS:-16}" timeout 1800 python3 setup.py build_ext --inplace) >>"$OUT/deepep-build.log" 2>&1; then
    tail -40 "$OUT/deepep-build.log"
    echo "peer-deepep: DeepEP did not build (deepep-build.log)" >&2
    exit 1
  fi
  rm -rf "$deepep_build" && mkdir -p "$deepep_build" &&
    cp -r "$work/deepep/deep_ep" "$work"/deepep/deep_ep_cpp*.so "$deepep_build/" || exit 1
  echo "== DeepEP: built in $((SECONDS - started)) s, kept in $deepep_build"
fi
if ! PYTHONPATH="$deepep_build" python3 -c 'import deep_ep, deep_ep_cpp; print(deep_ep.__file__)' >>"$OUT/deepep-build.log" 2>&1; then
  tail -20 "$OUT/deepep-build.log"
  echo "peer-deepep: the DeepEP build does not import (deepep-build.log)" >&2
  exit 1
fi

# ---- MPS, when ranks share a GPU -----------------------------------------------------------------
read -r -a rank_counts <<<"${PEER_RANKS:-8 4}"
read -r -a token_counts <<<"${PEER_TOKENS:-128 4096}"
read -r -a extra_args <<<"${PEER_ARGS:-}"
run_timeout=${PEER_TIMEOUT:-540}
max_ranks=0
for ranks in "${rank_counts[@]}"; do ((ranks > max_ranks)) && max_ranks=$ranks; done
start_mps_if_shared peer-deepep "$max_ranks"

# ---- the runs ------------------------------------------------------------------------------------
status=0
summary=()
for ranks in "${rank_counts[@]}"; do
  log=$OUT/peer-$ranks.log
  echo "== run: $ranks ranks, tokens ${token_counts[*]} ($log)"
  PYTHONPATH="$deepep_build:$pythonpath_for_tests${PYTHONPATH:+:$PYTHONPATH}" timeout -k 15 "$run_timeout" \
    python3 tools/peer/deepep_side_by_side.py --num-processes "$ranks" --tokens "${token_counts[@]}" \
    --out "$OUT" "${extra_args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) summary+=("ran     $ranks ranks: outputs bit-identical (figures and verdict above)") ;;
    3) status=1; summary+=("MISMATCH $ranks ranks: switchyard and DeepEP disagree (see $log)") ;;
    124 | 137) status=1; summary+=("FAILED  $ranks ranks: timed out after $run_timeout s") ;;
    *) status=1; summary+=("FAILED  $ranks ranks: exit status $rc (see $log)") ;;
  esac
done
echo
echo "==== peer-deepep: DeepEP $deepep_commit (built in $deepep_build) vs switchyard; results in $OUT"
for ranks in "${rank_counts[@]}"; do
  grep -h "issue 20 target" "$OUT/peer-$ranks.log" 2>/dev/null | sed "s/^/  $ranks ranks: /"
done
printf '  %s\n' "${summary[@]}"
exit $status
