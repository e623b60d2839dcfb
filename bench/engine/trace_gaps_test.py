#!/usr/bin/env python3
"""Tests of trace_gaps.py on a small Kineto-shaped trace whose figures are worked out by hand:
the busy time with overlapping streams counted once, each gap given to the activities on
either side, the histogram's buckets, the memsets' launchers through the correlation ids and
the CPU ops around the call, and the exit code for a file that is not a trace."""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_gaps  # noqa: E402


def x(cat, name, ts, dur, **args):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": 1}
    if args:
        e["args"] = args
    return e


# GPU, microseconds: gemm [0, 10); memset [13, 14) (gap 3 after gemm); gemm2 [16, 30) (gap 2
# after the memset) with a side-stream kernel [20, 35) overlapping it; ln [60, 61) (gap 25
# after the side kernel, the last to end); memset2 [61.5, 62) (gap 0.5).
# Busy: 10 + 1 + (16..35 = 19) + 1 + 0.5 = 31.5 of a 62 us span.
EVENTS = [
    x("kernel", "gemm", 0, 10),
    x("gpu_memset", "Memset (Device)", 13, 1, correlation=7),
    x("kernel", "gemm2", 16, 14),
    x("kernel", "side", 20, 15),
    x("kernel", "ln", 60, 1),
    x("gpu_memset", "Memset (Device)", 61.5, 0.5, correlation=9),
    # CPU side: aten::mm [100, 120) > cublas [101, 110) holds cudaMemsetAsync [102, 103) (corr 7);
    # the second memset's call (corr 9) has no op around it.
    x("cpu_op", "aten::mm", 100, 20),
    x("cpu_op", "cublasLtMatmul", 101, 9),
    x("cuda_runtime", "cudaMemsetAsync", 102, 1, correlation=7),
    x("cuda_runtime", "cudaGraphLaunch", 200, 5, correlation=9),
    {"ph": "i", "cat": "kernel", "name": "instant", "ts": 5},  # not a complete event: dropped
]
COMPLETE = trace_gaps.complete_events(EVENTS)


class GapsTest(unittest.TestCase):
    def test_span_busy_idle_and_histogram(self):
        g = trace_gaps.idle_gaps(COMPLETE, 60)
        self.assertEqual(g["activities"], 6)
        self.assertAlmostEqual(g["span_us"], 62.0)
        self.assertAlmostEqual(g["busy_us"], 31.5)
        self.assertAlmostEqual(g["idle_us"], 30.5)
        self.assertEqual(g["gaps_by_us"], {"0": 1, "2": 1, "3": 1, "20": 1})

    def test_each_gap_goes_to_its_neighbours(self):
        pairs = {(p["before"], p["after"]): (p["us"], p["count"])
                 for p in trace_gaps.idle_gaps(COMPLETE, 60)["pairs"]}
        self.assertEqual(pairs, {("gemm", "Memset (Device)"): (3, 1),
                                 ("Memset (Device)", "gemm2"): (2, 1),
                                 ("side", "ln"): (25, 1),
                                 ("ln", "Memset (Device)"): (0.5, 1)})
        first = trace_gaps.idle_gaps(COMPLETE, 60)["pairs"][0]
        self.assertEqual((first["before"], first["after"]), ("side", "ln"))  # largest first

    def test_names_are_cut_to_the_width(self):
        pairs = trace_gaps.idle_gaps(COMPLETE, 4)["pairs"]
        self.assertIn(("side", "ln"), [(p["before"], p["after"]) for p in pairs])
        self.assertIn(("Mems", "gemm"), [(p["before"], p["after"]) for p in pairs])

    def test_no_gpu_activity(self):
        g = trace_gaps.idle_gaps([x("cpu_op", "aten::mm", 0, 1)], 60)
        self.assertEqual((g["activities"], g["span_us"], g["idle_us"], g["pairs"]),
                         (0, 0.0, 0.0, []))


class MemsetTest(unittest.TestCase):
    def test_launchers_through_the_correlation_and_the_ops_around(self):
        rows = trace_gaps.memset_launchers(COMPLETE)
        self.assertEqual(rows, [
            {"launcher": "cudaGraphLaunch", "count": 1, "us": 0.5},
            {"launcher": "cudaMemsetAsync <- aten::mm > cublasLtMatmul", "count": 1, "us": 1},
        ])

    def test_a_memset_without_its_launch_event(self):
        rows = trace_gaps.memset_launchers([x("gpu_memset", "Memset", 0, 2, correlation=3)])
        self.assertEqual(rows, [{"launcher": "(no launch event)", "count": 1, "us": 2}])


class MainTest(unittest.TestCase):
    def run_main(self, args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = trace_gaps.main(args)
        return rc, out.getvalue(), err.getvalue()

    def test_json_and_text(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": EVENTS}, f)
            rc, out, _ = self.run_main([path, "-o", "json", "--top", "2"])
            self.assertEqual(rc, 0)
            report = json.loads(out)
            self.assertAlmostEqual(report["gaps"]["idle_us"], 30.5)
            self.assertEqual(len(report["gaps"]["pairs"]), 2)
            self.assertEqual(report["memsets"][0]["launcher"], "cudaGraphLaunch")
            rc, out, _ = self.run_main([path])
            self.assertEqual(rc, 0)
            self.assertIn("span 62.0 us, busy 31.5 us, idle 30.5 us", out)
            self.assertIn("   25.0     1  side -> ln", out)

    def test_a_file_that_is_not_a_trace(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                f.write('{"traceEvents": 3}')
            rc, out, err = self.run_main([path])
            self.assertEqual((rc, out), (2, ""))
            self.assertIn("no traceEvents list", err)
            rc, _, err = self.run_main([os.path.join(d, "missing.json")])
            self.assertEqual(rc, 2)
            self.assertIn("missing.json", err)


if __name__ == "__main__":
    unittest.main()
