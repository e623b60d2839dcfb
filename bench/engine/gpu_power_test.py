#!/usr/bin/env python3
"""Tests of gpu_power.py: the summary of nvidia-smi's samples (busy samples only, medians, the
power cap's share), which GPU a device string samples, and a Sampler run end to end against a
stand-in `nvidia-smi` on PATH (this machine has no GPU), checked for the arguments it was given
and the samples it wrote."""

import os
import stat
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_power  # noqa: E402

# An H100's samples during a 350M run (bench/RESULTS.md, 2026-12-07): idle start-up, then the
# steps at the 700 W cap, one [N/A] line and a line cut by the sampler's end.
SAMPLES = """0, 1980, 199.25, 0x0000000000000000
0, 1980, 126.97, 0x0000000000000000
100, 1635, 700.77, 0x0000000000000004
97, 1680, 486.86, 0x0000000000000004
100, 1665, 690.76, 0x0000000000000004
100, 1980, 560.00, 0x0000000000000000
[N/A], 1980, 120.00, 0x0000000000000000
12, 1965, 545.21, 0x0000000000000004
100, 16"""


class SummarizeTest(unittest.TestCase):
    def test_busy_samples_only(self):
        s = gpu_power.summarize(SAMPLES)
        self.assertEqual(s["busy_samples"], 4)
        self.assertEqual(s["sm_clock_mhz"], (1665 + 1680) / 2.0)
        self.assertAlmostEqual(s["power_w"], (560.00 + 690.76) / 2.0)
        self.assertEqual(s["power_capped"], 0.75)

    def test_odd_count_takes_the_middle(self):
        s = gpu_power.summarize("95, 1500, 600, 0x4\n95, 1700, 650, 0x0\n95, 1600, 620, 0x4\n")
        self.assertEqual((s["sm_clock_mhz"], s["power_w"]), (1600.0, 620.0))
        self.assertAlmostEqual(s["power_capped"], 2 / 3.0)

    def test_nothing_busy_is_empty(self):
        self.assertEqual(gpu_power.summarize("0, 1980, 120, 0x0\n"), {})
        self.assertEqual(gpu_power.summarize(""), {})
        self.assertEqual(gpu_power.describe({}), "-")

    def test_describe(self):
        self.assertEqual(gpu_power.describe(gpu_power.summarize(SAMPLES)),
                         "1,672 MHz  625 W  cap  75%")


class IndexTest(unittest.TestCase):
    def test_devices(self):
        self.assertEqual(gpu_power.smi_index("cuda"), "0")
        self.assertEqual(gpu_power.smi_index("cuda:3"), "3")
        self.assertIsNone(gpu_power.smi_index("cpu"))

    def test_visible_devices_map_the_ordinal(self):
        self.assertEqual(gpu_power.smi_index("cuda", "5,6"), "5")
        self.assertEqual(gpu_power.smi_index("cuda:1", "5, 6"), "6")
        self.assertIsNone(gpu_power.smi_index("cuda:2", "5,6"))
        self.assertIsNone(gpu_power.smi_index("cuda", "GPU-8a3f"))


class SamplerTest(unittest.TestCase):
    def stand_in(self, directory):
        """An `nvidia-smi` that records its arguments and prints two busy samples, then waits
        to be stopped (at most 30 s)."""
        path = os.path.join(directory, "nvidia-smi")
        with open(path, "w") as f:
            f.write("#!/bin/sh\necho \"$@\" > '%s/args'\n"
                    "echo '99, 1700, 690.5, 0x0000000000000004'\n"
                    "echo '99, 1720, 680.5, 0x0000000000000000'\n"
                    "exec sleep 30\n" % directory)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def test_samples_the_run_and_summarizes(self):
        with tempfile.TemporaryDirectory() as d:
            self.stand_in(d)
            env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""),
                       CUDA_VISIBLE_DEVICES="2")
            old = os.environ["PATH"]
            os.environ["PATH"] = env["PATH"]
            try:
                sampler = gpu_power.Sampler("cuda", os.path.join(d, "run.power.csv"), env)
                self.assertTrue(sampler.start())
                deadline = time.time() + 20
                while time.time() < deadline:
                    with open(os.path.join(d, "run.power.csv")) as f:
                        if f.read().count("\n") >= 2:
                            break
                    time.sleep(0.05)
                started = time.time()
                summary = sampler.stop()
                self.assertLess(time.time() - started, 6)  # stopped, not waited for
            finally:
                os.environ["PATH"] = old
            with open(os.path.join(d, "args")) as f:
                args = f.read().split()
            self.assertEqual(args[:2], ["-i", "2"])
            self.assertIn("--query-gpu=" + gpu_power.QUERY, args)
            self.assertEqual(args[-2:], ["-lms", str(gpu_power.SAMPLE_MS)])
            self.assertEqual(summary, {"busy_samples": 2, "sm_clock_mhz": 1710.0,
                                       "power_w": 685.5, "power_capped": 0.5})
            self.assertEqual(sampler.stop(), {})  # a second stop has nothing left

    def test_no_op_without_a_gpu_or_nvidia_smi(self):
        with tempfile.TemporaryDirectory() as d:
            cpu = gpu_power.Sampler("cpu", os.path.join(d, "a.csv"), {})
            self.assertFalse(cpu.start())
            self.assertEqual(cpu.stop(), {})
            old = os.environ["PATH"]
            os.environ["PATH"] = d  # no nvidia-smi here
            try:
                missing = gpu_power.Sampler("cuda", os.path.join(d, "b.csv"), {})
                self.assertFalse(missing.start())
                self.assertEqual(missing.stop(), {})
            finally:
                os.environ["PATH"] = old


if __name__ == "__main__":
    unittest.main()
