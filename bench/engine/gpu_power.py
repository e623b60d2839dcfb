#!/usr/bin/env python3
"""The GPU's clock and power while a benchmark run trains (bench_engine.py). Stdlib only.

A GPT step keeps an H100 at its 700 W board limit: the driver then lowers the SM clock
(1,620-1,680 MHz against 1,980 idle on an H100, bench/RESULTS.md 2026-12-07), so two runs'
tokens/s compare only with the clocks they ran at. A Sampler polls `nvidia-smi` every
SAMPLE_MS into a CSV file beside the run's logs; summarize() reads the samples taken while the
GPU was busy (utilization >= BUSY_UTILIZATION %, so the process's start-up and the peer's
compile drop out) and gives their median SM clock, median power and the share of them with the
software power cap among the clock event reasons. Without nvidia-smi, nothing is sampled and
the run goes on.
"""

import os
import statistics
import subprocess

SAMPLE_MS = 500
BUSY_UTILIZATION = 90.0
POWER_CAP_REASON = 0x4  # nvidia-smi's clocks event reason bit: the software power cap
QUERY = "utilization.gpu,clocks.sm,power.draw,clocks_throttle_reasons.active"


def smi_index(device, visible=None):
    """nvidia-smi's index of the GPU a run on `device` (cuda, cuda:N) uses, or None when it is
    not a CUDA device or CUDA_VISIBLE_DEVICES (`visible`) does not name it by number."""
    if not device.startswith("cuda"):
        return None
    ordinal = int(device.split(":", 1)[1]) if ":" in device else 0
    if visible is None:
        return str(ordinal)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if ordinal >= len(ids) or not ids[ordinal].isdigit():
        return None
    return ids[ordinal]


class Sampler:
    """nvidia-smi sampling the GPU into `path` from start() to stop(); a no-op where the device
    is not a numbered CUDA GPU or nvidia-smi cannot start."""

    def __init__(self, device, path, env=None):
        env = os.environ if env is None else env
        self._index = smi_index(device, env.get("CUDA_VISIBLE_DEVICES"))
        self._path = path
        self._proc = None

    def start(self):
        if self._index is None:
            return False
        try:
            with open(self._path, "wb") as out:
                self._proc = subprocess.Popen(
                    ["nvidia-smi", "-i", self._index, "--query-gpu=" + QUERY,
                     "--format=csv,noheader,nounits", "-lms", str(SAMPLE_MS)],
                    stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            self._proc = None
        return self._proc is not None

    def stop(self):
        """Ends the sampling; the summary of what it wrote ({} for nothing)."""
        if self._proc is None:
            return {}
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        try:
            with open(self._path, errors="replace") as f:
                return summarize(f.read())
        except OSError:
            return {}


def summarize(text):
    """From the sampler's CSV lines (utilization %, SM MHz, W, reasons as hex): over the samples
    with utilization >= BUSY_UTILIZATION, their count, median SM clock (MHz), median power (W)
    and the share with POWER_CAP_REASON set. {} when no sample was busy. Lines that do not
    parse ([N/A], a cut last line) are skipped."""
    busy = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        try:
            util, clock, power = float(fields[0]), float(fields[1]), float(fields[2])
            reasons = int(fields[3], 16)
        except ValueError:
            continue
        if util >= BUSY_UTILIZATION:
            busy.append((clock, power, reasons))
    if not busy:
        return {}
    capped = sum(1 for _, _, r in busy if r & POWER_CAP_REASON)
    return {"busy_samples": len(busy),
            "sm_clock_mhz": statistics.median([c for c, _, _ in busy]),
            "power_w": statistics.median([p for _, p, _ in busy]),
            "power_capped": capped / float(len(busy))}


def describe(summary):
    """One table cell: '1,650 MHz  690 W  cap 95%' (or '-')."""
    if not summary:
        return "-"
    return "{:,.0f} MHz {:4.0f} W  cap {:3.0f}%".format(
        summary["sm_clock_mhz"], summary["power_w"], summary["power_capped"] * 100)
