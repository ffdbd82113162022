"""The README's C++ and Python code blocks are the files under examples/, verbatim.

Each such block is preceded by a marker line naming its file:

    <!-- example: examples/cpp/round_trip.cpp -->
    ```cpp
    ...the whole file...
    ```

A block without a marker, a marker without a block, or a block that differs from its file fails,
so the README cannot show code that CI does not build and run.

    python3 tests/readme/check_examples.py            # check (exit 1 on a difference)
    python3 tests/readme/check_examples.py --write    # copy the files into the README's blocks
"""
import argparse
import difflib
import pathlib
import re
import sys

CHECKED_LANGUAGES = {"cpp", "c++", "python", "py"}
MARKER = re.compile(r"^<!-- example: (\S+) -->$")
FENCE = re.compile(r"^```(\S*)\s*$")


def blocks(lines):
    """(language, first line index, end fence index, marker path or None) of every fenced block."""
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        previous = lines[index - 1].strip() if index > 0 else ""
        marker = MARKER.match(previous)
        yield opening.group(1).lower(), index + 1, end, marker.group(1) if marker else None
        index = end + 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", default=None, help="default: README.md at the repository root")
    parser.add_argument("--write", action="store_true", help="replace each marked block by its file")
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parents[2]
    readme = pathlib.Path(args.readme) if args.readme else root / "README.md"
    lines = readme.read_text().split("\n")

    problems, replacements = [], []
    for language, begin, end, path in blocks(lines):
        where = f"{readme.name}:{begin}"
        if path is None:
            if language in CHECKED_LANGUAGES:
                problems.append(f"{where}: a {language} block without '<!-- example: examples/... -->' above it; "
                                "put the code in a file under examples/ and include it")
            continue
        example = root / path
        if not example.is_file():
            problems.append(f"{where}: {path} does not exist")
            continue
        wanted = example.read_text().rstrip("\n").split("\n")
        shown = lines[begin:end]
        if shown != wanted:
            replacements.append((begin, end, wanted))
            diff = difflib.unified_diff(wanted, shown, fromfile=path, tofile=f"{readme.name} (line {begin})",
                                        lineterm="", n=1)
            problems.append(f"{where}: the block differs from {path}:\n" + "\n".join(diff))

    if args.write:
        for begin, end, wanted in reversed(replacements):
            lines[begin:end] = wanted
        readme.write_text("\n".join(lines))
        print(f"check_examples: {len(replacements)} block(s) of {readme.name} rewritten from their files")
        problems = [p for p in problems if "differs from" not in p]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check_examples: {len(problems)} problem(s); `python3 {pathlib.Path(__file__).relative_to(root)} "
              "--write` copies the example files into the README", file=sys.stderr)
        return 1
    if not args.write:
        print(f"check_examples: every C++ and Python block of {readme.name} is its example file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
