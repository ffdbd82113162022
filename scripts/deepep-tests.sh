#!/usr/bin/env bash
# Runs DeepEP's own V1 tests (tests/test_intranode.py, tests/test_low_latency.py) against
# switchyard.deep_ep on the GPU machine, and prints pass or fail per test file, rank count and the
# test function that failed. DeepEP's sources never enter this repository: DEEPEP_SRC names a DeepEP
# checkout (its last V1 version; issue 19 used 567632dd59810d77b3cc05553df953cc0f779799), whose tests
# are copied to a temporary folder and run from there. One thing changes in that copy: the
# process-group set-up (utils.py's init_dist gets redefined after DeepEP's own): gloo instead of NCCL,
# and rank i on GPU i % (visible GPUs), so that N processes may share one GPU; MPS is started when they
# do. gloo's all_gather_into_tensor wants the output flattened to the input's rank, where NCCL also takes
# a leading rank dimension (test_low_latency gathers [N, K] into [R, N, K]): the set-up passes it on so.
# `import deep_ep` resolves to switchyard.deep_ep through a one-line module in that folder.
#
#   DEEPEP_SRC=/path/to/DeepEP bash scripts/deepep-tests.sh
#   DEEPEP_SRC=.deepep-src DEEPEP_TESTS=test_low_latency DEEPEP_RANKS=4 bash scripts/deepep-tests.sh
#
# Environment:
#   DEEPEP_SRC          a folder holding DeepEP's tests/ (required; default: .deepep-src when it exists)
#   DEEPEP_TESTS        test files to run (default: "test_intranode test_low_latency")
#   DEEPEP_RANKS        rank counts (default: "4 8")
#   DEEPEP_TIMEOUT      seconds per run (default 540)
#   DEEPEP_TEST_ARGS    extra arguments for every run, e.g. "--num-tokens 1024"
#   SWITCHYARD_PY_INSTALL  auto (default): use the switchyard python3 imports (or build/gpu-python/pkg,
#                       which gpu-python-check.sh builds), else install it offline as that script does;
#                       pip or cmake: install that way first
#   SWITCHYARD_PY_MPS   1 (default): start MPS when ranks share a GPU (and stop it on exit); 0: never
# Logs go to $OUT (or ./out/deepep-tests): one per run, <test>-<ranks>.log. Exit status 0 only when
# every run passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
repo_root=$PWD
wheels=$repo_root/.deps/wheels
OUT=${OUT:-$repo_root/out/deepep-tests}
mkdir -p "$OUT"

deepep_src=${DEEPEP_SRC:-}
[[ -z $deepep_src && -d $repo_root/.deepep-src ]] && deepep_src=$repo_root/.deepep-src
if [[ -z $deepep_src || ! -f $deepep_src/tests/utils.py ]]; then
  echo "deepep-tests: DEEPEP_SRC='${deepep_src}': expected a DeepEP checkout (with tests/utils.py)" >&2
  exit 2
fi
deepep_src=$(cd "$deepep_src" && pwd)
read -r -a test_names <<<"${DEEPEP_TESTS:-test_intranode test_low_latency}"
read -r -a rank_counts <<<"${DEEPEP_RANKS:-4 8}"
read -r -a extra_args <<<"${DEEPEP_TEST_ARGS:-}"
run_timeout=${DEEPEP_TIMEOUT:-540}
for name in "${test_names[@]}"; do
  [[ -f $deepep_src/tests/$name.py ]] || { echo "deepep-tests: no $deepep_src/tests/$name.py" >&2; exit 2; }
done

if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

# ---- switchyard --------------------------------------------------------------------------------
# shellcheck source=scripts/gpu-python-install.sh
source "$repo_root/scripts/gpu-python-install.sh"
ensure_switchyard deepep-tests

# ---- DeepEP's tests, in a temporary folder -----------------------------------------------------
work=$(mktemp -d)
mps_started=0
cleanup() {
  if [[ $mps_started == 1 ]]; then
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
cp "$deepep_src"/tests/*.py "$work/"
echo 'import sys, switchyard.deep_ep; sys.modules[__name__] = switchyard.deep_ep' >"$work/deep_ep.py"
cat >>"$work/utils.py" <<'EOF'


# ---- switchyard scripts/deepep-tests.sh: the process-group set-up, nothing else ----
def init_dist(local_rank: int, num_local_ranks: int):
    ip = os.getenv('MASTER_ADDR', '127.0.0.1')
    port = int(os.getenv('MASTER_PORT', '8361'))
    dist.init_process_group(backend='gloo', init_method=f'tcp://{ip}:{port}', world_size=num_local_ranks,
                            rank=local_rank)
    torch.set_default_dtype(torch.bfloat16)
    torch.set_default_device('cuda')
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.all_gather_into_tensor = _gloo_all_gather_into_tensor
    return dist.get_rank(), dist.get_world_size(), dist.new_group(list(range(num_local_ranks)))


_nccl_style_all_gather_into_tensor = dist.all_gather_into_tensor


def _gloo_all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    # NCCL takes an output with a leading rank dimension ([R, N, K] for an [N, K] input); gloo splits
    # the output along dim 0 into one piece per rank of the input's shape, so it gets the same memory
    # as [R * N, K].
    if output_tensor.dim() == input_tensor.dim() + 1 and input_tensor.dim() > 0:
        output_tensor = output_tensor.view(-1, *input_tensor.shape[1:])
    return _nccl_style_all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)
EOF

max_ranks=0
for ranks in "${rank_counts[@]}"; do ((ranks > max_ranks)) && max_ranks=$ranks; done
start_mps_if_shared deepep-tests "$max_ranks"

# The function of DeepEP's tests that failed (the innermost frame in their files) and the error.
failure_of() {
  local log=$1 frame error
  frame=$(grep -E 'File ".*/(test_[a-z_]+|utils)\.py", line [0-9]+, in ' "$log" | tail -1 |
    sed -E 's/.*\/([a-z_]+\.py)", line ([0-9]+), in (.*)/\3 (\1:\2)/')
  error=$(grep -E '^[A-Za-z_.]*(Error|Exception|Unsupported|InvalidArgument)(:|$)' "$log" | tail -1)
  echo "${frame:-?}: ${error:-no error line (see the log)}"
}

status=0
summary=()
port=$((29500 + RANDOM % 1000))
for name in "${test_names[@]}"; do
  for ranks in "${rank_counts[@]}"; do
    log=$OUT/$name-$ranks.log
    port=$((port + 1))
    started=$SECONDS
    (cd "$work" && MASTER_PORT=$port PYTHONPATH="$work:$pythonpath_for_tests${PYTHONPATH:+:$PYTHONPATH}" \
      timeout -k 15 "$run_timeout" python3 "$name.py" --num-processes "$ranks" "${extra_args[@]}") >"$log" 2>&1
    rc=$?
    checks=$(grep -c ' passed$' "$log")
    seconds=$((SECONDS - started))
    if [[ $rc == 0 ]]; then
      line="PASS  $name, $ranks ranks ($seconds s; $checks check lines passed)"
    else
      status=1
      [[ $rc == 124 || $rc == 137 ]] && line="FAIL  $name, $ranks ranks: timed out after $run_timeout s" ||
        line="FAIL  $name, $ranks ranks ($seconds s; $checks check lines passed): $(failure_of "$log")"
    fi
    summary+=("$line")
    echo "== $line"
  done
done
echo
echo "==== deepep-tests: DeepEP $(cat "$deepep_src/COMMIT" 2>/dev/null || git -C "$deepep_src" rev-parse HEAD 2>/dev/null || echo '(commit unknown)'), logs in $OUT"
printf '  %s\n' "${summary[@]}"
exit $status
