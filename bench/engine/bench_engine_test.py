#!/usr/bin/env python3
"""Tests of bench_engine.py's table (build_table): the peak memory with the progress lines' two
decimals (the issue's bar is the first measurement's 18.4 GiB, and 18.45 printed with one decimal
read as either side of it), and the peers' DESIGN.md section 9 anchors named only on the GPU they
were measured on (on another GPU one note says there is none, instead of a ratio that reads as a
slow peer)."""

import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_engine  # noqa: E402

GIB = float(1 << 30)


def results(gpu_name):
    """Two sizes' rows as bench_engine writes them, ours and torch.compile each."""
    def run(tps, mfu, peak_gib):
        return {"status": "ok", "tokens_per_second": tps, "mfu": mfu,
                "peak_memory_bytes": int(peak_gib * GIB)}
    rows = [
        {"size": "350m", "micro_batch": 16, "seq": 1024,
         "ours": run(206424.4, 0.507, 18.45), "compile": run(177171.6, 0.436, 19.95),
         "ratio_ours_compile": 206424.4 / 177171.6},
        {"size": "1.3b", "micro_batch": 8, "seq": 1024,
         "ours": run(64567.2, 0.554, 30.26), "compile": run(55612.9, 0.477, 31.76),
         "ratio_ours_compile": 64567.2 / 55612.9},
    ]
    return {"config": {"train_cmd_name": "mt-train", "warmup": 10, "steps": 30,
                       "peak_tflops": 989, "variant_args": []},
            "gpu": {"name": gpu_name}, "torch": "2.11.0+cu130", "rows": rows,
            "results_path": "/tmp/r.json"}


class TableTest(unittest.TestCase):
    def test_peak_memory_has_two_decimals(self):
        table = bench_engine.build_table(results("NVIDIA H200"))
        row = next(line for line in table.splitlines() if line.startswith("350m"))
        self.assertTrue(row.rstrip().endswith("18.45      -   19.95"), row)
        self.assertIn("1.17x", row)

    def test_anchors_on_their_gpu(self):
        table = bench_engine.build_table(results("NVIDIA H200"))
        self.assertIn("350m: peer vs DESIGN.md section 9 anchor: compile 0.92x", table)
        self.assertIn("1.3b: peer vs DESIGN.md section 9 anchor: compile 0.90x", table)
        self.assertNotIn("no peer anchor", table)

    def test_no_anchor_ratio_on_another_gpu(self):
        table = bench_engine.build_table(results("NVIDIA H100 80GB HBM3"))
        self.assertNotIn("section 9 anchor:", table)
        self.assertEqual(table.count("no peer anchor"), 1, table)
        self.assertIn("no peer anchor: DESIGN.md section 9's are an H200's, this GPU is "
                      "NVIDIA H100 80GB HBM3", table)

    def test_variant_peak_has_two_decimals(self):
        r = results("NVIDIA H200")
        r["config"]["variant_args"] = ["--no-gemm-tuning"]
        r["rows"][0]["variant"] = {"status": "ok", "tokens_per_second": 205000.0, "mfu": 0.5,
                                   "peak_memory_bytes": int(18.44 * GIB)}
        r["rows"][0]["ratio_variant_ours"] = 205000.0 / 206424.4
        lines = bench_engine.variant_lines(r)
        self.assertEqual(len(lines), 3, lines)
        self.assertTrue(lines[2].rstrip().endswith("18.44"), lines[2])


if __name__ == "__main__":
    unittest.main()
