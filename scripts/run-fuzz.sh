#!/usr/bin/env bash
# Builds switchyard's libFuzzer targets with clang under ASan and UBSan (build/fuzz) and runs each for
# a fixed time from its committed seed corpus (tests/fuzz/corpus/<target>/). Any finding (a crash, a
# sanitizer report, a leak, an out-of-memory, a hang) fails the run, with the input's path printed.
#
#   bash scripts/run-fuzz.sh                  # calls, connect and python, 60 s each
#   bash scripts/run-fuzz.sh calls connect    # the C++ targets only
#   SWITCHYARD_PYTHON=/path/to/venv/bin/python3 bash scripts/run-fuzz.sh python
#
# Targets:
#   calls     host validation of every public call on 1-rank CPU buffers (tests/fuzz/calls_fuzzer.cpp)
#   connect   handle deserialisation in Buffer::connect() (tests/fuzz/connect_fuzzer.cpp)
#   python    the Python argument layer, through atheris (tests/fuzz/python/fuzz_python.py)
#
# Environment:
#   SWITCHYARD_FUZZ_SECONDS  seconds per target (default 60)
#   SWITCHYARD_PYTHON        the interpreter of the python target, which must import switchyard:
#                            a path, `venv` (build/python-venv, as scripts/run-tests.sh makes it; the
#                            default) or `system` (python3 on PATH). atheris is pip-installed into it
#                            when missing.
#
# Debian/Ubuntu: installs clang, its libFuzzer runtime, cmake and ninja with apt-get when missing
# (as root, or through sudo). New corpus units go to build/fuzz/corpus/<target>/, crash inputs to
# build/fuzz/artifacts/<target>/; the committed corpus is only read.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$repo_root/build/fuzz
seconds=${SWITCHYARD_FUZZ_SECONDS:-60}
python_choice=${SWITCHYARD_PYTHON:-venv}
# NOTES: a single input runs in milliseconds; 30 s only flags a wait that never ends (the targets'
# buffers time out after 5 s, and a 1-rank call never waits on a peer).
input_timeout=30
# NOTES: above what ASan's quarantine and the targets' reused buffers hold after a long run.
rss_limit_mb=4096

targets=()
for arg in "$@"; do
  case "$arg" in
    calls|connect|python) targets+=("$arg") ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-fuzz.sh: unknown target '$arg' (expected calls, connect or python)" >&2; exit 2 ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=(calls connect python)
if ! [[ $seconds =~ ^[0-9]+$ ]] || [[ $seconds -lt 1 ]]; then
  echo "run-fuzz.sh: SWITCHYARD_FUZZ_SECONDS='$seconds' (expected a positive number of seconds)" >&2
  exit 2
fi

as_root=()
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
fi
apt_updated=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "run-fuzz: missing $*, and apt-get is not available; install them by hand" >&2
    exit 1
  fi
  if [[ $(id -u) -ne 0 && ${#as_root[@]} -eq 0 ]]; then
    echo "run-fuzz: missing $*; run as root or install sudo" >&2
    exit 1
  fi
  echo "run-fuzz: installing $*"
  if [[ $apt_updated == 0 ]]; then
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    apt_updated=1
  fi
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

# A fuzz target links with clang's libFuzzer and sanitizer runtimes: Debian ships them apart from
# clang, in libclang-rt-<major>-dev.
links_a_fuzzer() {
  local probe
  probe=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$probe/probe.cpp"
  clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" >/dev/null 2>&1
  local status=$?
  rm -rf "$probe"
  return $status
}

install_cpp_tools() {
  bash "$repo_root/scripts/install-deps.sh"  # cmake, ninja, make (and g++, GoogleTest for the suite)
  command -v clang++ >/dev/null 2>&1 || apt_install clang
  if ! links_a_fuzzer; then
    local major
    major=$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
    apt_install "libclang-rt-$major-dev"
    links_a_fuzzer || { echo "run-fuzz: clang++ still cannot link -fsanitize=fuzzer" >&2; exit 1; }
  fi
}

build_cpp_targets() {
  local names=()
  for target in "$@"; do names+=("switchyard_fuzz_$target"); done
  echo "== [fuzz] building ${names[*]} with clang, ASan and UBSan ($build_dir)"
  cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSWITCHYARD_CUDA=OFF -DSWITCHYARD_FUZZ=ON -DSWITCHYARD_BUILD_TESTS=OFF -DSWITCHYARD_BUILD_BENCH=OFF \
    -DSWITCHYARD_MPI=OFF >"$build_dir.configure.log" 2>&1 || { cat "$build_dir.configure.log" >&2; exit 1; }
  cmake --build "$build_dir" --target "${names[@]}" -j "$(nproc)"
}

# The interpreter of the python target, with switchyard importable and atheris installed.
python_for_fuzz() {
  local python
  case "$python_choice" in
    venv) python=$repo_root/build/python-venv/bin/python ;;
    system) python=$(command -v python3 || true) ;;
    *) python=$python_choice ;;
  esac
  if [[ -z $python || ! -x $python ]]; then
    echo "run-fuzz: no Python interpreter at '${python}' (SWITCHYARD_PYTHON=$python_choice); give a path, or" \
      "run scripts/run-tests.sh's python step first for build/python-venv" >&2
    exit 1
  fi
  if ! "$python" -c 'import switchyard' >/dev/null 2>&1; then
    echo "run-fuzz: $python cannot import switchyard; install it there first (pip install ./)" >&2
    exit 1
  fi
  if ! "$python" -c 'import atheris' >/dev/null 2>&1; then
    local pip_args=(--disable-pip-version-check -q)
    [[ $(id -u) -ne 0 ]] || pip_args+=(--root-user-action=ignore)
    # Outside a virtual environment, Debian's PEP 668 mark refuses pip; SWITCHYARD_PYTHON chose this one.
    if ! "$python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' &&
       "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")))'; then
      pip_args+=(--break-system-packages)
    fi
    echo "run-fuzz: $python -m pip install atheris" >&2
    "$python" -m pip install "${pip_args[@]}" atheris >&2 ||
      { echo "run-fuzz: atheris could not be installed for $python" >&2; exit 1; }
  fi
  echo "$python"
}

# Runs one target for $seconds from its corpus; returns non-zero on a finding.
run_target() {
  local target=$1
  shift
  local corpus=$build_dir/corpus/$target artifacts=$build_dir/artifacts/$target
  local log=$build_dir/$target.log
  mkdir -p "$corpus" "$artifacts" "$repo_root/tests/fuzz/corpus/$target"
  find "$artifacts" -type f -delete
  echo "== [fuzz] $target: ${seconds}s from tests/fuzz/corpus/$target (log: $log)"
  local status=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$@" -max_total_time="$seconds" -timeout="$input_timeout" -rss_limit_mb="$rss_limit_mb" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "$repo_root/tests/fuzz/corpus/$target" \
    >"$log" 2>&1 || status=$?
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [[ $status -ne 0 ]] || [[ -n $(find "$artifacts" -type f) ]]; then
    echo "== [fuzz] $target: FINDING (exit $status); the end of $log:" >&2
    tail -n 60 "$log" >&2
    find "$artifacts" -type f | while read -r input; do
      echo "run-fuzz: $target finding input: $input" >&2
    done
    return 1
  fi
  echo "== [fuzz] $target: ${runs:-?} inputs in ${seconds}s, no finding"
}

cpp_targets=()
want_python=0
for target in "${targets[@]}"; do
  if [[ $target == python ]]; then want_python=1; else cpp_targets+=("$target"); fi
done

python=""
if [[ $want_python == 1 ]]; then
  python=$(python_for_fuzz)
fi
mkdir -p "$build_dir"
if [[ ${#cpp_targets[@]} -gt 0 ]]; then
  install_cpp_tools
  build_cpp_targets "${cpp_targets[@]}"
fi

failed=()
for target in "${targets[@]}"; do
  if [[ $target == python ]]; then
    run_target python "$python" "$repo_root/tests/fuzz/python/fuzz_python.py" || failed+=(python)
  else
    run_target "$target" "$build_dir/tests/fuzz/switchyard_fuzz_$target" || failed+=("$target")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run-fuzz: findings in ${failed[*]} (inputs under $build_dir/artifacts/)" >&2
  exit 1
fi
echo "run-fuzz: ${targets[*]}: ${seconds}s each, no finding"
