#!/usr/bin/env python3
"""Reads mt's TensorBoard event files with TensorBoard's own reader and checks every value.

tensorboard_sample (worker/metrics) writes a known run with the trainer's logger and prints
what it wrote; this script loads the directory with tensorboard's EventAccumulator (which
checks the TFRecord CRCs when TensorFlow is absent, through its tensorflow stub) and its raw
EventFileLoader, and compares tag by tag, step by step (float32 tolerance: rel 1e-6).

With --trainer (mt-worker), it also trains a tiny GPT for 20 steps on --device (cuda on the
GPU machine) with --tensorboard-dir, and checks that TensorBoard reads one `lm loss` point per
step, all finite, the last equal to the loss the trainer printed (float32 tolerance), and the
other Megatron tags.

Exit codes: 0 all checks passed; 1 a check failed; 77 the tensorboard package is missing
(ctest counts the test as not run, SKIP_RETURN_CODE 77).

  tensorboard_check.py --writer BUILD/bin/tensorboard_sample [--trainer BUILD/bin/mt-worker]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--writer", required=True, help="the tensorboard_sample binary")
    parser.add_argument("--trainer", help="mt-worker, to check a real training run too")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    try:
        from tensorboard.backend.event_processing import event_accumulator
        from tensorboard.backend.event_processing import event_file_loader
    except ImportError as e:
        print(f"SKIP: the tensorboard Python package is not installed ({e}); "
              "pip install tensorboard to run this check")
        return 77
    import tensorboard
    with tempfile.TemporaryDirectory(prefix="mt_tb_") as logdir:
        run = subprocess.run([args.writer, logdir], check=True, capture_output=True, text=True)
        wrote = json.loads(run.stdout)
        failures = []

        # Raw events: the version record first, then one scalar per event.
        events = list(event_file_loader.EventFileLoader(wrote["file"]).Load())
        if not events or events[0].file_version != "brain.Event:2":
            failures.append(f"first event is not file_version brain.Event:2: {events[:1]}")

        acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
        acc.Reload()
        read_tags = set(acc.Tags().get("scalars", []))
        for tag, points in wrote["scalars"].items():
            if tag not in read_tags:
                failures.append(f"tag {tag!r} not read back (read: {sorted(read_tags)})")
                continue
            got = [(e.step, e.value) for e in acc.Scalars(tag)]
            if len(got) != len(points):
                failures.append(f"{tag}: {len(got)} points read, {len(points)} written")
                continue
            for (step, value), (gstep, gvalue) in zip(points, got):
                if step != gstep or not math.isclose(value, gvalue, rel_tol=1e-6, abs_tol=1e-12):
                    failures.append(f"{tag}: wrote ({step}, {value}), read ({gstep}, {gvalue})")
        for tag in ("lm loss", "learning-rate", "grad-norm", "loss-scale", "throughput",
                    "lm loss validation"):
            if tag not in read_tags:
                failures.append(f"Megatron tag {tag!r} missing")
        print(f"tensorboard {tensorboard.__version__}: {len(events)} events, "
              f"{len(read_tags)} scalar tags read back from {wrote['file']}")
        if args.trainer:
            failures += check_training_run(args.trainer, args.device, event_accumulator)
        for f in failures:
            print("FAIL:", f)
        if failures:
            return 1
        print("OK: every scalar read back with its step and value")
        return 0


TINY_SPEC = """name: tensorboard-check
model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 64, vocab_size: 512}
training: {micro_batch_size: 4, global_batch_size: 8, train_iters: 20, lr: 1.0e-3,
           lr_warmup_iters: 2, precision: bf16}
evaluation: {eval_interval: 10, eval_iters: 1}
logging: {log_interval: 5}
"""


def check_training_run(trainer, device, event_accumulator):
    failures = []
    with tempfile.TemporaryDirectory(prefix="mt_tb_run_") as work:
        spec = f"{work}/tiny.yaml"
        with open(spec, "w") as f:
            f.write(TINY_SPEC if device.startswith("cuda") else TINY_SPEC.replace("bf16", "fp32"))
        logdir = f"{work}/tb"
        env = dict(os.environ)
        if "MT_TRAINER_LD_LIBRARY_PATH" in env:
            env["LD_LIBRARY_PATH"] = env["MT_TRAINER_LD_LIBRARY_PATH"]
        run = subprocess.run([trainer, "train", "--spec", spec, "--synthetic-data", "--device",
                              device, "--tensorboard-dir", logdir],
                             capture_output=True, text=True, env=env, timeout=240)
        if run.returncode != 0:
            return [f"mt-worker train failed ({run.returncode}): {run.stderr[-2000:]}"]
        summary = dict(kv.split("=", 1) for kv in run.stdout.split() if "=" in kv)
        acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
        acc.Reload()
        tags = set(acc.Tags().get("scalars", []))
        for tag in ("lm loss", "learning-rate", "grad-norm", "loss-scale", "iteration-time",
                    "tokens-per-second", "throughput", "lm loss validation",
                    "lm loss validation ppl"):
            if tag not in tags:
                failures.append(f"training run: tag {tag!r} missing (read {sorted(tags)})")
        if "lm loss" in tags:
            loss = acc.Scalars("lm loss")
            if [e.step for e in loss] != list(range(1, 21)):
                failures.append(f"training run: lm loss steps {[e.step for e in loss]}")
            if not all(math.isfinite(e.value) and e.value > 0 for e in loss):
                failures.append(f"training run: lm loss values {[e.value for e in loss]}")
            final = float(summary.get("loss", "nan"))
            if loss and not math.isclose(loss[-1].value, final, rel_tol=1e-6):
                failures.append(f"training run: last lm loss {loss[-1].value}, trainer said {final}")
            print(f"training run on {device}: lm loss {loss[0].value:.4f} -> {loss[-1].value:.4f} "
                  f"over {len(loss)} steps, {len(tags)} tags")
    return failures


if __name__ == "__main__":
    sys.exit(main())
