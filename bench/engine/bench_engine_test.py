#!/usr/bin/env python3
"""Tests of bench_engine.py's table (build_table): the peak memory with the progress lines' two
decimals (the issue's bar is the first measurement's 18.4 GiB, and 18.45 printed with one decimal
read as either side of it), and the peers' DESIGN.md section 9 anchors named only on the GPU they
were measured on (on another GPU one note says there is none, instead of a ratio that reads as a
slow peer). And the --dropout setting: in both sides' configuration (the spec, the peer's
command line, results.json), checked in what each side says it ran, and the anchors (measured at
dropout 0) left out at any other dropout. And --variant-bin: the variant row run by another
build's trainer. And the GPU's clock and power lines (gpu_power.py) for the runs that have them."""

import contextlib
import io
import json
import os
import shutil
import signal
import sys
import tempfile
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

    def test_power_lines_follow_the_runs(self):
        r = results("NVIDIA H100 80GB HBM3")
        self.assertNotIn("power cap", bench_engine.build_table(r))  # nothing sampled
        r["rows"][0]["ours"]["power"] = {"busy_samples": 14, "sm_clock_mhz": 1665.0,
                                         "power_w": 690.2, "power_capped": 0.93}
        r["rows"][0]["compile"]["power"] = {"busy_samples": 30, "sm_clock_mhz": 1755.0,
                                            "power_w": 640.0, "power_capped": 0.5}
        lines = bench_engine.build_table(r).splitlines()
        at = next(i for i, line in enumerate(lines) if "power cap" in line)
        self.assertEqual(lines[at + 1], "  350m  ours     1,665 MHz  690 W  cap  93%")
        self.assertEqual(lines[at + 2], "  350m  compile  1,755 MHz  640 W  cap  50%")
        self.assertFalse(lines[at + 3].startswith("  1.3b"), lines[at + 3])


def spec_values(text):
    """The spec's `  key: value` lines as a dict of strings (the model and training keys)."""
    return dict(line.strip().split(": ", 1) for line in text.splitlines()
                if line.startswith("  ") and ": " in line)


def args_with(*extra):
    """bench_engine's parsed command line with the required flags and `extra`."""
    args, _, _ = bench_engine.parse_args(["--train-bin", "mt-train", "--out", "/tmp/o"] +
                                         list(extra))
    return args


def engine_stderr(hidden, attention):
    """Our trainer's configuration line (GptConfig::DebugString, %g for the dropouts)."""
    return ("trainer: GPT layers=2 hidden=128 heads=4 head_dim=32 ffn=512 seq=128 "
            "positions=128 vocab=50257 (padded 50304) dropout hidden=%g attention=%g "
            "init_std=0.02 ln_eps=1e-05 tied attention=auto recompute=none\n" % (hidden, attention))


def run_main(argv):
    """bench_engine.main(argv), its output swallowed and the signal handlers it installs put
    back; returns its exit code."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            return bench_engine.main(argv)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


def dropout_checks(run):
    return [c for c in run.get("checks", []) if "dropout" in c]


class DropoutTest(unittest.TestCase):
    def test_spec_carries_the_dropout(self):
        for validation in (False, True):
            text = bench_engine.spec_yaml("124m", 30, for_validation=validation, dropout=0.1)
            values = spec_values(text)
            self.assertEqual(values["hidden_dropout"], "0.1", text)
            self.assertEqual(values["attention_dropout"], "0.1", text)
            self.assertNotIn("no dropout", text)
            self.assertIn("# dropout 0.1 (hidden and attention; the peer's --dropout 0.1),", text)

    def test_spec_default_has_no_dropout(self):
        text = bench_engine.spec_yaml("124m", 30)
        values = spec_values(text)
        self.assertEqual((values["hidden_dropout"], values["attention_dropout"]), ("0.0", "0.0"))
        self.assertIn("# no dropout,", text)

    def test_peer_command_carries_the_dropout(self):
        for flags, want in (([], "0.0"), (["--dropout", "0.1"], "0.1")):
            cmd = bench_engine.peer_cmd(args_with(*flags), "124m", "compile")
            self.assertEqual(cmd[1], os.path.join(bench_engine.HERE, "pytorch_gpt.py"))
            self.assertEqual(cmd.count("--dropout"), 1, cmd)
            self.assertEqual(cmd[cmd.index("--dropout") + 1], want, cmd)

    def test_dropout_in_range_accepted(self):
        for text, want in (("0", 0.0), ("0.1", 0.1), ("0.999", 0.999)):
            self.assertEqual(args_with("--dropout", text).dropout, want)

    def test_dropout_out_of_range_rejected(self):
        for text in ("1", "1.5", "-0.1", "nan"):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
                args_with("--dropout", text)
            self.assertEqual(cm.exception.code, 2)
            self.assertIn("--dropout %r: must be in [0, 1)" % float(text), err.getvalue())

    def test_engine_dropout_matches(self):
        for want in (0.0, 0.1, 0.123456789):  # the engine prints %g: 0.123457
            run = bench_engine.parse_ours("", engine_stderr(want, want), "tiny", 1, 2, 989,
                                          dropout=want)
            self.assertEqual(dropout_checks(run), [], want)

    def test_engine_dropout_mismatch_flagged(self):
        cases = (((0.1, 0.1), 0.0, "engine dropout 0.1/0.1, want 0"),
                 ((0.0, 0.0), 0.1, "engine dropout 0/0, want 0.1"),
                 ((0.1, 0.0), 0.1, "engine dropout 0.1/0, want 0.1"))
        for (hidden, attention), want, check in cases:
            run = bench_engine.parse_ours("", engine_stderr(hidden, attention), "tiny", 1, 2,
                                          989, dropout=want)
            self.assertEqual(dropout_checks(run), [check])

    def test_peer_dropout_checked(self):
        line = json.dumps({"impl": "pytorch", "dropout": 0.1, "tokens_per_second": 1.0})
        self.assertEqual(dropout_checks(bench_engine.parse_peer(line, dropout=0.1)), [])
        self.assertEqual(dropout_checks(bench_engine.parse_peer(line, dropout=0.0)),
                         ["peer dropout 0.1, want 0"])

    def test_header_names_the_dropout(self):
        for dropout, words in ((0.0, "bf16, dropout 0, one"), (0.1, "bf16, dropout 0.1, one")):
            r = results("NVIDIA H200")
            r["config"]["dropout"] = dropout
            self.assertEqual(bench_engine.build_table(r).splitlines()[1].count(words), 1)

    def test_no_anchors_with_dropout(self):
        r = results("NVIDIA H200")
        r["config"]["dropout"] = 0.1
        table = bench_engine.build_table(r)
        self.assertNotIn("section 9 anchor:", table)
        self.assertEqual(table.count("no peer anchor"), 1, table)
        self.assertIn("no peer anchor: DESIGN.md section 9's are at dropout 0, this run's is "
                      "0.1", table)

    @unittest.skipUnless(shutil.which("true") and shutil.which("false"), "needs true/false")
    def test_main_passes_the_dropout_on(self):
        """A whole run with stand-ins (ours fails, the peer prints nothing): the spec, the
        peer's logged command and results.json carry the dropout."""
        with tempfile.TemporaryDirectory() as out:
            rc = run_main([
                "--train-bin", shutil.which("false"), "--python", shutil.which("true"),
                "--out", out, "--sizes", "tiny", "--modes", "ours eager",
                "--device", "cpu", "--warmup", "1", "--steps", "1", "--dropout", "0.1"])
            self.assertEqual(rc, 3)  # ours (false) failed
            with open(os.path.join(out, "specs", "tiny.yaml")) as f:
                values = spec_values(f.read())
            self.assertEqual((values["hidden_dropout"], values["attention_dropout"]),
                             ("0.1", "0.1"))
            with open(os.path.join(out, "logs", "tiny-eager.stderr")) as f:
                cmd = f.readline().split()
            self.assertEqual(cmd[cmd.index("--dropout") + 1], "0.1")
            with open(os.path.join(out, "results.json")) as f:
                self.assertEqual(json.load(f)["config"]["dropout"], 0.1)


@unittest.skipUnless(shutil.which("true") and shutil.which("false"), "needs true/false")
class VariantBinTest(unittest.TestCase):
    """--variant-bin: the variant row runs another build's trainer (an A/B of two commits)."""

    def test_adds_the_variant_after_ours(self):
        _, _, modes = bench_engine.parse_args(
            ["--train-bin", "mt-train", "--out", "/tmp/o", "--modes", "compile ours",
             "--variant-bin", shutil.which("true")])
        self.assertEqual(modes, ["compile", "ours", bench_engine.VARIANT])

    def test_rejects_a_missing_binary(self):
        err = io.StringIO()
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
            bench_engine.parse_args(["--train-bin", "mt-train", "--out", "/tmp/o",
                                     "--variant-bin", "/nonexistent/mt-train"])
        self.assertIn("--variant-bin '/nonexistent/mt-train': not an executable file",
                      err.getvalue())

    def test_needs_ours(self):
        err = io.StringIO()
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
            bench_engine.parse_args(["--train-bin", "mt-train", "--out", "/tmp/o", "--modes",
                                     "compile", "--variant-bin", shutil.which("true")])
        self.assertIn("add ours to --modes", err.getvalue())

    def test_table_names_the_binary_and_its_switches(self):
        r = results("NVIDIA H200")
        r["config"].update(variant_bin="/tmp/base/bin/mt-train", variant_args=["--no-gemm-tuning"])
        r["rows"][0]["variant"] = {"status": "ok", "tokens_per_second": 205000.0, "mfu": 0.5,
                                   "peak_memory_bytes": int(18.45 * GIB)}
        r["rows"][0]["ratio_variant_ours"] = 205000.0 / 206424.4
        lines = bench_engine.variant_lines(r)
        self.assertEqual(lines[0], "/tmp/base/bin/mt-train with --no-gemm-tuning, run right "
                                   "after ours at each size:")
        self.assertIn("0.993x", lines[2])

    def test_main_runs_the_other_binary_for_the_variant(self):
        """A whole run with stand-ins: ours is `false`, the variant `true`; each log's first
        line is the command it ran, and results.json names the variant's binary."""
        other = shutil.which("true")
        with tempfile.TemporaryDirectory() as out:
            rc = run_main([
                "--train-bin", shutil.which("false"), "--variant-bin", other,
                "--variant-arg", "--no-gemm-tuning", "--out", out, "--sizes", "tiny",
                "--modes", "ours", "--device", "cpu", "--warmup", "1", "--steps", "1"])
            self.assertEqual(rc, 3)  # ours (false) failed
            with open(os.path.join(out, "logs", "tiny-ours.stderr")) as f:
                self.assertEqual(f.readline().split()[1], shutil.which("false"))
            with open(os.path.join(out, "logs", "tiny-variant.stderr")) as f:
                cmd = f.readline().split()
            self.assertEqual(cmd[1], other)
            self.assertEqual(cmd[-1], "--no-gemm-tuning")
            with open(os.path.join(out, "results.json")) as f:
                self.assertEqual(json.load(f)["config"]["variant_bin"], other)


if __name__ == "__main__":
    unittest.main()
