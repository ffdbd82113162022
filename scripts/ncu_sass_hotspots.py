#!/usr/bin/env python3
"""Where a kernel's instructions and stall samples go, from Nsight Compute's source page as CSV
(`ncu --section SourceCounters --page source --print-source sass --csv ...`): the SASS address windows that
execute the most warp instructions, with their share of the kernel's instructions and of its stall samples,
then each top window's instructions that ran at least --min-count times (the loop bodies), so that the hot
loop can be matched to the source by its constants and shape. Reads the log from a file or stdin; the CSV
starts at the line whose first field is "Address".

  python3 scripts/ncu_sass_hotspots.py --top 5 --window 1024 ncu-dispatch-sass.log
"""
import argparse
import csv
import sys


def read_rows(lines):
    """(offset from the kernel's first instruction, SASS text, warp instructions executed, stall samples)."""
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise SystemExit('ncu_sass_hotspots: no CSV source page (no line starting with "Address")')
    reader = csv.reader(lines[start:])
    header = next(reader)
    try:
        address, source = header.index("Address"), header.index("Source")
        executed = header.index("Instructions Executed")
        samples = header.index("Warp Stall Sampling (All Samples)")
    except ValueError as missing:
        raise SystemExit(f"ncu_sass_hotspots: the source page lacks a column: {missing}")
    rows = []
    for fields in reader:
        if len(fields) < len(header) or not fields[address].startswith("0x"):
            continue
        rows.append((int(fields[address], 16), fields[source].strip(), int(fields[executed].replace(",", "") or 0),
                     int(fields[samples].replace(",", "") or 0)))
    if not rows:
        raise SystemExit("ncu_sass_hotspots: the source page has no instruction rows")
    first = rows[0][0]
    return [(a - first, text, n, s) for a, text, n, s in rows]


def summarize(rows, top, window, min_count):
    total = sum(n for _, _, n, _ in rows) or 1
    total_samples = sum(s for _, _, _, s in rows) or 1
    windows = {}
    for offset, _, n, s in rows:
        entry = windows.setdefault(offset // window, [0, 0])
        entry[0] += n
        entry[1] += s
    ranked = sorted(windows.items(), key=lambda item: -item[1][0])[:top]
    out = [f"{len(rows)} instructions, {total} warp instructions executed, {total_samples} stall samples",
           f"top {len(ranked)} windows of {window} bytes by instructions executed:",
           "  window        executed   share  samples  share"]
    for key, (n, s) in ranked:
        out.append(f"  {key * window:#08x}  {n:10d}  {100 * n / total:5.1f}%  {s:7d}  {100 * s / total_samples:5.1f}%")
    for key, _ in ranked:
        out.append(f"window {key * window:#08x}: instructions executed >= {min_count}")
        for offset, text, n, s in rows:
            if offset // window == key and n >= min_count:
                out.append(f"  {offset:#08x} {n:10d} {s:6d}  {text}")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", help="ncu's output (default: stdin)")
    parser.add_argument("--top", type=int, default=5, help="windows to show (default 5)")
    parser.add_argument("--window", type=int, default=1024, help="window size in bytes of SASS (default 1024)")
    parser.add_argument("--min-count", type=int, default=0,
                        help="list a window's instructions executed at least this often (default: a tenth of "
                             "the hottest instruction's count)")
    args = parser.parse_args()
    lines = (open(args.log) if args.log else sys.stdin).read().splitlines()
    rows = read_rows(lines)
    min_count = args.min_count or max(1, max(n for _, _, n, _ in rows) // 10)
    print(summarize(rows, args.top, args.window, min_count))


if __name__ == "__main__":
    main()
