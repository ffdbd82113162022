#!/usr/bin/env python3
"""scripts/racecheck_reports.py on racecheck outputs shaped as the GPU machine's (sessions 43, 45 and 47's logs), and
scripts/gpu-check.sh's per-suite allow-lists (RACECHECK_KNOWN_FALSE) against them."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "racecheck_reports.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import racecheck_reports  # noqa: E402
from gpu_check_maps import gpu_check_map  # noqa: E402

KNOWN = r"RowTables::build|load_count\("

BUILD_PAIR = """\
========= Error: Race reported between Write access at switchyard::cuda::RowTables::build(long) const::[lambda(int, int) (instance 1)]::operator ()(int, int) const+0x1ef40 in tables.cuh:52
=========     and Read access at switchyard::cuda::RowTables::build(long) const::[lambda(int) (instance 2)]::operator ()(int) const+0x20340 in tables.cuh:61 [476 hazards]
=========     and Read access at switchyard::cuda::RowTables::build(long) const::[lambda(int) (instance 2)]::operator ()(int) const+0x206a0 in tables.cuh:61 [128 hazards]
"""
COUNT_PAIR = """\
========= Error: Race reported between Write access at switchyard::cuda::<unnamed>::load_count(const switchyard::cuda::KernelContext &, const switchyard::cuda::RowTables &, int)+0x1cfa0 in dispatch_kernel.cu:223
=========     and Read access at switchyard::cuda::RowTables::build(long) const::[lambda(int) (instance 1)]::operator ()(int) const+0x1ed60 in tables.cuh:62 [4 hazards]
"""
# Session 47's sliced build: its second pass's write against expert_of's read after the build's last barrier.
WALK_PAIR = """\
========= Error: Race reported between Write access at void switchyard::cuda::RowTables::build<(bool)1>(long) const+0x21ad0 in tables.cuh:122
=========     and Read access at switchyard::cuda::RowTables::expert_of(int, int) const+0x2cdf0 in tables.cuh:139 [4 hazards]
"""
OTHER_PAIR = """\
========= Error: Race reported between Write access at switchyard::cuda::<unnamed>::push_producer(int)+0x100 in combine_kernel.cu:90
=========     and Read access at switchyard::cuda::RowTables::build(long) const::[lambda(int) (instance 1)]::operator ()(int) const+0x1ed60 in tables.cuh:62 [8 hazards]
"""
PASSED = "[  PASSED  ] 31 tests.\n"
# Session 45's MoE suite: CUTLASS's blockwise mainloop's scale copy reported against itself.
CUTLASS_SCALE_COPY = """\
========= Error: Race reported between Write access at cute::SM80_CP_ASYNC_CACHEALWAYS<float, float>::copy(const float &, float &)+0xc050 in copy_sm80.hpp:64
=========     and Write access at cute::SM80_CP_ASYNC_CACHEALWAYS<float, float>::copy(const float &, float &)+0xc050 in copy_sm80.hpp:64 [64 hazards]
"""
# A report with one side in the layer's own epilogue: what the MoE suite's allow-list must not pass.
EPILOGUE_PAIR = """\
========= Error: Race reported between Write access at cute::SM80_CP_ASYNC_CACHEALWAYS<float, float>::copy(const float &, float &)+0xc050 in copy_sm80.hpp:64
=========     and Read access at switchyard::cuda::moe::SwigluEpilogue::operator ()(int)+0x400 in swiglu_epilogue.cuh:210 [4 hazards]
"""


def summary(reports):
    return f"========= RACECHECK SUMMARY: {reports} hazards displayed ({reports} errors, 0 warnings)\n"


class Verdict(unittest.TestCase):
    def test_known_reports_pass(self):
        passed, message = racecheck_reports.verdict(BUILD_PAIR + COUNT_PAIR + PASSED + summary(2), KNOWN)
        self.assertTrue(passed, message)
        self.assertIn("2 report(s)", message)

    def test_no_reports_pass(self):
        passed, _ = racecheck_reports.verdict(PASSED + summary(0), KNOWN)
        self.assertTrue(passed)

    def test_one_report_of_one_hazard_reads_as_such(self):
        text = COUNT_PAIR + "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"
        passed, message = racecheck_reports.verdict(text, KNOWN)
        self.assertTrue(passed, message)

    def test_a_report_elsewhere_fails_and_is_named(self):
        passed, message = racecheck_reports.verdict(BUILD_PAIR + OTHER_PAIR + summary(2), KNOWN)
        self.assertFalse(passed)
        self.assertIn("push_producer", message)
        self.assertIn("1 reported access", message)

    def test_an_unfinished_run_fails(self):
        passed, message = racecheck_reports.verdict(BUILD_PAIR + "[  FAILED  ] 1 test\n", KNOWN)
        self.assertFalse(passed)
        self.assertIn("RACECHECK SUMMARY", message)


def gpu_check_allow_lists():
    """scripts/gpu-check.sh's RACECHECK_KNOWN_FALSE, suite -> pattern."""
    return gpu_check_map("RACECHECK_KNOWN_FALSE")


class GpuCheckAllowLists(unittest.TestCase):
    def setUp(self):
        self.lists = gpu_check_allow_lists()

    def test_the_suites_with_known_false_reports(self):
        self.assertEqual(sorted(self.lists), ["moe_layer", "rank_mask", "symmetric"])

    def test_the_moe_layer_passes_its_logs_reports(self):
        text = BUILD_PAIR + COUNT_PAIR + CUTLASS_SCALE_COPY + PASSED + summary(3)
        passed, message = racecheck_reports.verdict(text, self.lists["moe_layer"])
        self.assertTrue(passed, message)

    def test_the_moe_layer_still_fails_a_report_of_its_own_code(self):
        passed, message = racecheck_reports.verdict(EPILOGUE_PAIR + summary(1), self.lists["moe_layer"])
        self.assertFalse(passed)
        self.assertIn("swiglu_epilogue.cuh", message)

    def test_the_engine_suites_pass_the_sliced_builds_walk_pair(self):
        for suite in ("symmetric", "rank_mask", "moe_layer"):
            passed, message = racecheck_reports.verdict(WALK_PAIR + COUNT_PAIR + PASSED + summary(2), self.lists[suite])
            self.assertTrue(passed, f"{suite}: {message}")

    def test_the_engine_suites_do_not_pass_cutlass_reports(self):
        for suite in ("symmetric", "rank_mask"):
            passed, _ = racecheck_reports.verdict(CUTLASS_SCALE_COPY + summary(1), self.lists[suite])
            self.assertFalse(passed, suite)


class CommandLine(unittest.TestCase):
    def run_script(self, text, allow):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log:
            log.write(text)
        try:
            return subprocess.run([sys.executable, SCRIPT, "--allow", allow, log.name], capture_output=True,
                                  text=True)
        finally:
            os.unlink(log.name)

    def test_exit_status(self):
        self.assertEqual(self.run_script(BUILD_PAIR + summary(1), KNOWN).returncode, 0)
        failed = self.run_script(OTHER_PAIR + summary(1), KNOWN)
        self.assertEqual(failed.returncode, 1)
        self.assertIn("combine_kernel.cu:90", failed.stdout)

    def test_bad_pattern_is_named(self):
        completed = self.run_script(summary(0), "(unclosed")
        self.assertEqual(completed.returncode, 2)
        self.assertIn("--allow: expected a regular expression, got '(unclosed'", completed.stderr)


if __name__ == "__main__":
    unittest.main()
