#!/usr/bin/env python3
"""Where two profiled training steps spend the GPU's time, by kind of kernel, side by side:
ours (profile_step --trace FILE) against the PyTorch peer (pytorch_gpt.py --trace FILE), from
their Chrome traces (Kineto's format). Kernel names differ between the two (cuBLASLt picks
against cuBLAS's, our LayerNorm against Triton's fusions), so the comparison is by kind: GEMM,
attention, LayerNorm, cross entropy, optimizer, bias gradients, ... (`kind_of` says which name
goes where). It shows where the peer gains on us from one GPU to another (issue #16: the peer
gained 5.9% from an H100 to an H200, ours 2.5%).

  bench/engine/kernel_kinds.py OURS.json[:STEPS] [PEER.json[:STEPS]] [--top 8] [-o text|json]

STEPS (default 1) divides each trace's times, for ms per step. Printed: each trace's GPU busy
time (overlaps counted once) and kernels' sum per step, the ms per step of each kind and its
share, the difference (peer - ours), then each kind's top kernels. Exit codes: 0 done, 2 bad
usage or a trace it cannot read.
"""

import argparse
import collections
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_gaps  # noqa: E402

VERSION = "kernel_kinds (mt bench/engine) 1"

# (kind, substrings of the lower-cased name), first match wins; the order matters: the
# optimizer's norms before LayerNorm, cuDNN's attention before the GEMMs' "sm90_".
RULES = [
    ("optimizer", ("adamw", "adam", "sumofsquares", "finishsumkernel", "multi_tensor_apply",
                   "lpnorm", "foreach")),
    ("attention", ("sdpa", "flash", "fmha", "cudnn", "dot_do_o", "convert_dq", "attention")),
    ("cross entropy", ("crossentropy", "cross_entropy", "log_softmax", "nll_loss")),
    ("LayerNorm", ("layer_norm", "layernorm", "streamingforwardkernel", "registerforwardkernel",
                   "stagedbackwardkernel", "pipelinedbackwardkernel", "registerbackwardkernel",
                   "streamingbackwardkernel", "finishkernel<float>(float const*",
                   "finishkernel<__nv_bfloat16>(float const*",
                   "finishkernel<__half>(float const*")),
    ("QKV gradient's gather", ("qkvgradgather",)),
    ("bias gradients", ("chunksumkernel", "finishcolumnskernel")),
    ("embedding", ("embedding", "preparekeyskernel", "chunkkernel", "finishkernel", "radix",
                   "sort", "index_put", "indexing_backward", "embedding_backward")),
    ("GEMM", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "splitk", "matmul")),
    ("element-wise (Triton)", ("triton",)),
]
OTHER = "other"
MEMORY = "memset and copy"


def kind_of(name, category="kernel"):
    """The kind of a GPU activity from its name (and its trace category: memsets, copies)."""
    if category in ("gpu_memset", "gpu_memcpy"):
        return MEMORY
    low = name.lower()
    for kind, keys in RULES:
        if any(k in low for k in keys):
            return kind
    return OTHER


def summarize(events, steps):
    """{"busy_ms", "sum_ms", "kinds": {kind: ms}, "kernels": {kind: [(name, ms, calls)]}} per
    step, over the trace's GPU activities."""
    acts = [e for e in events if e.get("cat") in trace_gaps.GPU_CATEGORIES]
    gaps = trace_gaps.idle_gaps(events, 60)
    kinds = collections.Counter()
    per_name = collections.defaultdict(lambda: [0.0, 0])
    for a in acts:
        name = a.get("name", "?")
        kind = kind_of(name, a.get("cat"))
        kinds[kind] += a["dur"]
        per_name[(kind, name)][0] += a["dur"]
        per_name[(kind, name)][1] += 1
    kernels = collections.defaultdict(list)
    for (kind, name), (us, calls) in per_name.items():
        kernels[kind].append((name, us / 1e3 / steps, calls / steps))
    for rows in kernels.values():
        rows.sort(key=lambda r: -r[1])
    return {"busy_ms": gaps["busy_us"] / 1e3 / steps,
            "sum_ms": sum(kinds.values()) / 1e3 / steps,
            "kinds": {k: us / 1e3 / steps for k, us in kinds.items()},
            "kernels": dict(kernels)}


def kind_order(summaries):
    """Kinds by the largest time any trace gives them."""
    names = set()
    for s in summaries:
        names.update(s["kinds"])
    return sorted(names, key=lambda k: -max(s["kinds"].get(k, 0.0) for s in summaries))


def text_lines(labels, summaries, top):
    two = len(summaries) == 2
    head = "%-24s" % "ms per step" + "".join("  %10s %6s" % (name[:10], "share")
                                             for name in labels)
    out = [head + ("  %9s" % "diff" if two else "")]

    def row(name, values, shares):
        r = "%-24s" % name[:24]
        for v, s in zip(values, shares):
            r += "  %10.3f %6s" % (v, s)
        if two:
            r += "  %+9.3f" % (values[1] - values[0])
        return r

    out.append(row("GPU busy", [s["busy_ms"] for s in summaries], [""] * len(summaries)))
    out.append(row("kernels' sum", [s["sum_ms"] for s in summaries], [""] * len(summaries)))
    for kind in kind_order(summaries):
        values = [s["kinds"].get(kind, 0.0) for s in summaries]
        shares = ["%.1f%%" % (100 * v / s["sum_ms"]) if s["sum_ms"] else "-"
                  for v, s in zip(values, summaries)]
        out.append(row(kind, values, shares))
    for label, s in zip(labels, summaries):
        out.append("")
        out.append("== %s: the top %d kernels of each kind (ms per step, calls per step) ==" %
                   (label, top))
        for kind in kind_order([s]):
            out.append("%s:" % kind)
            for name, ms, calls in s["kernels"].get(kind, [])[:top]:
                out.append("  %9.3f %7.1f  %s" % (ms, calls, name[:150]))
    return out


def parse_trace_arg(arg):
    """FILE[:STEPS] -> (FILE, STEPS); ValueError for a bad STEPS."""
    path, sep, steps = arg.rpartition(":")
    if not sep or not steps.isdigit():
        return arg, 1
    if int(steps) < 1:
        raise ValueError("%s: STEPS must be at least 1" % arg)
    return path, int(steps)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", help="OURS.json[:STEPS] [PEER.json[:STEPS]]")
    p.add_argument("--labels", default="ours,peer", help="the traces' column names")
    p.add_argument("--top", type=int, default=8, help="top kernels listed per kind")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("--version", action="version", version=VERSION)
    args = p.parse_args(argv)
    if len(args.traces) > 2:
        p.error("at most two traces (ours and the peer's), got %d" % len(args.traces))
    if args.top < 1:
        p.error("--top must be at least 1")
    labels = [name for name in args.labels.split(",") if name]
    if len(labels) < len(args.traces):
        p.error("--labels: one name per trace (%d given for %d traces)" %
                (len(labels), len(args.traces)))
    summaries = []
    for arg in args.traces:
        try:
            path, steps = parse_trace_arg(arg)
            summaries.append(summarize(trace_gaps.load_events(path), steps))
        except (OSError, ValueError) as e:
            print("kernel_kinds: %s: %s" % (arg, e), file=sys.stderr)
            return 2
    labels = labels[:len(summaries)]
    if args.output == "json":
        print(json.dumps(dict(zip(labels, summaries)), sort_keys=True))
    else:
        print("\n".join(text_lines(labels, summaries, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
