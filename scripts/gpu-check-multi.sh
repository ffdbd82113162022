#!/usr/bin/env bash
# The multi-GPU machine's one command (issue 8): build with CUDA (and NCCL for the bench's baseline),
# run the GPU test binaries with their ranks spread over the GPUs (SWITCHYARD_TEST_DEVICES=spread:
# rank r on GPU r % visible GPUs, tests/cuda/rank_device.hpp), as threads and as one process per GPU
# (forked by the test, then launched by mpirun: handles through MPI_Allgatherv), then
# switchyard-bench --engine all (the NCCL baseline included) with one rank per GPU at 128 and 4096
# tokens per rank. The bench measures the peer-to-peer copy bandwidth (cudaMemcpyPeerAsync,
# NVLink) in the same run and uses it as the roofline of the bytes between GPUs.
# Logs and JSON go to $OUT (or ./out/gpu-check-multi); a summary with the issue's targets is printed
# last and kept in summary.txt. At most 8 files, as many as the device tool brings back.
#
#   bash scripts/gpu-check-multi.sh
#   SWITCHYARD_GPU_STAGES="bench" SWITCHYARD_GPU_BUILD=build/gpu-multi bash scripts/gpu-check-multi.sh
#
# Refuses (exit 2) where fewer than two GPUs are visible: scripts/gpu-check.sh is the one-GPU check.
# Stages: build, tests, mpi (tests/mpi/cuda_engines_mpi_test.cpp under mpirun, one process per GPU,
# on one node and on two; skipped, not failed, where the build found no MPI), bench.
# Environment: SWITCHYARD_GPU_STAGES (default "build tests mpi bench"), SWITCHYARD_GPU_BUILD (default
# build/gpu-multi), SWITCHYARD_BENCH_TOKENS (default "128 4096"),
# SWITCHYARD_BENCH_NORMAL_CHANNELS (default "64": extra normal runs at these channel counts), SWITCHYARD_GPU_TEST_TIMEOUT.
# GoogleTest: as in scripts/gpu-check.sh (a package, or the source at .deps/googletest).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/gpu-check-multi}
BUILD=${SWITCHYARD_GPU_BUILD:-build/gpu-multi}
STAGES=${SWITCHYARD_GPU_STAGES:-"build tests mpi bench"}
TOKENS=${SWITCHYARD_BENCH_TOKENS:-"128 4096"}
NORMAL_CHANNELS=${SWITCHYARD_BENCH_NORMAL_CHANNELS:-"64"}

# NOTES: NVLink multicast stays off on these machines (GPU.md): a program using it can put the host's
# GPUs, which others share, out of service. Set here too, for whatever this script starts.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

# The GPUs this process would see: nvidia-smi's, narrowed by CUDA_VISIBLE_DEVICES when it is set.
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c . || true)
if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
  visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)
  (( visible < gpus )) && gpus=$visible
fi
if (( gpus < 2 )); then
  echo "gpu-check-multi: expected a machine with at least 2 visible GPUs, got $gpus" \
       "(nvidia-smi${CUDA_VISIBLE_DEVICES+, CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES}); scripts/gpu-check.sh is the one-GPU check" >&2
  exit 2
fi

mkdir -p "$OUT"
declare -a SUMMARY=()
status=0
note() { SUMMARY+=("$1"); echo "== $1"; }
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
# name, log (appended to, so that several steps share one file), command...
run_logged() {
  local name=$1 log=$2; shift 2
  local start=$SECONDS
  echo "==== $name: $*" >>"$OUT/$log"
  if "$@" >>"$OUT/$log" 2>&1; then note "$name: pass ($((SECONDS - start)) s, $log)"
  else local rc=$?; note "$name: FAIL rc=$rc ($((SECONDS - start)) s, $log)"; status=1; tail -40 "$OUT/$log"; fi
}

{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  echo
  nvidia-smi topo -m
} >"$OUT/gpu.txt" 2>&1 || true
note "gpus: $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) (topology in gpu.txt)"

if has_stage build; then
  : >"$OUT/build.log"
  gtest_args=()
  [ -d .deps/googletest ] && gtest_args=(-DSWITCHYARD_GTEST_SOURCE="$PWD/.deps/googletest")
  run_logged configure build.log cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSWITCHYARD_CUDA=ON -DSWITCHYARD_MPI=AUTO "${gtest_args[@]}"
  run_logged build build.log cmake --build "$BUILD" -j "$(nproc)"
  note "$(grep -m1 -o 'switchyard-bench: NCCL baseline.*' "$OUT/build.log" || echo 'switchyard-bench: NCCL baseline: no configure line (see build.log)')"
  note "$(grep -m1 -o 'switchyard: MPI tests.*' "$OUT/build.log" || echo 'switchyard: MPI tests: no configure line (see build.log)')"
fi

BENCH_BIN="$BUILD/tools/bench/switchyard-bench"

# The GPU suites as in scripts/gpu-check.sh. device_transport keeps its ranks on GPU 0 (its loopback
# heaps are one device's memory), the others spread.
GPU_SUITES=(normal_engine low_latency symmetric internode low_latency_internode device_transport)
PROCESS_BIN="$BUILD/tests/cuda/switchyard_cuda_process_ranks_test"

if has_stage tests; then
  : >"$OUT/tests.log"
  run_logged "rank -> GPU rule (SWITCHYARD_TEST_DEVICES, $gpus GPUs)" tests.log timeout 60 \
    "$BUILD/tests/cuda/switchyard_rank_device_test" --gtest_brief=1
  # Ranks as threads of one process: rank r on GPU r % $gpus, so cases with more ranks than GPUs
  # also put several ranks on each GPU.
  for suite in "${GPU_SUITES[@]}"; do
    run_logged "gpu tests $suite (threads, spread over $gpus GPUs)" tests.log \
      timeout "${SWITCHYARD_GPU_TEST_TIMEOUT:-300}" env SWITCHYARD_TEST_DEVICES=spread \
      "$BUILD/tests/cuda/switchyard_cuda_${suite}_test" --gtest_brief=1
  done
  # One process per GPU (CUDA IPC between GPUs), as deployed: child rank r on GPU r. No MPS: no two
  # processes share a GPU.
  for engine in normal low_latency symmetric; do
    run_logged "gpu processes $engine np$gpus (one per GPU)" tests.log timeout 120 \
      env SWITCHYARD_TEST_DEVICES=spread "$PROCESS_BIN" --ranks "$gpus" --engine "$engine"
  done
  run_logged "gpu tests: nccl baseline kernels" tests.log timeout 300 \
    "$BUILD/tests/bench/switchyard_bench_nccl_kernels_cuda_test" --gtest_brief=1
  run_logged "bench options and roofline" tests.log timeout 120 \
    "$BUILD/tests/bench/switchyard_bench_options_test" --gtest_brief=1
fi

# One process per GPU launched by mpirun (issue 8): CUDA IPC handles through MPI_Allgatherv, peers
# over NVLink. Logged into tests.log (the files that come back are few).
MPI_BIN="$BUILD/tests/mpi/switchyard_mpi_cuda_engines_test"
if has_stage mpi; then
  if ! command -v mpirun >/dev/null 2>&1 || [[ ! -x $MPI_BIN ]]; then
    note "mpi: skipped: no MPI (mpicxx/mpi.h)$(command -v mpirun >/dev/null 2>&1 || echo ', no mpirun'); the build has no $MPI_BIN"
  else
    mpi_flags=()
    # Open MPI refuses to run as root without leave, and by default binds each rank to one core,
    # where its host threads (the engines' and the reference's) would share it.
    mpirun --version 2>&1 | grep -q "Open MPI" && mpi_flags=(--allow-run-as-root --bind-to none)
    for engine in normal low_latency symmetric; do
      run_logged "gpu mpi $engine np$gpus (mpirun, one process per GPU)" tests.log timeout 180 \
        mpirun -np "$gpus" "${mpi_flags[@]}" "$MPI_BIN" --engine "$engine"
    done
    # Across two nodes (2 x 1 on 2 GPUs), emulated by the loopback transport between the GPUs: the
    # hierarchical normal engine and low_latency (symmetric needs one node).
    if (( gpus % 2 == 0 )); then
      for engine in normal low_latency; do
        run_logged "gpu mpi $engine np$gpus, 2 x $((gpus / 2)) nodes (mpirun, one process per GPU)" tests.log \
          timeout 180 mpirun -np "$gpus" "${mpi_flags[@]}" "$MPI_BIN" --engine "$engine" --ranks-per-node "$((gpus / 2))"
      done
    fi
  fi
fi

if has_stage bench; then
  # One rank per GPU; the experts a multiple of the ranks (256 for 2, 4 and 8 GPUs).
  experts=$((256 - 256 % gpus))
  for tokens in $TOKENS; do
    : >"$OUT/bench-$tokens.log"
    run_logged "bench --engine all, $gpus ranks on $gpus GPUs, $tokens tokens" "bench-$tokens.log" timeout 900 \
      "$BENCH_BIN" --backend cuda --engine all --ranks "$gpus" --devices auto --experts "$experts" \
      --tokens "$tokens" --symmetric-tokens "$tokens" --expert-capacity auto --json "$OUT/bench-$tokens.json"
    # NOTES: the library's auto channel count (16 at most, leaving most SMs to the experts, as DeepEP
    # leaves 20-24 SMs to its kernels) is far from what one rank alone on a GPU can use: on 2 H200s,
    # 16 -> 64 channels took normal's 4096-token combine from 761 to 280 us (bench/NOTES.md). The
    # normal engine runs again at each of these channel counts, reported beside the default.
    for channels in $NORMAL_CHANNELS; do
      run_logged "bench --engine normal --channels $channels, $tokens tokens" "bench-$tokens.log" timeout 300 \
        "$BENCH_BIN" --backend cuda --engine normal --ranks "$gpus" --devices auto --experts "$experts" \
        --tokens "$tokens" --channels "$channels" --json "$OUT/bench-$tokens-normal-ch$channels.json"
    done
  done
fi

# The engines side by side, and the issue's targets, from the bench's JSON.
summarize() {
  python3 - "$OUT" $TOKENS <<'EOF'
import json, os, sys
out, token_counts = sys.argv[1], sys.argv[2:]
for tokens in token_counts:
    path = os.path.join(out, f"bench-{tokens}.json")
    if not os.path.exists(path):
        print(f"  bench-{tokens}.json: missing (the bench did not finish)")
        continue
    report = json.load(open(path))
    ranks = report["ranks"]
    peer = report["peer_copy_gbps"]
    print(f"  --tokens {tokens}: {ranks} ranks, GPUs {report['devices']}; local copy {report['copy_gbps']:.0f} GB/s "
          f"over {report['copy_devices']} GPUs; peer copy " +
          (f"{peer:.0f} GB/s all pairs, {report['peer_copy_pair_gbps']:.0f} GB/s one pair" if peer else "n/a"))
    print(f"    {'engine':<12} {'tokens':>6} {'check':>7} {'disp us':>9} {'comb us':>9} {'disp GB/s/rank':>15} "
          f"{'comb GB/s/rank':>15} {'minimal':>9} {'vs nccl':>8}")
    for r in report["results"]:
        if r["dispatch_us"] is None:
            print(f"    {r['engine']:<12} {'':>6} {r['check']:>7}  {r.get('reason', '')[:100]}")
            continue
        versus = f"{r['speedup_vs_nccl']:.2f}x" if r["speedup_vs_nccl"] else "-"
        print(f"    {r['engine']:<12} {r['tokens']:>6} {r['check']:>7} {r['dispatch_us']:>9.1f} {r['combine_us']:>9.1f} "
              f"{r['dispatch_gbps_per_rank']:>15.1f} {r['combine_gbps_per_rank']:>15.1f} {r['minimal_fraction']:>9.3f} "
              f"{versus:>8}")
    # The issue's targets (8 x H200, DeepSeek-V3 shape, bf16).
    by = {r["engine"]: r for r in report["results"] if r["dispatch_us"] is not None}
    # The normal engine at explicit channel counts (separate runs, same inputs and seed).
    nccl = by.get("nccl")
    for name in sorted(os.listdir(out)):
        prefix = f"bench-{tokens}-normal-ch"
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        channels = name[len(prefix):-len(".json")]
        extra = [r for r in json.load(open(os.path.join(out, name)))["results"] if r["dispatch_us"] is not None]
        for r in extra:
            label = f"normal@{channels}ch"
            versus = "-"
            if nccl:
                speedup = (nccl["dispatch_us"] + nccl["combine_us"]) / (r["dispatch_us"] + r["combine_us"])
                versus = f"{speedup:.2f}x"
                r["speedup_vs_nccl"] = speedup
            print(f"    {label:<12} {r['tokens']:>6} {r['check']:>7} {r['dispatch_us']:>9.1f} {r['combine_us']:>9.1f} "
                  f"{r['dispatch_gbps_per_rank']:>15.1f} {r['combine_gbps_per_rank']:>15.1f} {r['minimal_fraction']:>9.3f} "
                  f"{versus:>8}")
            by[label] = r
    def verdict(ok):
        return "met" if ok else "NOT met"
    if tokens == "4096":
        for name in ["normal", "symmetric"] + [n for n in by if n.startswith("normal@")]:
            r = by.get(name)
            if r and r["tokens"] == 4096:
                low = min(r["dispatch_gbps_per_rank"], r["combine_gbps_per_rank"])
                print(f"    target {name} >= 400 GB/s per rank at 4096: {low:.1f} -> {verdict(low >= 400)}")
            elif r:
                print(f"    target {name} >= 400 GB/s per rank at 4096: not measured here (it ran "
                      f"{r['tokens']} tokens per rank)")
        for name, r in by.items():
            if name != "nccl" and r["speedup_vs_nccl"]:
                print(f"    target {name} >= 2x nccl at 4096: {r['speedup_vs_nccl']:.2f}x -> {verdict(r['speedup_vs_nccl'] >= 2)}")
    if tokens == "128":
        for name in ("low_latency", "symmetric"):
            r = by.get(name)
            if r and r["tokens"] == 128:
                ok = r["dispatch_us"] <= 40 and r["combine_us"] <= 45
                print(f"    target {name} at 128: dispatch {r['dispatch_us']:.1f} <= 40 us, combine "
                      f"{r['combine_us']:.1f} <= 45 us -> {verdict(ok)}")
EOF
}

{
  echo
  echo "==== gpu-check-multi summary ($OUT)"
  for line in "${SUMMARY[@]}"; do echo "  $line"; done
  has_stage bench && summarize
} | tee "$OUT/summary.txt"
# The device tool brings back at most 8 files: past that, everything but the summary goes into one
# archive.
if (( $(find "$OUT" -maxdepth 1 -type f | wc -l) > 8 )); then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tgz -printf '%P\n' |
     tar czf logs.tgz --remove-files -T -)
fi
exit $status
