#!/usr/bin/env python3
"""Where a profiled step's GPU idles, and who launches its memsets, from the Chrome trace that
profile_step writes (--trace FILE.json: LibTorch's Kineto format). It found the memset that
cuBLASLt issues before each GEMM, ~190 graph nodes a GPT-2 350M step (bench/RESULTS.md,
2026-12-06, issue #16).

  bench/engine/trace_gaps.py TRACE.json [--top 20] [--width 60] [-o text|json]

Prints, over the trace's GPU activities (kernels, memsets, memcopies; every stream):
- the span from the first start to the last end, the busy time (overlaps counted once), the
  idle time, and how many gaps of each whole number of microseconds (20 and more together);
- the idle time by the pair of activities on either side of each gap (the one whose end the
  gap starts from, and the one that ends it), largest first;
- the memsets by launcher: the runtime or driver call that issued each (matched by the
  correlation id) and the CPU ops around that call, innermost last. An eager step
  (profile_step --no-cuda-graph) names the op; a replayed CUDA graph shows cudaGraphLaunch.

Exit codes: 0 done, 2 bad usage or a trace it cannot read.
"""

import argparse
import collections
import json
import sys

VERSION = "trace_gaps (mt bench/engine) 1"
GPU_CATEGORIES = ("kernel", "gpu_memset", "gpu_memcpy")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
GAP_BUCKETS = 20  # gaps of 20 us and more share the last bucket


def complete_events(events):
    """The complete ("X") events with a start and a duration: what the tables read."""
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def load_events(path):
    """The trace's complete events; ValueError when it is not a Chrome trace."""
    with open(path) as f:
        data = json.load(f)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError("no traceEvents list")
    return complete_events(events)


def short(name, width):
    return name if len(name) <= width else name[:width]


def idle_gaps(events, width):
    """The span, busy and idle microseconds, the gap histogram and the idle time by pair."""
    acts = sorted((e for e in events if e.get("cat") in GPU_CATEGORIES), key=lambda e: e["ts"])
    report = {"activities": len(acts), "span_us": 0.0, "busy_us": 0.0, "idle_us": 0.0,
              "gaps_by_us": {}, "pairs": []}
    if not acts:
        return report
    hist = collections.Counter()
    idle = collections.Counter()
    count = collections.Counter()
    last = acts[0]
    end = last["ts"] + last["dur"]
    busy = last["dur"]
    for a in acts[1:]:
        a_end = a["ts"] + a["dur"]
        if a["ts"] > end:
            gap = a["ts"] - end
            key = (short(last.get("name", "?"), width), short(a.get("name", "?"), width))
            idle[key] += gap
            count[key] += 1
            hist[min(int(gap), GAP_BUCKETS)] += 1
            busy += a["dur"]
        elif a_end > end:
            busy += a_end - end
        if a_end >= end:
            end, last = a_end, a
    report["span_us"] = end - acts[0]["ts"]
    report["busy_us"] = busy
    report["idle_us"] = report["span_us"] - busy
    report["gaps_by_us"] = {str(k): hist[k] for k in sorted(hist)}
    report["pairs"] = [{"before": k[0], "after": k[1], "us": us, "count": count[k]}
                       for k, us in sorted(idle.items(), key=lambda kv: (-kv[1], kv[0]))]
    return report


def memset_launchers(events, depth=4):
    """Memsets grouped by the call that issued them and the CPU ops around it (innermost last,
    the `depth` innermost), most first."""
    launches = {}
    for e in events:
        correlation = (e.get("args") or {}).get("correlation")
        if e.get("cat") in LAUNCH_CATEGORIES and correlation is not None:
            launches[correlation] = e
    ops = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            ops[e.get("tid")].append(e)
    count = collections.Counter()
    us = collections.Counter()
    for m in events:
        if m.get("cat") != "gpu_memset":
            continue
        call = launches.get((m.get("args") or {}).get("correlation"))
        if call is None:
            key = "(no launch event)"
        else:
            around = sorted((o for o in ops[call.get("tid")] if o["ts"] <= call["ts"] and
                             o["ts"] + o["dur"] >= call["ts"] + call["dur"]),
                            key=lambda o: (o["ts"], -o["dur"]))
            names = [o.get("name", "?") for o in around][-depth:]
            key = call.get("name", "?") + (" <- " + " > ".join(names) if names else "")
        count[key] += 1
        us[key] += m["dur"]
    return [{"launcher": k, "count": count[k], "us": us[k]}
            for k in sorted(count, key=lambda k: (-count[k], k))]


def text_lines(report, top):
    g = report["gaps"]
    lines = ["GPU activities %d: span %.1f us, busy %.1f us, idle %.1f us" % (
        g["activities"], g["span_us"], g["busy_us"], g["idle_us"])]
    lines.append("gaps by whole us (%d = %d and more): %s" % (
        GAP_BUCKETS, GAP_BUCKETS,
        ", ".join("%s: %d" % (k, v) for k, v in g["gaps_by_us"].items()) or "none"))
    lines.append("idle us  gaps  before -> after")
    for p in g["pairs"][:top]:
        lines.append("%7.1f %5d  %s -> %s" % (p["us"], p["count"], p["before"], p["after"]))
    lines.append("memsets  us  launcher")
    for m in report["memsets"][:top]:
        lines.append("%7d %7.1f  %s" % (m["count"], m["us"], m["launcher"]))
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="profile_step --trace's JSON file")
    p.add_argument("--top", type=int, default=20, help="rows of each table (default 20)")
    p.add_argument("--width", type=int, default=60, help="characters of a kernel's name kept")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("--version", action="version", version=VERSION)
    args = p.parse_args(argv)
    if args.top < 1 or args.width < 8:
        p.error("--top: at least 1; --width: at least 8")
    try:
        events = load_events(args.trace)
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        print("trace_gaps: %s: %s (want profile_step --trace's Chrome trace JSON)"
              % (args.trace, e), file=sys.stderr)
        return 2
    report = {"trace": args.trace, "gaps": idle_gaps(events, args.width),
              "memsets": memset_launchers(events)}
    if args.output == "json":
        report["gaps"]["pairs"] = report["gaps"]["pairs"][:args.top]
        report["memsets"] = report["memsets"][:args.top]
        print(json.dumps(report, indent=1))
    else:
        print("\n".join(text_lines(report, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
