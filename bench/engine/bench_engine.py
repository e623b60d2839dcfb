#!/usr/bin/env python3
"""Driver of the engine benchmark (run it through run_bench.sh). Stdlib only.

For each size, in one run on one GPU: our trainer (`mt-train --spec <generated yaml> --device
cuda --synthetic-data --train-iters W+T --peak-tflops 989`), then the PyTorch peer
(pytorch_gpt.py) eager and compiled, each in its own process with a timeout cut from a
deadline. --dropout P (default 0) sets the hidden and attention dropout of both sides: the
spec's hidden_dropout and attention_dropout, and the peer's --dropout. With --variant-arg, ours
runs a second time with those switches right after ours at each size (an A/B of our own switch
in the same machine state), printed with its ratio to ours; with --variant-bin, that second run
is another build's trainer (an A/B of two commits: the one before a change, built beside it).
Parses our progress lines and key=value summary and the peer's JSON line, prints a table of
tokens/s, ratios, MFU and peak memory, and, where nvidia-smi runs, the GPU's SM clock and power
while each run kept it busy (gpu_power.py: a step can hold the board at its power limit, which
lowers the clock), and writes results.json, table.txt, the generated specs and every log under
--out.

Our tokens/s is measured over the same window as the peer's: the steps after the W warm-up
steps, from the per-step progress lines (log_interval 1); each step of ours ends in a host
sync (loss.item()), the peer's timed loop is bracketed by torch.cuda.synchronize().

Exit codes: 0 done (peer failures and runs skipped for time show in the table), 3 a run of
ours failed or timed out, 2 bad usage.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import gpu_power  # noqa: E402
import sizes  # noqa: E402

GIB = float(1 << 30)
MODES = ("ours", "eager", "compile")
# "variant": ours again with --variant-arg switches, or another build's trainer (--variant-bin),
# run right after ours at each size (an A/B in the same machine state); added to the modes when
# either is given.
VARIANT = "variant"
# Seconds a run may take at most, and the least left before we bother to start it.
RUN_CAP_S = {"ours": 300, VARIANT: 300, "eager": 300, "compile": 480}
RUN_MIN_S = {"ours": 25, VARIANT: 25, "eager": 25, "compile": 75}

NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"


def parse_step_line(line):
    """A trainer progress line (trainer.cc, LogStep) as a dict, or None. Each field is found
    on its own, so fields added to the line later do not break the parse:
    "step 3/30 | loss 10.83 | ... | 512345 tokens/s | 64.0 ms/step | MFU 44.1% |
     mem 10.10 GiB (peak 12.00 GiB, reserved 14.00 GiB) | ETA 1s" """
    m = re.search(r"\bstep (\d+)/(\d+) \|", line)
    if not m:
        return None
    d = {"step": int(m.group(1)), "of": int(m.group(2))}
    for key, pat in (("loss", r"\| loss " + NUM), ("tps", NUM + r" tokens/s"),
                     ("ms", NUM + r" ms/step"), ("mfu_pct", r"MFU " + NUM + "%"),
                     ("mem_gib", r"mem " + NUM + r" GiB"), ("peak_gib", r"peak " + NUM + r" GiB"),
                     ("reserved_gib", r"reserved " + NUM + r" GiB")):
        f = re.search(pat, line)
        if f:
            d[key] = float(f.group(1))
    return d if ("tps" in d or "ms" in d) else None


def log(msg):
    print("bench_engine: " + msg, file=sys.stderr, flush=True)


def attach_switches(argv, flag="--variant-arg"):
    """argv with each `FLAG VALUE` pair written `FLAG=VALUE`: the values of --variant-arg are
    our trainer's switches, which start with "-", and argparse takes those for options of its
    own (`--variant-arg --no-gemm-tuning`: "expected one argument")."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag and i + 1 < len(argv):
            out.append(flag + "=" + argv[i + 1])
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


# ---------------------------------------------------------------------------------------------
# The job spec.

def log_interval(warmup, steps):
    """The progress line's interval: the largest of 1..10 that divides both the warm-up and the
    timed steps, so that a line ends the warm-up and each interval lies inside the window. A
    line waits for the GPU (it reads the loss); fewer lines leave the queue full between steps,
    as the peer's loop does."""
    return max(d for d in range(1, 11) if warmup % d == 0 and steps % d == 0)


def dropout_words(dropout):
    """The spec's comment on dropout: what both sides run."""
    if dropout == 0:
        return "no dropout"
    return "dropout %r (hidden and attention; the peer's --dropout %r)" % (dropout, dropout)


def spec_yaml(name, iters, for_validation=False, interval=1, dropout=0.0):
    layers, hidden, heads, seq, mb = sizes.size(name)
    lines = [
        "# bench/engine (generated by bench_engine.py): %s. pytorch_gpt.py --size %s runs the"
        % (name, name),
        "# same model: tied embeddings, learned positions, pre-LN, GELU tanh, vocab padded to 128,",
        "# %s," % dropout_words(dropout),
        "# one micro-batch per step, constant lr, bf16 with fp32 master weights.",
        "name: bench-engine-%s" % name.replace(".", "p"),
        "model:",
        "  num_layers: %d" % layers,
        "  hidden_size: %d" % hidden,
        "  num_attention_heads: %d" % heads,
        "  seq_length: %d" % seq,
        "  max_position_embeddings: %d" % seq,
        "  vocab_size: %d" % sizes.GPT2_VOCAB,
        "  make_vocab_size_divisible_by: %d" % sizes.VOCAB_DIVISIBLE_BY,
        # repr: the shortest text that reads back as the same double (0.1, not 0.10000000000000001).
        "  hidden_dropout: %r" % float(dropout),
        "  attention_dropout: %r" % float(dropout),
        "  init_method_std: 0.02",
        "  layernorm_epsilon: 1.0e-05",
        "  untie_embeddings_and_output_weights: false",
        "parallel: {tp: 1, pp: 1, dp: 1}",
        "training:",
        "  micro_batch_size: %d" % mb,
        "  global_batch_size: %d" % mb,
        "  train_iters: %d" % iters,
        "  lr: 1.0e-04",
        "  lr_decay_style: constant",
        "  lr_warmup_iters: 0",
        "  weight_decay: 0.01",
        "  adam_beta1: 0.9",
        "  adam_beta2: 0.999",
        "  adam_eps: 1.0e-08",
        "  clip_grad: 1.0",
        "  precision: bf16",
        "  recompute_granularity: %s" % sizes.recompute(name),
        "  seed: 1234",
        "evaluation: {eval_interval: 0, eval_iters: 0}",
        "logging: {log_interval: %d}" % interval,
    ]
    if for_validation:
        # mt-train --synthetic-data ignores data:, mtctl validate wants one (never read).
        lines += [
            "data:",
            "  data_path: /nonexistent/bench_text_document",
            "  tokenizer: {vocab_file: /nonexistent/gpt2-vocab.json,"
            " merge_file: /nonexistent/gpt2-merges.txt}",
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Processes.

_CHILD = []  # the running child, for the signal handler


def kill_group(proc):
    """SIGTERM, then SIGKILL, to the child's process group (torch.compile's workers too)."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def on_signal(signum, frame):
    for proc in list(_CHILD):
        kill_group(proc)
    raise SystemExit(128 + signum)


def run_proc(cmd, env, timeout, stdout_path, stderr_path):
    """Runs cmd in its own process group; returns (rc, timed_out, wall seconds)."""
    start = time.time()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        err.write(("$ " + " ".join(cmd) + "\n").encode())
        err.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env,
                                    start_new_session=True)
        except OSError as e:
            err.write(("cannot start: %s\n" % e).encode())
            return 127, False, 0.0
        _CHILD.append(proc)
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
            return rc, False, time.time() - start
        except subprocess.TimeoutExpired:
            kill_group(proc)
            err.write(("\nbench_engine: killed after %.0f s (time budget)\n" % timeout).encode())
            return proc.returncode if proc.returncode is not None else -9, True, \
                time.time() - start
        finally:
            _CHILD.remove(proc)


def read(path):
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_error_line(text):
    """The most telling line of a failed run's stderr."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        low = ln.lower()
        if "out of memory" in low:
            return ln[:200]
    for ln in reversed(lines):
        if ln.startswith(("mt-train", "mt-worker", "E1", "F1")) or "Error" in ln:
            return ln[:200]
    return lines[-1][:200] if lines else ""


# ---------------------------------------------------------------------------------------------
# Parsing.

def parse_summary(stdout_text):
    """The last `key=value ...` line with tokens_per_second= of our stdout."""
    for line in reversed(stdout_text.splitlines()):
        if "tokens_per_second=" in line:
            out = {}
            for tok in line.split():
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    try:
                        out[k] = float(v)
                    except ValueError:
                        out[k] = v
            return out
    return {}


def same_dropout(got, want):
    """Whether a dropout read back from a log equals the one asked for. The engine prints it
    with %g (6 significant digits), so compare to that precision, not bit for bit."""
    try:
        return math.isclose(float(got), want, rel_tol=1e-5, abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def parse_ours(stdout_text, stderr_text, name, warmup, steps, peak_tflops, dropout=0.0):
    layers, hidden, heads, seq, mb = sizes.size(name)
    tokens_per_step = mb * seq
    r = {"impl": "mt", "size": name}
    summary = parse_summary(stdout_text)
    r["summary"] = summary
    # The trainer's configuration line: what the engine really built.
    checks = []
    m = re.search(r"trainer: GPT layers=(\d+) hidden=(\d+) heads=(\d+)", stderr_text)
    if m:
        got = tuple(int(x) for x in m.groups())
        r["engine_shape"] = got
        if got != (layers, hidden, heads):
            checks.append("engine built layers/hidden/heads %s, want %s" %
                          (got, (layers, hidden, heads)))
    m = re.search(r"\(padded (\d+)\)", stderr_text)
    if m and int(m.group(1)) != sizes.padded_vocab():
        checks.append("engine padded vocab %s, want %d" % (m.group(1), sizes.padded_vocab()))
    m = re.search(r"dropout hidden=(\S+) attention=(\S+)", stderr_text)
    if m and not (same_dropout(m.group(1), dropout) and same_dropout(m.group(2), dropout)):
        checks.append("engine dropout %s/%s, want %g" % (m.group(1), m.group(2), dropout))
    m = re.search(r"(\d+) parameters;", stderr_text)
    if m:
        r["params"] = int(m.group(1))
    m = re.search(r"parameters; (\w+) on (\S+);", stderr_text)
    if m:
        r["precision"], r["device"] = m.group(1), m.group(2)
        if m.group(1) != "bf16":
            checks.append("engine precision %s, want bf16" % m.group(1))
    m = re.search(r"micro-batch (\d+) x (\d+) = global batch (\d+)", stderr_text)
    if m and (int(m.group(1)), int(m.group(2))) != (mb, 1):
        checks.append("engine micro-batch %s x %s, want %d x 1" % (m.group(1), m.group(2), mb))
    m = re.search(r"attention=(auto|math|fused|cudnn|flash)", stderr_text)
    if m:
        r["attention"] = m.group(1)
    formula = sizes.count_parameters(layers, hidden, seq)
    r["params_formula"] = formula
    if "params" in r and r["params"] != formula:
        checks.append("engine has %d parameters, the formula %d" % (r["params"], formula))
    params = r.get("params", formula)

    step_lines = {}
    for line in stderr_text.splitlines():
        d = parse_step_line(line)
        if d:
            step_lines[d["step"]] = d
    r["steps_logged"] = len(step_lines)
    # Each line gives its interval's mean (LogStep): the steps since the line before. Only
    # intervals that start at or after the warm-up's end count.
    timed = []  # (line, steps it covers)
    prev = None
    for i in sorted(step_lines):
        if i > warmup and prev is not None and prev >= warmup:
            timed.append((step_lines[i], i - prev))
        prev = i
    if step_lines:
        first = step_lines[min(step_lines)]
        last = step_lines[max(step_lines)]
        if "loss" in first:
            r["loss_first"] = first["loss"]
        if "loss" in last:
            r["loss_last"] = last["loss"]
        if "mfu_pct" in last:
            r["engine_mfu_last_step"] = last["mfu_pct"] / 100
        peaks = [d["peak_gib"] for d in step_lines.values() if "peak_gib" in d]
        reserved = [d["reserved_gib"] for d in step_lines.values() if "reserved_gib" in d]
        mems = [d["mem_gib"] for d in step_lines.values() if "mem_gib" in d]
        if peaks:
            r["peak_memory_bytes"] = int(max(peaks) * GIB)
            r["memory_kind"] = "cuda peak allocated (progress line)"
            if reserved:
                r["peak_reserved_bytes"] = int(max(reserved) * GIB)
        elif mems:
            r["peak_memory_bytes"] = int(max(mems) * GIB)
            r["memory_kind"] = "host RSS (progress line)"
            if r.get("device", "").startswith("cuda"):
                checks.append("no CUDA memory figures in the progress lines (engine built "
                              "without MT_ENGINE_WITH_CUDA?): peak memory is host RSS")
    seconds = 0.0
    for d, count in timed:
        # tokens/s is printed with more significant digits than ms/step.
        if d.get("tps", 0) > 0:
            seconds += count * tokens_per_step / d["tps"]
        elif d.get("ms", 0) > 0:
            seconds += count * d["ms"] / 1e3
    counted = sum(count for _, count in timed)
    if timed and seconds > 0:
        r["timed_steps"] = counted
        r["seconds"] = seconds
        r["tokens_per_second"] = tokens_per_step * counted / seconds
        r["step_ms"] = seconds / counted * 1e3
        r["window"] = "steps %d..%d" % (warmup + 1, warmup + counted)
        if counted != steps:
            checks.append("%d timed steps logged, want %d" % (counted, steps))
    elif isinstance(summary.get("tokens_per_second"), float):
        # No progress lines (a format change?): the summary covers warm-up steps too.
        r["tokens_per_second"] = summary["tokens_per_second"]
        r["window"] = "whole run incl. warm-up (summary)"
        checks.append("no progress lines parsed; tokens/s from the summary, warm-up included")
    for key in ("peak_memory_bytes", "peak_allocated_bytes", "memory_peak_bytes"):
        if "peak_memory_bytes" not in r and isinstance(summary.get(key), float):
            r["peak_memory_bytes"] = int(summary[key])
            r["memory_kind"] = "summary " + key
    if "tokens_per_second" in r:
        r["mfu"] = sizes.mfu(r["tokens_per_second"], params, layers, hidden, seq, peak_tflops)
    else:
        r.setdefault("error", "no throughput in the output")
    if "loss_last" in r and not (r["loss_last"] == r["loss_last"]):  # NaN
        r["error"] = "loss is NaN"
    if checks:
        r["checks"] = checks
    return r


def parse_peer(stdout_text, dropout=0.0):
    """The peer's JSON line, with a check when it ran another dropout than asked for."""
    d = peer_json(stdout_text)
    if "dropout" in d and not same_dropout(d["dropout"], dropout):
        d.setdefault("checks", []).append("peer dropout %s, want %g" % (d["dropout"], dropout))
    return d


def peer_json(stdout_text):
    for line in reversed(stdout_text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("impl") == "pytorch":
                return d
    return {}


# ---------------------------------------------------------------------------------------------
# Report.

def kfmt(x):
    return "%.1fK" % (x / 1e3) if isinstance(x, (int, float)) else "-"


def cell(run, key, fmt):
    if not run:
        return "-"
    if run.get("status") != "ok":
        return run.get("status", "?")
    v = run.get(key)
    return fmt(v) if isinstance(v, (int, float)) else "-"


def ratio(a, b):
    try:
        if a.get("status") == "ok" and b.get("status") == "ok":
            return a["tokens_per_second"] / b["tokens_per_second"]
    except (AttributeError, KeyError, TypeError, ZeroDivisionError):
        pass
    return None


COLUMNS = (  # (header, width); "|" columns separate groups
    ("size", 5), ("mb", 3), ("|", 1), ("ours tok/s", 10), ("eager", 9), ("compile", 9),
    ("|", 1), ("ours/eager", 10), ("ours/comp", 9), ("|", 1), ("MFU ours", 8), ("eager", 6),
    ("compile", 7), ("|", 1), ("peak GiB ours", 13), ("eager", 6), ("compile", 7))


def table_line(values):
    parts = []
    for (hdr, width), v in zip(COLUMNS, values):
        parts.append(("%-*s" if hdr in ("size",) else "%*s") % (width, v))
    return " ".join(parts).rstrip()


def build_table(results):
    cfg = results["config"]
    out = []
    gpu = results.get("gpu") or {}
    seqs = sorted({row["seq"] for row in results["rows"]}) or [1024]
    out.append("engine bench: mt (%s) vs PyTorch %s eager / torch.compile; %s; same run" % (
        cfg.get("train_cmd_name", "mt-train"), results.get("torch", "?"),
        gpu.get("name") or cfg.get("device")))
    out.append("  seq %s, bf16, dropout %g, one micro-batch per step, warm-up %d + %d timed"
               " steps, MFU at %g TFLOP/s" % ("/".join(str(x) for x in seqs),
                                              cfg.get("dropout", 0.0), cfg["warmup"],
                                              cfg["steps"], cfg["peak_tflops"]))
    hdr = table_line([h if h != "|" else "|" for h, _ in COLUMNS])
    out.append(hdr)
    out.append("-" * len(hdr))
    notes = []
    anchor_note_given = False
    pct = lambda v: "%.1f%%" % (v * 100)  # noqa: E731
    gib = lambda v: "%.2f" % (v / GIB)  # noqa: E731  (the progress lines' two decimals)
    for row in results["rows"]:
        o, e, c = row.get("ours") or {}, row.get("eager") or {}, row.get("compile") or {}
        re_, rc_ = row.get("ratio_ours_eager"), row.get("ratio_ours_compile")
        out.append(table_line([
            row["size"], row["micro_batch"], "|",
            cell(o, "tokens_per_second", kfmt), cell(e, "tokens_per_second", kfmt),
            cell(c, "tokens_per_second", kfmt), "|",
            "%.2fx" % re_ if re_ else "-", "%.2fx" % rc_ if rc_ else "-", "|",
            cell(o, "mfu", pct), cell(e, "mfu", pct), cell(c, "mfu", pct), "|",
            cell(o, "peak_memory_bytes", gib), cell(e, "peak_memory_bytes", gib),
            cell(c, "peak_memory_bytes", gib)]))
        for mode in MODES + (VARIANT,):
            run = row.get(mode) or {}
            if run.get("status") not in (None, "ok"):
                notes.append("%s %s: %s%s" % (row["size"], mode, run.get("status"),
                                               ": " + run["error"] if run.get("error") else ""))
            for chk in run.get("checks", []):
                notes.append("%s %s: check: %s" % (row["size"], mode, chk))
        known = {k: v.get("params") for k, v in (("ours", o), ("eager", e), ("compile", c))
                 if v.get("params")}
        if len(set(known.values())) > 1:
            notes.append("%s: PARAMETER COUNTS DIFFER: %s" % (
                row["size"], ", ".join("%s %d" % kv for kv in sorted(known.items()))))
        anchor = sizes.ANCHORS.get(row["size"])
        bits = ["%s %.2fx" % (mode, run["tokens_per_second"] / anchor[mode])
                for mode, run in (("eager", e), ("compile", c))
                if anchor and run.get("status") == "ok"]
        why_not = no_anchor_reason(cfg, gpu)
        if bits and not why_not:
            notes.append("%s: peer vs DESIGN.md section 9 anchor: %s" %
                         (row["size"], ", ".join(bits)))
        elif bits and not anchor_note_given:
            notes.append("no peer anchor: " + why_not)
            anchor_note_given = True
    out += variant_lines(results)
    out += power_lines(results)
    if notes:
        out.append("notes:")
        out += ["  " + n for n in notes]
    out.append("ratios > 1.00x: ours faster (same tokens/step, same model). results: %s" %
               results.get("results_path", "-"))
    return "\n".join(out) + "\n"


def no_anchor_reason(cfg, gpu):
    """Why the peer's figures do not compare with DESIGN.md section 9's anchors (measured on an
    H200 at dropout 0), or "" when they do."""
    if cfg.get("dropout", 0.0) != 0:
        return "DESIGN.md section 9's are at dropout 0, this run's is %g" % cfg["dropout"]
    if not anchor_gpu(gpu):
        return "DESIGN.md section 9's are an %s's, this GPU is %s" % (
            sizes.ANCHOR_GPU, gpu.get("name") or "unknown")
    return ""


def anchor_gpu(gpu):
    """Whether the peer's figures compare with DESIGN.md section 9's (measured on an H200)."""
    return sizes.ANCHOR_GPU in (gpu.get("name") or "")


def variant_lines(results):
    """The variant's rows (ours with --variant-arg, or --variant-bin's trainer, run right after
    ours), or nothing."""
    rows = [row for row in results["rows"] if row.get(VARIANT)]
    if not rows:
        return []
    cfg = results["config"]
    what = cfg.get("variant_bin") or "ours"
    if cfg.get("variant_args"):
        what += " with " + " ".join(cfg["variant_args"])
    out = ["%s, run right after ours at each size:" % what,
           "size   mb | variant tok/s  variant/ours | MFU variant | peak GiB variant"]
    for row in rows:
        v, r = row[VARIANT], row.get("ratio_variant_ours")
        out.append("%-5s %3s | %13s  %12s | %11s | %16s" % (
            row["size"], row["micro_batch"], cell(v, "tokens_per_second", kfmt),
            "%.3fx" % r if r else "-", cell(v, "mfu", lambda x: "%.1f%%" % (x * 100)),
            cell(v, "peak_memory_bytes", lambda x: "%.2f" % (x / GIB))))
    return out


def power_lines(results):
    """The GPU's median SM clock and power while each run kept it busy (gpu_power.py), or
    nothing where no run was sampled (no nvidia-smi, the CPU)."""
    runs = [(row["size"], mode, row[mode]["power"]) for row in results["rows"]
            for mode in MODES + (VARIANT,) if (row.get(mode) or {}).get("power")]
    if not runs:
        return []
    out = ["the GPU while each run kept it >= %.0f%% busy (median SM clock, median power, the"
           " samples at the power cap):" % gpu_power.BUSY_UTILIZATION]
    for size, mode, power in runs:
        out.append("  %-5s %-8s %s" % (size, mode, gpu_power.describe(power)))
    return out


def gpu_info():
    try:
        q = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.sm,"
             "clocks.max.sm,temperature.gpu,power.draw,utilization.gpu", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20)
        if q.returncode == 0 and q.stdout.strip():
            f = [x.strip() for x in q.stdout.strip().splitlines()[0].split(",")]
            keys = ("name", "memory_total", "driver", "sm_clock", "sm_clock_max",
                    "temperature", "power_draw", "utilization")
            return dict(zip(keys, f))
    except (OSError, subprocess.SubprocessError):
        pass
    return {}


# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    """(args, size names, modes) of the command line; a usage error exits with 2."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-bin", required=True, help="mt-train (or mt-worker)")
    p.add_argument("--train-arg", action="append", default=[],
                   help="argument before --spec (e.g. 'train' for mt-worker); repeatable")
    p.add_argument("--python", default=sys.executable, help="python with torch, for the peer")
    p.add_argument("--peer-ld-library-path", default=None,
                   help="LD_LIBRARY_PATH for the peer (default: inherited)")
    p.add_argument("--mtctl", default="", help="validate the generated specs with it")
    p.add_argument("--out", required=True)
    p.add_argument("--sizes", default=" ".join(sizes.DEFAULT_SIZES))
    p.add_argument("--modes", default=" ".join(MODES))
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", default="cuda")
    p.add_argument("--attention", default="auto",
                   help="ours: auto, math, fused, cudnn or flash")
    p.add_argument("--fused-lm-head", action="store_true",
                   help="ours: pass --fused-lm-head (the output layer and loss in one node)")
    p.add_argument("--fused-layernorm", action="store_true",
                   help="ours: pass --fused-layernorm (the LayerNorm kernels; "
                        "mt-train's default)")
    p.add_argument("--variant-arg", action="append", default=[],
                   help="also run ours with this switch added (e.g. --no-gemm-tuning) right "
                        "after ours at each size, and print its ratio to ours; repeatable")
    p.add_argument("--variant-bin", default="",
                   help="the variant runs this trainer (another build of mt-train, e.g. of the "
                        "commit before a change) instead of --train-bin, with ours' flags and "
                        "any --variant-arg")
    p.add_argument("--compile-mode", default="default")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="hidden and attention dropout of both sides, in [0, 1) (default 0; "
                        "Megatron's is 0.1)")
    p.add_argument("--peak-tflops", type=float, default=sizes.H200_PEAK_TFLOPS)
    p.add_argument("--deadline", type=float, default=0,
                   help="epoch seconds by which every run must have ended")
    p.add_argument("--budget", type=float, default=0, help="seconds from now (if no deadline)")
    args = p.parse_args(attach_switches(argv))

    names = list(dict.fromkeys(s for s in re.split(r"[,\s]+", args.sizes) if s))
    modes = list(dict.fromkeys(m for m in re.split(r"[,\s]+", args.modes) if m))
    for n in names:
        if n not in sizes.SIZES:
            p.error("unknown size %r (choose from %s)" % (n, ", ".join(sizes.SIZES)))
    for m in modes:
        if m not in MODES:
            p.error("unknown mode %r (choose from %s)" % (m, ", ".join(MODES)))
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be >= 1")
    if not 0.0 <= args.dropout < 1.0:  # NaN fails too
        p.error("--dropout %r: must be in [0, 1)" % args.dropout)
    if args.variant_bin and not (os.path.isfile(args.variant_bin) and
                                 os.access(args.variant_bin, os.X_OK)):
        p.error("--variant-bin %r: not an executable file (give the other build's mt-train)" %
                args.variant_bin)
    if args.variant_arg or args.variant_bin:
        if "ours" not in modes:
            p.error("--variant-arg and --variant-bin compare against ours: add ours to --modes")
        modes.insert(modes.index("ours") + 1, VARIANT)
    return args, names, modes


def main(argv=None):
    args, names, modes = parse_args(sys.argv[1:] if argv is None else argv)
    deadline = args.deadline or (time.time() + args.budget if args.budget > 0 else 0)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    out = os.path.abspath(args.out)
    for d in ("specs", "logs"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    results_path = os.path.join(out, "results.json")
    table_path = os.path.join(out, "table.txt")
    results = {
        "schema": "mt.bench.engine/1",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": platform.node(),
        "gpu": gpu_info() if args.device.startswith("cuda") else {},
        "results_path": results_path,
        "config": {
            "sizes": names, "modes": modes, "warmup": args.warmup, "steps": args.steps,
            "device": args.device, "attention": args.attention,
            "compile_mode": args.compile_mode, "peak_tflops": args.peak_tflops,
            "seq": 1024, "dropout": args.dropout, "precision": "bf16",
            "train_cmd": [args.train_bin] + args.train_arg,
            "train_cmd_name": " ".join([os.path.basename(args.train_bin)] + args.train_arg),
            "variant_args": args.variant_arg,
            "variant_bin": args.variant_bin,
        },
        "rows": [],
    }

    def save():
        with open(results_path + ".tmp", "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
        os.replace(results_path + ".tmp", results_path)
        with open(table_path, "w") as f:
            f.write(build_table(results))

    results["ours_failed"] = False

    try:
        run_all(args, names, modes, deadline, out, results, save)
    finally:
        save()
        sys.stdout.write(build_table(results))
        sys.stdout.flush()
    return 3 if results["ours_failed"] else 0


def peer_cmd(args, name, mode):
    """The PyTorch peer's command line for one size and mode (eager or compile)."""
    return [args.python, os.path.join(HERE, "pytorch_gpt.py"), "--size", name, "--mode", mode,
            "--device", args.device, "--warmup", str(args.warmup), "--steps", str(args.steps),
            "--peak-tflops", "%g" % args.peak_tflops, "--compile-mode", args.compile_mode,
            "--dropout", repr(args.dropout)]  # repr: the same double as the spec's


def run_all(args, names, modes, deadline, out, results, save):
    peer_env = dict(os.environ)
    if args.peer_ld_library_path is not None:
        if args.peer_ld_library_path:
            peer_env["LD_LIBRARY_PATH"] = args.peer_ld_library_path
        else:
            peer_env.pop("LD_LIBRARY_PATH", None)
    ours_env = dict(os.environ)
    ours_env["MT_LOG_LEVEL"] = "INFO"  # the per-step progress lines are our measurement
    # Rows in size order; runs in two passes: ours and eager for every size, then the compiled
    # peer for every size (the slow one: its compile takes a minute or more). When the budget
    # runs short, what is lost is the compiled column of the largest sizes.
    rows, spec_paths, spec_problems = {}, {}, {}
    for name in names:
        layers, hidden, heads, seq, mb = sizes.size(name)
        row = {"size": name, "layers": layers, "hidden": hidden, "heads": heads, "seq": seq,
               "micro_batch": mb}
        results["rows"].append(row)
        rows[name] = row
        spec_paths[name] = spec_path = os.path.join(out, "specs", "%s.yaml" % name)
        with open(spec_path, "w") as f:
            f.write(spec_yaml(name, args.warmup + args.steps,
                              interval=log_interval(args.warmup, args.steps),
                              dropout=args.dropout))
        if args.mtctl and "ours" in modes:
            vpath = os.path.join(out, "specs", "%s.validate.yaml" % name)
            with open(vpath, "w") as f:
                f.write(spec_yaml(name, args.warmup + args.steps, for_validation=True,
                                  interval=log_interval(args.warmup, args.steps),
                                  dropout=args.dropout))
            try:
                v = subprocess.run([args.mtctl, "validate", vpath], capture_output=True,
                                   text=True, timeout=60, env=ours_env)
                row["spec_validation"] = "ok" if v.returncode == 0 else v.stderr.strip()
                if v.returncode != 0:
                    spec_problems[name] = "mtctl validate: " + " | ".join(
                        v.stderr.strip().splitlines()[:3])
            except (OSError, subprocess.SubprocessError) as e:
                row["spec_validation"] = "not run: %s" % e
    save()
    schedule = [(n, m) for n in names for m in modes if m != "compile"]
    schedule += [(n, "compile") for n in names if "compile" in modes]
    for name, mode in schedule:
        row = rows[name]
        spec_path = spec_paths[name]
        spec_problem = spec_problems.get(name)
        left = deadline - time.time() if deadline else RUN_CAP_S[mode]
        base = os.path.join(out, "logs", "%s-%s" % (name, mode))
        if left < RUN_MIN_S[mode]:
            row[mode] = {"status": "skip", "error": "time budget (%.0f s left)" % max(0, left)}
            log("%s %s: skipped, %.0f s left" % (name, mode, left))
            save()
            continue
        if mode == "ours" and spec_problem:
            row[mode] = {"status": "fail", "error": spec_problem}
            results["ours_failed"] = True
            save()
            continue
        timeout = min(RUN_CAP_S[mode], left)
        if mode in ("ours", VARIANT):
            train_bin = args.variant_bin if mode == VARIANT and args.variant_bin else \
                args.train_bin
            cmd = [train_bin] + args.train_arg + [
                "--spec", spec_path, "--device", args.device, "--synthetic-data",
                "--train-iters", str(args.warmup + args.steps),
                "--peak-tflops", "%g" % args.peak_tflops, "--attention", args.attention]
            if args.fused_lm_head:
                cmd.append("--fused-lm-head")
            if args.fused_layernorm:
                cmd.append("--fused-layernorm")
            if mode == VARIANT:
                cmd += args.variant_arg  # last: the variant's switch wins over the flags above
            env = ours_env
        else:
            cmd = peer_cmd(args, name, mode)
            env = peer_env
        log("%s %s: %s (timeout %.0f s)" % (name, mode, " ".join(cmd), timeout))
        sampler = gpu_power.Sampler(args.device, base + ".power.csv", env)
        sampler.start()
        try:
            rc, timed_out, wall = run_proc(cmd, env, timeout, base + ".stdout",
                                           base + ".stderr")
        except SystemExit:
            row[mode] = {"status": "killed", "error": "the benchmark was stopped (signal)"}
            results["ours_failed"] |= mode == "ours"
            raise
        finally:
            power = sampler.stop()
        so, se = read(base + ".stdout"), read(base + ".stderr")
        if mode in ("ours", VARIANT):
            run = parse_ours(so, se, name, args.warmup, args.steps, args.peak_tflops,
                             dropout=args.dropout)
        else:
            run = parse_peer(so, dropout=args.dropout)
        run["rc"] = rc
        run["wall_seconds"] = round(wall, 1)
        if power:
            run["power"] = power
        if timed_out:
            run["status"] = "timeout"
            run["error"] = "killed after %.0f s" % timeout
        elif rc != 0 or "error" in run or "tokens_per_second" not in run:
            # The peer's JSON names its error; ours says it on stderr.
            err = (run.get("error") if mode not in ("ours", VARIANT) else "") or \
                (last_error_line(se) if rc != 0 else "") or run.get("error") or \
                "exit code %d" % rc
            run["status"] = "oom" if "out of memory" in err.lower() else "fail"
            run["error"] = err
        else:
            run["status"] = "ok"
        if mode == "ours" and run["status"] != "ok":
            results["ours_failed"] = True
        if mode not in ("ours", VARIANT) and run.get("torch"):
            results["torch"] = run["torch"]
        row[mode] = run
        row["ratio_ours_eager"] = ratio(row.get("ours", {}), row.get("eager", {}))
        row["ratio_ours_compile"] = ratio(row.get("ours", {}), row.get("compile", {}))
        row["ratio_variant_ours"] = ratio(row.get(VARIANT, {}), row.get("ours", {}))
        log("%s %s: %s%s (%.0f s)" % (
            name, mode, run["status"],
            ", %.0f tokens/s" % run["tokens_per_second"] if run["status"] == "ok" else
            ": " + str(run.get("error")), wall))
        save()


if __name__ == "__main__":
    sys.exit(main())
