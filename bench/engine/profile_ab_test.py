#!/usr/bin/env python3
"""Tests of profile_ab.py: its reading of profile_step's output (the lines as
bench/engine/profile_step.cc and bench/profile/kernel_profile.cc print them), the side-by-side
table, and, with the CPU build's real profile_step (which exits 2: no Kineto there), that a
failed profile is exit 3 and named. PROFILE_STEP: that binary (ctest passes it)."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_ab  # noqa: E402

BASE = """step without the profiler: 56.34 ms
gemm tuning: 14 cuBLASLt problems timed, 3 moved off the first pick, 2 with the workspace
steps profiled: 3; wall 58.100 ms/step; GPU busy 55.200 ms/step (95.0%); kernels 55.900 ms/step (their sum: more than busy where they overlap)
GPU idle per step: 0.738 ms between kernels (1200.0 gaps of 0.61 us on average), 0.052 ms in 1.3 stalls of 10 us or more
  stall     21.0 us after RegisterForwardKernel
 ms/step  share  calls  kernel
  20.500  37.1%   48.0  sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64 cublasLt
   8.500  15.4%   12.0  cudnn_generated_fort_native_sdpa_sm90 (flash, bwd)
   1.074   1.9%   36.0  void mt::kernels::(anonymous namespace)::ChunkSumKernel<__nv_bfloat16, 8>(...)
"""

VARIANT = """step without the profiler: 56.90 ms
gemm tuning: 0 cuBLASLt problems timed, 0 moved off the first pick
steps profiled: 3; wall 58.500 ms/step; GPU busy 55.700 ms/step (95.2%)
GPU idle per step: 0.700 ms between kernels (1190.0 gaps of 0.59 us on average), 0.060 ms in 1.0 stalls of 10 us or more
 ms/step  share  calls  kernel
  21.100  37.9%   48.0  sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64 cublasLt
   8.500  15.3%   12.0  cudnn_generated_fort_native_sdpa_sm90 (flash, bwd)
   0.900   1.6%   12.0  void at::native::reduce_kernel<512, 1>(...)
"""


class ParseTest(unittest.TestCase):
    def test_reads_every_figure_and_kernel(self):
        p = profile_ab.parse_profile(BASE)
        self.assertEqual(p["scalars"], {"step": 56.34, "tuned": 14.0, "moved": 3.0,
                                        "workspace": 2.0, "busy": 55.2, "kernels": 55.9,
                                        "gaps": 0.738, "stalls": 0.052})
        self.assertEqual(len(p["kernels"]), 3)
        self.assertEqual(p["kernels"]["cudnn_generated_fort_native_sdpa_sm90 (flash, bwd)"],
                         (8.5, 12.0))
        # The stall line above the table is not a kernel.
        self.assertFalse(any("stall" in k for k in p["kernels"]))

    def test_an_older_binary_without_the_tuning_line_leaves_it_out(self):
        text = BASE.replace("gemm tuning: 14 cuBLASLt problems timed, 3 moved off the first "
                            "pick, 2 with the workspace\n", "")
        p = profile_ab.parse_profile(text)
        self.assertNotIn("tuned", p["scalars"])
        lines = profile_ab.compare_lines(p, None, 5, "ours")
        tuned = [ln for ln in lines if ln.startswith("GEMM problems tuned")][0]
        self.assertEqual(tuned.split()[-1], "-")


class CompareTest(unittest.TestCase):
    def test_side_by_side_with_the_union_of_the_top_kernels(self):
        lines = profile_ab.compare_lines(profile_ab.parse_profile(BASE),
                                         profile_ab.parse_profile(VARIANT), 3,
                                         "--no-gemm-tuning")
        text = "\n".join(lines)
        step = [ln for ln in lines if ln.startswith("step without the profiler")][0]
        self.assertEqual(step.split()[-3:], ["56.340", "56.900", "+0.560"])
        moved = [ln for ln in lines if ln.startswith("moved off the first pick")][0]
        self.assertEqual(moved.split()[-3:], ["3", "0", "-3"])
        # The variant's binary predates the workspace count: "-" there and no difference.
        workspace = [ln for ln in lines if ln.startswith("run with the workspace")][0]
        self.assertEqual(workspace.split()[-3:], ["2", "-", "-"])
        gemm = [ln for ln in lines if ln.endswith("tilesize128x128x64 cublasLt")][0]
        self.assertEqual(gemm.split()[:5], ["20.500", "48.0", "21.100", "48.0", "+0.600"])
        # A kernel only one side has: "-" on the other, no difference.
        chunk = [ln for ln in lines if "ChunkSumKernel" in ln][0]
        self.assertEqual(chunk.split()[:5], ["1.074", "36.0", "-", "-", "-"])
        reduce = [ln for ln in lines if "reduce_kernel" in ln][0]
        self.assertEqual(reduce.split()[:5], ["-", "-", "0.900", "12.0", "-"])
        self.assertEqual(text.count("sdpa_sm90"), 1)

    def test_the_top_cuts_each_side_before_the_union(self):
        lines = profile_ab.compare_lines(profile_ab.parse_profile(BASE), None, 1, "ours")
        self.assertTrue(any("tilesize128x128x64" in ln for ln in lines))
        self.assertFalse(any("sdpa" in ln for ln in lines))


class MainTest(unittest.TestCase):
    def run_main(self, argv):
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            try:
                rc = profile_ab.main(argv)
            except SystemExit as e:
                rc = e.code
        return rc, err.getvalue()

    def test_bad_flags_are_named(self):
        with tempfile.TemporaryDirectory() as out:
            rc, err = self.run_main(["--profile-step", "/bin/true", "--out", out,
                                     "--sizes", "124m,7b"])
            self.assertEqual(rc, 2)
            self.assertIn("--sizes: unknown size '7b'", err)
            rc, err = self.run_main(["--profile-step", "/nonexistent/profile_step", "--out", out])
            self.assertEqual(rc, 2)
            self.assertIn("no profile_step at /nonexistent/profile_step", err)
            rc, err = self.run_main(["--profile-step", "/bin/true", "--out", out, "--steps", "0"])
            self.assertEqual(rc, 2)
            self.assertIn("--steps", err)
            rc, err = self.run_main(["--profile-step", "/bin/true", "--out", out,
                                     "--timeout", "0"])
            self.assertEqual(rc, 2)
            self.assertIn("--timeout", err)
            # A switch may follow --variant-arg after a space (argparse alone refuses it: it
            # takes "--no-gemm-tuning" for an option of its own).
            rc, err = self.run_main(["--profile-step", "/bin/true", "--out", out,
                                     "--variant-arg", "--no-gemm-tuning", "--sizes", "7b"])
            self.assertEqual(rc, 2)
            self.assertIn("--sizes: unknown size '7b'", err)

    def test_a_run_past_its_timeout_is_stopped_and_named(self):
        # A profile_step that never answers (a hung GPU): the run is stopped, exit 3.
        with tempfile.TemporaryDirectory() as out:
            hung = os.path.join(out, "hung_profile_step")
            with open(hung, "w") as f:
                f.write("#!/bin/sh\nexec sleep 30\n")
            os.chmod(hung, 0o755)
            rc, err = self.run_main(["--profile-step", hung, "--out", out, "--sizes", "tiny",
                                     "--timeout", "0.5"])
            self.assertEqual(rc, 3)
            self.assertIn("ran past --timeout 0.5 s", err)

    @unittest.skipUnless(os.environ.get("PROFILE_STEP"), "PROFILE_STEP not set (ctest sets it)")
    def test_a_failed_profile_is_exit_3_with_its_log(self):
        # The CPU build's profile_step exits 2 (no Kineto): the run fails and says where to look.
        with tempfile.TemporaryDirectory() as out:
            rc, err = self.run_main(["--profile-step", os.environ["PROFILE_STEP"], "--out", out,
                                     "--sizes", "tiny", "--variant-arg=--no-gemm-tuning"])
            if rc == 0:
                self.skipTest("this profile_step profiles (a CUDA build)")
            self.assertEqual(rc, 3)
            self.assertIn("profile_step exit 2", err)
            log = os.path.join(out, "profile-ab", "tiny-ours.err")
            self.assertIn(log, err)
            with open(log) as f:
                self.assertIn("Kineto", f.read())
            with open(os.path.join(out, "profile-ab", "tiny.yaml")) as f:
                self.assertIn("name: bench-engine-tiny", f.read())


if __name__ == "__main__":
    unittest.main()
