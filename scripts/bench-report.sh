#!/usr/bin/env bash
# A picture of switchyard-bench: sweeps tokens per rank (1, 2, 4, ..., 8192), every engine and both
# rank modes (threads, processes), and writes under $OUT (or ./out/bench-report):
#   json/<mode>-<engine>-<tokens>.json   each run's --json
#   logs/<mode>-<engine>-<tokens>.log    each run's output (the verdict is its last line)
#   report.md                            one Markdown table of every run
#   time.png, minimal.png, gbps.png      time, fraction of the minimal bound and GB/s per rank
#                                        against tokens per rank (matplotlib, in a venv of its own)
#
#   bash scripts/bench-report.sh [BENCH] [-- extra bench arguments]
#
# BENCH defaults to build/release/tools/bench/switchyard-bench (scripts/run-bench.sh builds it).
# Environment:
#   SWITCHYARD_REPORT_TOKENS   tokens per rank to sweep (default "1 2 4 ... 8192")
#   SWITCHYARD_REPORT_ENGINES  engines (default "normal low_latency symmetric nccl"; the bench
#                              skips those that cannot run, with the reason, in the table)
#   SWITCHYARD_REPORT_MODES    rank modes (default "threads processes")
#   SWITCHYARD_REPORT_LL_MAX   the most tokens per rank for low_latency, whose heap holds local
#                              experts x ranks x tokens rows per rank (default 512)
#   SWITCHYARD_REPORT_VENV     the venv for matplotlib (default build/bench-report-venv)
# symmetric runs with --expert-capacity auto (its recv_x then holds the rows that arrive, not R x max).
# A run that fails is kept in the table with its verdict, and the script exits 1; a run the bench
# refuses (exit 2: an engine that cannot run here) is listed as skipped.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bench=build/release/tools/bench/switchyard-bench
if [[ $# -gt 0 && $1 != "--" ]]; then
  bench=$1
  shift
fi
[[ ${1:-} == "--" ]] && shift
extra=("$@")
if [[ ! -x $bench ]]; then
  echo "bench-report: no switchyard-bench at $bench (build it: bash scripts/run-bench.sh --help)" >&2
  exit 2
fi

out=${OUT:-$PWD/out/bench-report}
mkdir -p "$out/json" "$out/logs"
tokens_list=${SWITCHYARD_REPORT_TOKENS:-"1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192"}
engines=${SWITCHYARD_REPORT_ENGINES:-"normal low_latency symmetric nccl"}
modes=${SWITCHYARD_REPORT_MODES:-"threads processes"}
ll_max=${SWITCHYARD_REPORT_LL_MAX:-512}

status=0
for mode in $modes; do
  for engine in $engines; do
    for tokens in $tokens_list; do
      if [[ $engine == low_latency && $tokens -gt $ll_max ]]; then continue; fi
      name="$mode-$engine-$tokens"
      args=(--engine "$engine" --tokens "$tokens" --ranks-as "$mode" --json "$out/json/$name.json")
      [[ $engine == symmetric ]] && args+=(--expert-capacity auto)
      "$bench" "${args[@]}" "${extra[@]}" >"$out/logs/$name.log" 2>&1
      case $? in
        0) echo "bench-report: $name: $(tail -1 "$out/logs/$name.log")" ;;
        # The bench refuses what cannot run here (nccl on cpu or on a shared GPU): not a failure.
        2) echo "bench-report: $name: skipped: $(tail -1 "$out/logs/$name.log")"; rm -f "$out/json/$name.json" ;;
        *) echo "bench-report: $name: FAILED: $(tail -1 "$out/logs/$name.log")"; status=1 ;;
      esac
    done
  done
done

# matplotlib in a venv of its own (seeing the system's packages, so that a machine without a package
# registry can use a matplotlib it already has).
venv=${SWITCHYARD_REPORT_VENV:-build/bench-report-venv}
python=python3
if [[ -x $venv/bin/python ]] || python3 -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
  python=$venv/bin/python
  if ! "$python" -c "import matplotlib" >/dev/null 2>&1; then
    "$python" -m pip install -q matplotlib >/dev/null 2>&1 || echo "bench-report: could not install matplotlib: no plots" >&2
  fi
fi

"$python" - "$out" <<'PYTHON' || status=1
"""Reads every run's JSON under OUT/json and writes OUT/report.md and, with matplotlib, the plots."""
import glob
import json
import os
import sys

out = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(out, "json", "*.json"))):
    report = json.load(open(path))
    for result in report["results"]:
        rows.append({"mode": report.get("ranks_as", "threads"), "ranks": report["ranks"], "engine": result["engine"],
                     "tokens": result["tokens"] if result["tokens"] is not None else report["tokens"],
                     "result": result, "backend": report["backend"]})
rows.sort(key=lambda row: (row["engine"], row["mode"], row["tokens"]))


def cell(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


with open(os.path.join(out, "report.md"), "w") as table:
    table.write("| engine | ranks as | tokens/rank | dispatch us | combine us | ns/token | dispatch GB/s/rank | "
                "combine GB/s/rank | minimal | design | check |\n")
    table.write("|---|---|---|---|---|---|---|---|---|---|---|\n")
    for row in rows:
        r = row["result"]
        per_token = None
        if r["dispatch_ns_per_token"] is not None and r["combine_ns_per_token"] is not None:
            per_token = r["dispatch_ns_per_token"] + r["combine_ns_per_token"]
        check = r["check"] if r["check"] == "pass" else f"{r['check']}: {r.get('reason', '')}"
        table.write(f"| {row['engine']} | {row['mode']} | {row['tokens']} | {cell(r['dispatch_us'])} | "
                    f"{cell(r['combine_us'])} | {cell(per_token)} | {cell(r['dispatch_gbps_per_rank'], 2)} | "
                    f"{cell(r['combine_gbps_per_rank'], 2)} | {cell(r['minimal_fraction'], 3)} | "
                    f"{cell(r['design_fraction'], 3)} | {check} |\n")
print(f"bench-report: {len(rows)} rows in {os.path.join(out, 'report.md')}")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("bench-report: matplotlib is not available: no plots")
    sys.exit(0)

series = {}
for row in rows:
    if row["result"]["check"] != "pass":
        continue
    series.setdefault((row["engine"], row["mode"]), []).append(row)


def plot(file_name, title, ylabel, value_of, log_y=True):
    figure, axes = plt.subplots(figsize=(8, 5))
    for (engine, mode), points in sorted(series.items()):
        xs = [p["tokens"] for p in points if value_of(p["result"]) is not None and p["tokens"] > 0]
        ys = [value_of(p["result"]) for p in points if value_of(p["result"]) is not None and p["tokens"] > 0]
        if xs:
            axes.plot(xs, ys, marker="o", linestyle="-" if mode == "threads" else "--", label=f"{engine} ({mode})")
    axes.set_xscale("log", base=2)
    if log_y:
        axes.set_yscale("log")
    axes.set_xlabel("tokens per rank")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(os.path.join(out, file_name), dpi=120)
    plt.close(figure)


ranks = rows[0]["ranks"] if rows else 0
backend = rows[0]["backend"] if rows else ""
plot("time.png", f"dispatch + combine time ({ranks} ranks, {backend})", "median us, dispatch + combine",
     lambda r: r["dispatch_us"] + r["combine_us"])
plot("minimal.png", "fraction of the minimal bound (both phases)", "minimal bound / time",
     lambda r: r["minimal_fraction"], log_y=False)
plot("gbps.png", "GB/s per rank, DeepEP's convention (dispatch + combine bytes / time)", "GB/s per rank",
     lambda r: None if r["dispatch_gbps_per_rank"] is None or r["combine_gbps_per_rank"] is None
     else 2 / (1 / r["dispatch_gbps_per_rank"] + 1 / r["combine_gbps_per_rank"]))
print(f"bench-report: plots in {out}: time.png, minimal.png, gbps.png")
PYTHON
exit "$status"
