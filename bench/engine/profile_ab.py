#!/usr/bin/env python3
"""A before/after kernel profile of one of our trainer's switches, in one run (issue #16 asks
for the top kernels before and after each step of progress).

For each bench size, profile_step runs the bench's spec (bench_engine.spec_yaml) with our
defaults, then again with the variant's switches, same warm-up and steps. Printed per size: the
step without the profiler, the GPU's busy time (overlapping kernels counted once), the kernels'
summed time, the idle time, the GEMM tuning's counts, and the top
kernels by ms per step side by side (the union of both runs' top N) with the difference. The
raw outputs go to OUT/profile-ab/.

  bench/engine/profile_ab.py --build DIR [--sizes 124m,350m,1.3b] [--warmup 3] [--steps 3]
                             [--top 20] [--out DIR] [--timeout 300]
                             [--variant-arg --no-gemm-tuning ...]

Without --variant-arg it is one plain profile per size. Needs a build with a CUDA LibTorch
(profile_step exits 2 elsewhere). Exit codes: 0 done, 3 a profile_step run failed, 2 usage.
"""

import argparse
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_engine  # noqa: E402
import sizes  # noqa: E402

KERNEL_ROW = re.compile(r"^\s*([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)\s+(\S.*)$")
SCALARS = {
    "step": re.compile(r"^step without the profiler: ([0-9.]+) ms"),
    "busy": re.compile(r"GPU busy ([0-9.]+) ms/step"),
    "kernels": re.compile(r"; kernels ([0-9.]+) ms/step"),
    "gaps": re.compile(r"^GPU idle per step: ([0-9.]+) ms between kernels"),
    "stalls": re.compile(r"ms between kernels .*?, ([0-9.]+) ms in"),
    "tuned": re.compile(r"^gemm tuning: ([0-9]+) cuBLASLt problems timed"),
    "moved": re.compile(r"problems timed, ([0-9]+) moved off"),
    "workspace": re.compile(r"first pick, ([0-9]+) with the workspace"),
}
SCALAR_LABELS = [
    ("step", "step without the profiler (ms)"),
    ("busy", "GPU busy (ms/step)"),
    ("kernels", "kernels' sum (ms/step)"),
    ("gaps", "idle between kernels (ms/step)"),
    ("stalls", "stalls of 10 us or more (ms/step)"),
    ("tuned", "GEMM problems tuned"),
    ("moved", "moved off the first pick"),
    ("workspace", "run with the workspace"),
]


def parse_profile(text):
    """profile_step's stdout -> {"scalars": {key: float}, "kernels": {name: (ms, calls)}}."""
    scalars, kernels, in_table = {}, {}, False
    for line in text.splitlines():
        for key, pattern in SCALARS.items():
            m = pattern.search(line)
            if m:
                scalars[key] = float(m.group(1))
        if re.match(r"^\s*ms/step\s+share\s+calls\s+kernel", line):
            in_table = True
            continue
        m = KERNEL_ROW.match(line) if in_table else None
        if m:
            kernels[m.group(4).strip()] = (float(m.group(1)), float(m.group(3)))
    return {"scalars": scalars, "kernels": kernels}


def log(msg):
    print("profile_ab: " + msg, file=sys.stderr, flush=True)


def fmt(x, digits=3):
    return "-" if x is None else "%.*f" % (digits, x)


def diff(a, b, digits=3):
    return "-" if a is None or b is None else "%+.*f" % (digits, b - a)


def compare_lines(base, variant, top, label):
    """Side-by-side lines of two parsed profiles (variant None: base alone)."""
    cols = ["ours", label] if variant else ["ours"]
    out = ["%-36s %10s" % ("", cols[0]) + ("  %10s %9s" % (cols[1], "diff") if variant else "")]
    for key, name in SCALAR_LABELS:
        a = base["scalars"].get(key)
        b = variant["scalars"].get(key) if variant else None
        digits = 0 if key in ("tuned", "moved", "workspace") else 3
        row = "%-36s %10s" % (name, fmt(a, digits))
        if variant:
            row += "  %10s %9s" % (fmt(b, digits), diff(a, b, digits))
        out.append(row)
    names = sorted(base["kernels"], key=lambda k: -base["kernels"][k][0])[:top]
    if variant:
        for k in sorted(variant["kernels"], key=lambda k: -variant["kernels"][k][0])[:top]:
            if k not in names:
                names.append(k)
    out.append("%10s %6s" % ("ms/step", "calls") + (" %10s %6s %9s" % (label[:10], "calls", "diff")
                                                    if variant else "") + "  kernel")
    for k in names:
        a = base["kernels"].get(k)
        b = variant["kernels"].get(k) if variant else None
        row = "%10s %6s" % (fmt(a and a[0]), fmt(a and a[1], 1))
        if variant:
            row += " %10s %6s %9s" % (fmt(b and b[0]), fmt(b and b[1], 1),
                                      diff(a and a[0], b and b[0]))
        out.append(row + "  " + k)
    return out


def run_profile(args, spec, extra, log_path):
    cmd = [args.profile_step, "--spec", spec, "--warmup", str(args.warmup), "--steps",
           str(args.steps), "--top", str(args.top)] + extra
    log("profile: " + " ".join(cmd))
    with open(log_path, "w") as f:
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True,
                                  timeout=args.timeout)
        except subprocess.TimeoutExpired:
            log("profile_step ran past --timeout %g s (see %s)" % (args.timeout, log_path))
            return None
    with open(log_path.replace(".err", ".txt"), "w") as f:
        f.write(proc.stdout)
    if proc.returncode != 0:
        log("profile_step exit %d (see %s)" % (proc.returncode, log_path))
        return None
    return parse_profile(proc.stdout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.environ.get("MT_GPU_BUILD_DIR", "/tmp/mt-gpu"))
    p.add_argument("--profile-step", default=None, help="default: BUILD/bin/profile_step")
    p.add_argument("--sizes", default="124m,350m,1.3b")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/mt-gpu-out"))
    p.add_argument("--timeout", type=float, default=300, help="seconds a profile_step run may take")
    p.add_argument("--variant-arg", action="append", default=[],
                   help="a switch of the variant (--variant-arg --no-gemm-tuning); repeatable")
    args = p.parse_args(bench_engine.attach_switches(sys.argv[1:] if argv is None else argv))
    args.profile_step = args.profile_step or os.path.join(args.build, "bin", "profile_step")
    names = [s for s in args.sizes.replace(",", " ").split() if s]
    for n in names:
        if n not in sizes.SIZES:
            p.error("--sizes: unknown size %r (one of %s)" % (n, ", ".join(sizes.SIZES)))
    if min(args.warmup, args.steps, args.top) < 1 or args.timeout <= 0:
        p.error("--warmup, --steps and --top: at least 1; --timeout: more than 0")
    if not os.access(args.profile_step, os.X_OK):
        p.error("no profile_step at %s (give --build or --profile-step)" % args.profile_step)
    out = os.path.join(args.out, "profile-ab")
    os.makedirs(out, exist_ok=True)
    label = " ".join(args.variant_arg)
    failed = False
    for n in names:
        spec = os.path.join(out, "%s.yaml" % n)
        with open(spec, "w") as f:
            f.write(bench_engine.spec_yaml(n, args.warmup + 2 * args.steps + 4))
        base = run_profile(args, spec, [], os.path.join(out, "%s-ours.err" % n))
        variant = None
        if args.variant_arg:
            variant = run_profile(args, spec, args.variant_arg,
                                  os.path.join(out, "%s-variant.err" % n))
        if base is None or (args.variant_arg and variant is None):
            failed = True
            continue
        print("\n== %s: ours%s ==" % (n, " against ours " + label if variant else ""))
        print("\n".join(compare_lines(base, variant, args.top, label or "ours")))
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
