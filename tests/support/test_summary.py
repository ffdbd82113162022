"""One line per test step instead of one per test, for scripts/run-tests.sh.

    ctest ... --output-junit J 2>&1 | python3 test_summary.py ctest --step release --junit J --log L --skipped S
    python3 test_summary.py junit --step python --junit J --skipped S      # after pytest --junitxml=J

`ctest` mode reads ctest's output on stdin, writes all of it to L and passes on only what a person
needs: failed tests with their output, ctest's list of failures and anything it does not recognise.
Passed and skipped tests are counted instead of listed. Both modes then print the step's summary,

    == [release] 759 ran, 405 passed, 353 need a GPU (skipped), 1 skipped for another reason

and write every skipped test, with the reason it gave, to S. The exit status is always 0: the
caller takes the verdict from ctest or pytest (bash's pipefail).
"""
import argparse
import os
import re
import sys
import xml.etree.ElementTree as ElementTree

# What the GPU suites say when they skip (tests/cuda, tests/bench, tests/python/torch_support.py).
NEEDS_GPU = re.compile(r"no CUDA device|sees no CUDA|torch is not installed|no CUDA backend|needs two GPUs")

RESULT = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (?P<name>.*?) \.*\s*(?P<status>\**[A-Za-z][A-Za-z ()]*?)\s+[\d.]+ sec")
START = re.compile(r"^\s+Start\s+\d+: ")
QUIET_RESULTS = ("Passed", "***Skipped", "Skipped")
# ctest's own lines around the results that the summary replaces.
NOISE = (re.compile(r"^Test project "), re.compile(r"^\d+% tests passed"), re.compile(r"^Total Test time"),
         re.compile(r"^\s*$"))


def filter_ctest(lines, log, out):
    """Copies everything to log; passes on failures and unknown lines to out."""
    showing_output = False  # inside a failed test's output, or ctest's list of failures
    in_not_run_list = False  # ctest's list of skipped tests
    progress = out.isatty()
    for line in lines:
        log.write(line)
        text = line.rstrip("\n")
        result = RESULT.match(text)
        if result:
            showing_output = result.group("status") not in QUIET_RESULTS and "(Disabled)" not in text
            in_not_run_list = False
            if progress and not showing_output:
                out.write(f"\r\033[K{text.split(':', 1)[0].strip()}")
                out.flush()
                continue
        if progress:
            out.write("\r\033[K")
        if START.match(text):
            showing_output = False
            continue
        if text.startswith("The following tests did not run:"):
            in_not_run_list, showing_output = True, False
            continue
        if text.startswith("The following tests FAILED:"):
            in_not_run_list, showing_output = False, True
        if in_not_run_list and text.startswith("\t"):
            continue
        in_not_run_list = False
        if result:
            if showing_output:
                out.write(line)
        elif showing_output or not any(pattern.match(text) for pattern in NOISE):
            out.write(line)
    if progress:
        out.write("\r\033[K")


def junit_cases(path):
    """(name, outcome, text) per test case of a ctest or pytest JUnit file; outcome is passed, skipped,
    failed or disabled; text is a skipped test's output, then the skip message."""
    root = ElementTree.parse(path).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        if case.get("classname") and case.get("classname") != name and "." in case.get("classname"):
            name = f"{case.get('classname')}.{name}"  # pytest: module.test
        output = case.findtext("system-out") or ""
        skipped = case.find("skipped")
        if case.get("status") == "disabled" or (skipped is not None and skipped.get("type") == "disabled"):
            yield name, "disabled", ""
        elif case.find("failure") is not None or case.find("error") is not None or case.get("status") == "fail":
            yield name, "failed", ""
        elif skipped is not None or case.get("status") == "notrun":
            message = skipped.get("message", "") if skipped is not None else ""
            # ctest's message says how it saw the skip (SKIP_RETURN_CODE=77); pytest's is the reason.
            yield name, "skipped", "\n".join(filter(None, [output, skipped.text if skipped is not None else "", message]))
        else:
            yield name, "passed", ""


def skip_reason(text):
    """The line a skipped test gave as its reason (GoogleTest prints it after 'Skipped')."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.endswith(": Skipped") and index + 1 < len(lines):
            return lines[index + 1]
        if line.startswith("skipped: "):
            return line[len("skipped: "):]
    return lines[0] if lines else "no reason given"


def summarise(step, junit, skipped_path, log_path):
    counts = {"passed": 0, "failed": 0, "disabled": 0}
    gpu, other = [], []
    for name, outcome, text in junit_cases(junit):
        if outcome == "skipped":
            (gpu if NEEDS_GPU.search(text) else other).append(f"{name}: {skip_reason(text)}")
        else:
            counts[outcome] += 1
    total = sum(counts.values()) + len(gpu) + len(other)
    parts = [f"{total} ran", f"{counts['passed']} passed", f"{len(gpu)} need a GPU (skipped)"]
    if other:
        parts.append(f"{len(other)} skipped for another reason")
    if counts["disabled"]:
        parts.append(f"{counts['disabled']} disabled")
    if counts["failed"]:
        parts.append(f"{counts['failed']} FAILED")
    os.makedirs(os.path.dirname(os.path.abspath(skipped_path)), exist_ok=True)
    with open(skipped_path, "w") as listing:
        listing.write(f"# [{step}] tests that skipped themselves, with their reason\n")
        for title, names in (("need a GPU", gpu), ("another reason", other)):
            listing.write(f"\n## {title} ({len(names)})\n")
            listing.writelines(f"{entry}\n" for entry in names)
    where = [f"skipped: {skipped_path}"] + ([f"output: {log_path}"] if log_path else [])
    print(f"== [{step}] {', '.join(parts)}  ({'; '.join(where)})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("ctest", "junit"))
    parser.add_argument("--step", required=True)
    parser.add_argument("--junit", required=True)
    parser.add_argument("--skipped", required=True, help="where to list the skipped tests")
    parser.add_argument("--log", help="ctest mode: where to write ctest's whole output")
    args = parser.parse_args()
    if args.mode == "ctest":
        if not args.log:
            parser.error("ctest mode needs --log")
        with open(args.log, "w") as log:
            filter_ctest(sys.stdin, log, sys.stdout)
    sys.stdout.flush()
    if os.path.exists(args.junit):
        summarise(args.step, args.junit, args.skipped, args.log)
    else:
        print(f"== [{args.step}] no results ({args.junit} was not written){f'; output: {args.log}' if args.log else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
