#!/usr/bin/env python3
"""scripts/gpu-check.sh's compute-sanitizer filters for the normal suite, against the cases the suite's binary
lists (argv[1]): racecheck runs the ring paths on rings no sender waits on (Small_R1_fp8_wide_rings) and not on
the small-ring cases that stop under it (bench/NOTES.md, session 46), while memcheck and synccheck keep those.
A renamed or dropped case would otherwise leave a sanitizer run with nothing to run, or racecheck on a case
that stops."""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check_maps import gpu_check_map  # noqa: E402

BINARY = None  # set from argv


def listed(gtest_filter):
    """The test names the binary runs under `gtest_filter` (suite.name/param)."""
    out = subprocess.run([BINARY, "--gtest_list_tests", f"--gtest_filter={gtest_filter}"], check=True,
                         capture_output=True, text=True).stdout
    names, suite = [], ""
    for line in out.splitlines():
        if not line.strip() or line.startswith("Running main"):
            continue
        if not line.startswith(" "):
            suite = line.strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return names


class NormalSuiteSanitizerFilters(unittest.TestCase):
    def test_racecheck_takes_the_wide_rings_and_not_the_small_ones(self):
        racecheck = gpu_check_map("RACECHECK_FILTER")["normal_engine"]
        names = listed(racecheck)
        self.assertTrue(any(name.endswith("/Small_R1_fp8_wide_rings") for name in names), names)
        self.assertTrue(any("Small_R1_fp8_heap_inputs" in name for name in names), names)
        for small in ("/Small_R1_fp8", "/Small_R1_tuned"):
            self.assertFalse(any(name.endswith(small) for name in names), f"racecheck runs {small}: {names}")

    def test_memcheck_and_synccheck_keep_the_small_rings(self):
        names = listed(gpu_check_map("SANITIZER_FILTER")["normal_engine"])
        for small in ("/Small_R1_fp8", "/Small_R1_tuned", "/Small_R1_fp8_wide_rings"):
            self.assertTrue(any(name.endswith(small) for name in names), f"{small} not in {names}")


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
