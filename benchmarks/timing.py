"""How a benchmark measures: wall time as a median after warm-up, two measurements side by side
in alternating rounds (``paired_seconds``: the ratio within a round, so a busy machine moves single
rounds and not the median), peak memory, and a description of the machine it ran on."""

from __future__ import annotations

import os
import pathlib
import platform
import statistics
import time

import torch

from attnlab.memory import cuda_peak_bytes, peak_bytes


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_seconds(fn, device: torch.device, repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def wall_seconds(fn, device: torch.device):
    """A measurement: call ``fn()`` once and return its wall time in seconds."""
    def measure() -> float:
        start = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - start
    return measure


def paired_seconds(measure_a, measure_b, repeats: int, warmup: int = 1) -> dict:
    """Run two measurements side by side: ``repeats`` rounds, each taking both, in alternating
    order. Returns both medians (seconds) and the ratio a/b of each round (median, min, max).

    A ratio of two medians taken minutes apart swings with whatever else the machine runs
    (a busy second core doubled one of them); the ratio within a round compares two calls
    made under the same load, and the median over rounds drops the rounds a burst hit.
    """
    for _ in range(warmup):
        measure_a()
        measure_b()
    times = {"a": [], "b": []}
    for round_ in range(repeats):
        for key in (("a", "b") if round_ % 2 == 0 else ("b", "a")):
            times[key].append((measure_a if key == "a" else measure_b)())
    ratios = [a / b for a, b in zip(times["a"], times["b"])]
    return {"a": statistics.median(times["a"]), "b": statistics.median(times["b"]),
            "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                      "rounds": repeats}}


def machine(device: torch.device) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "python": platform.python_version(), "device": device.type,
            "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def peak_MiB(fn, device: torch.device) -> float:
    """Peak memory of ``fn()``: counted tensor bytes on the CPU (attnlab.memory), the allocator's peak on a GPU."""
    return (cuda_peak_bytes(fn) if device.type == "cuda" else peak_bytes(fn)) / 2**20
