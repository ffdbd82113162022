# Sourced by the per-call scripts under bench/results/*/scripts (scripts/device-call.sh does their common
# set-up and sources this): runs one named step of a device call with a time limit inside the call's
# budget, keeps its log under $base, prints its exit status and the lines that matter (STEP_FILTER, an
# extended regex), and refreshes the tarball the call brings back.
#
#   base=$PWD/out/c1; BUDGET=540; STEP_TAR=c1; source scripts/device-step.sh
#   step probe 40 ./switchyard-peer-probe --ranks 8 ...
#
# Set before sourcing: base (log folder), STEP_TAR (the folder's name under out/), BUDGET (seconds for
# the whole call), STEP_FILTER (optional).
step_start=$SECONDS
STEP_FILTER=${STEP_FILTER:-"^  (dispatch|combine|layout)|verdict|^layer|^alone|^gemm peak|rror"}
step_left() { echo $((BUDGET - (SECONDS - step_start))); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local l; l=$(step_left); [ "$l" -lt 15 ] && { echo "== $name skipped (budget)"; return; }
  [ "$limit" -gt "$l" ] && limit=$l
  local t=$SECONDS
  timeout "$limit" "$@" > "$base/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s, at $((SECONDS - step_start)) s)"
  grep -vE "^moe-bench: rank" "$base/$name.log" | grep -E "$STEP_FILTER" | tail -14
  tar -C "$base/.." -czf "$OUT/$STEP_TAR-logs.tar.gz" "$STEP_TAR" 2>/dev/null
}
