#!/usr/bin/env python3
"""Reads compute-sanitizer racecheck output and passes it when every race it reports is a known false one.

racecheck misreads block barriers in some kernels (bench/NOTES.md, session 43: a subset of warps taking a
counted named barrier more than once, then a write and a read across a __syncthreads that every thread
reaches). scripts/gpu-check.sh names, per suite, the code those false reports point at; this script fails a
run that reports anything else, so that a new race is still caught.

  python3 scripts/racecheck_reports.py --allow 'RowTables::build|load_count\\(' sanitizer-racecheck-symmetric.log

Exit status 0: the output has racecheck's summary line and every reported access ("Write access at ...",
"Read access at ...") matches --allow (an extended regular expression, Python's re.search). 1: otherwise,
with the accesses that did not match (or the missing summary) printed. 2: bad arguments.
"""
import argparse
import re
import sys

SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed")
ACCESS = re.compile(r"(?:Write|Read) access at (.*)")


def unknown_accesses(text, allow):
    """The reported accesses (the text after "access at") that `allow` does not match, in order."""
    pattern = re.compile(allow)
    return [match.group(1).strip() for match in ACCESS.finditer(text) if not pattern.search(match.group(1))]


def verdict(text, allow):
    """(passed, message) for one racecheck output."""
    summary = SUMMARY.search(text)
    if summary is None:
        return False, "no RACECHECK SUMMARY line: racecheck did not finish (see the log)"
    unknown = unknown_accesses(text, allow)
    if unknown:
        listed = "\n".join(f"  {access}" for access in unknown[:20])
        return False, f"{len(unknown)} reported access(es) outside the known false reports ({allow}):\n{listed}"
    reported = int(summary.group(1))
    return True, f"{reported} report(s), every one a known false report ({allow})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allow", required=True,
                        help="extended regular expression every reported access must match")
    parser.add_argument("log", help="racecheck's output")
    args = parser.parse_args()
    try:
        re.compile(args.allow)
    except re.error as error:
        parser.error(f"--allow: expected a regular expression, got '{args.allow}' ({error})")
    with open(args.log, errors="replace") as log:
        passed, message = verdict(log.read(), args.allow)
    print(f"racecheck_reports: {message}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
