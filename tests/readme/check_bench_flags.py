"""The README's switchyard-bench flag table lists exactly the flags that `switchyard-bench --help` lists.

    python3 tests/readme/check_bench_flags.py build/release/tools/bench/switchyard-bench

The table is the first Markdown table under the README's "## switchyard-bench" heading whose header
starts with "flag"; a flag is any `--name` in its first column. In --help, a flag is a line that
starts with two spaces and `--name`. `--help` itself need not be in the table.

Exit status 0 when they agree, 1 (naming each flag) when they do not.
"""
import argparse
import pathlib
import re
import subprocess
import sys

FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
HELP_FLAG = re.compile(r"^  (--[a-z0-9][a-z0-9-]*)")
CELL_BORDER = re.compile(r"(?<!\\)\|")  # `a\|b` inside a cell is one cell
SECTION = "## switchyard-bench"
NOT_IN_TABLE = {"--help"}


def table_flags(readme_text):
    lines = readme_text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        raise SystemExit(f"check_bench_flags: the README has no '{SECTION}' section")
    flags, in_table = set(), False
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if in_table:
                break
            continue
        cells = [cell.strip() for cell in CELL_BORDER.split(line.strip().strip("|"))]
        if not in_table:
            in_table = cells[0].lower() == "flag"
            continue
        flags.update(FLAG.findall(cells[0]))
    if not flags:
        raise SystemExit(f"check_bench_flags: no flag table (header 'flag') under '{SECTION}'")
    return flags


def help_flags(bench):
    text = subprocess.run([bench, "--help"], check=True, capture_output=True, text=True).stdout
    return {match.group(1) for match in map(HELP_FLAG.match, text.split("\n")) if match} - NOT_IN_TABLE


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", help="the switchyard-bench binary")
    parser.add_argument("--readme", default=str(pathlib.Path(__file__).resolve().parents[2] / "README.md"))
    args = parser.parse_args()
    in_table = table_flags(pathlib.Path(args.readme).read_text())
    in_help = help_flags(args.bench)
    missing, stale = sorted(in_help - in_table), sorted(in_table - in_help)
    for flag in missing:
        print(f"check_bench_flags: {flag} is in --help but not in the README's table", file=sys.stderr)
    for flag in stale:
        print(f"check_bench_flags: {flag} is in the README's table but not in --help", file=sys.stderr)
    if missing or stale:
        return 1
    print(f"check_bench_flags: the README's table and --help list the same {len(in_help)} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
