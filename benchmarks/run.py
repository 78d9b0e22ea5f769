"""Measure every performance claim the course makes, in one run.

    python -m benchmarks.run            # CPU-sized, a few minutes on 2 cores (make bench)
    python -m benchmarks.run --full     # bigger sizes, for a bigger machine or a GPU
    python -m benchmarks.run --smoke    # tiny sizes, seconds (the test suite runs this)

On a CUDA GPU the default sizes are ``gpu``: the same rows, plus bfloat16 rows from T = 1k to
32k (flash causal against full, compiled FlexAttention with causal and sliding-window block
masks); ``--publish`` then writes ``attnlab/data/benchmarks_cuda.json`` next to the CPU file.

Writes ``benchmarks/results/<name>.md``, ``.json`` and ``.png`` (``--name``,
default ``cpu`` or ``gpu``), with the machine described. Every speed claim is a
median of ratios taken side by side in the same run (after warm-up; see
``paired_seconds``), because shared machines are noisy; peak memory is counted exactly (attnlab.memory), so it is
the same on every machine. With ``--publish`` the JSON is also copied to
``attnlab/data/benchmarks.json``, from which the chapters quote their numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.attention import causal_attention
from attnlab.blocked import blocked_attention
from attnlab.blocked_backward import (attention_grads, blocked_backward, blocked_forward,
                                      saved_bytes_formula)
from attnlab.gpt import GPT, GPTConfig, KVCache
from attnlab.memory import cuda_peak_bytes, peak_bytes

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PUBLISHED = ROOT / "attnlab" / "data" / "benchmarks.json"


@dataclass
class Sizes:
    attention_T: tuple[int, ...]  # sequence lengths for the attention rows
    heads: int  # H, with d = 64 and batch 1
    block: int  # tile size of the blocked attention
    decode_contexts: tuple[int, ...]  # context lengths for the decode rows
    decode_tokens: int  # new tokens per decode measurement
    repeats: int  # timed repetitions of a single measurement (the median is reported)
    pair_repeats: int  # rounds of a side-by-side pair (causal and full, cache and none)
    model: dict  # GPTConfig fields of the decode model
    backward_T: tuple[int, ...] = (64, 128)  # sequence lengths for the backward rows (chapter 11)
    gpu_T: tuple[int, ...] = ()  # sequence lengths of the bfloat16 rows (flash, FlexAttention; GPU only)
    gpu_heads: int = 16  # H of the bfloat16 rows, with d = 128 and batch 1
    window: int = 1024  # sliding window of the FlexAttention rows (chapter 8)
    naive_max_T: int = 16384  # the bfloat16 rows time the naive [T, T] version up to this T


SIZES = {
    "smoke": Sizes((64, 128), 2, 32, (16, 32), 4, 2, 3, dict(n_layer=2, n_head=4, n_embd=64)),
    "default": Sizes((256, 1024, 4096), 4, 128, (128, 512, 2048), 16, 5, 9, dict(n_layer=4, n_head=4, n_embd=128),
                     (1024, 4096)),
    "full": Sizes((256, 1024, 4096, 8192), 8, 128, (128, 512, 2048, 4096), 32, 7, 11,
                  dict(n_layer=6, n_head=6, n_embd=384), (1024, 4096, 8192)),
    # the default on a CUDA GPU (an H200 in mind): the fp32 rows of the CPU sizes, and the bfloat16
    # sweep from 1k to 32k behind chapters 3 and 8's GPU claims
    "gpu": Sizes((1024, 4096, 8192), 8, 128, (128, 512, 2048, 4096), 32, 7, 11,
                 dict(n_layer=6, n_head=6, n_embd=384), (1024, 4096), (1024, 2048, 4096, 8192, 16384, 32768)),
}


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


def attention_rows(sizes: Sizes, device: torch.device) -> list[dict]:
    """Naive masked attention vs SDPA (is_causal) vs blocked tile-skipping: time and peak memory."""
    rows = []
    for T in sizes.attention_T:
        torch.manual_seed(0)
        q, k, v = torch.randn(3, 1, sizes.heads, T, 64, device=device).unbind(0)  # [B, H, T, d] each
        naive = lambda: causal_attention(q, k, v)  # noqa: E731
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        sdpa_full = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
        blocked = lambda: blocked_attention(q, k, v, block=sizes.block)[0]  # noqa: E731
        blocked_full = lambda: blocked_attention(q, k, v, block=sizes.block, causal=False)[0]  # noqa: E731
        row = {"T": T, "H": sizes.heads, "d": 64, "block": sizes.block}
        row["naive_ms"] = 1e3 * median_seconds(naive, device, sizes.repeats)
        for name, causal_fn, full_fn in (("sdpa", sdpa, sdpa_full), ("blocked", blocked, blocked_full)):
            pair = paired_seconds(wall_seconds(causal_fn, device), wall_seconds(full_fn, device), sizes.pair_repeats)
            row[f"{name}_causal_ms"], row[f"{name}_full_ms"] = 1e3 * pair["a"], 1e3 * pair["b"]
            row[f"{name}_causal_over_full"] = pair["ratio"]
        for name, fn in (("naive", naive), ("sdpa_causal", sdpa), ("blocked_causal", blocked)):
            row[f"{name}_peak_MiB"] = peak_MiB(fn, device)
        _, counts = blocked_attention(q, k, v, block=sizes.block)
        _, full_counts = blocked_attention(q, k, v, block=sizes.block, causal=False)
        n = math.ceil(T / sizes.block)
        row["flops_ratio_counted"] = counts.score_flops / full_counts.score_flops
        row["flops_ratio_theory"] = (T + sizes.block) / (2 * T) if T % sizes.block == 0 else (n + 1) / (2 * n)
        row["tiles_skipped"] = counts.skipped
        row["tiles_total"] = n * n
        row["max_abs_diff_sdpa_vs_naive"] = (sdpa() - naive()).abs().max().item()
        row["max_abs_diff_blocked_vs_naive"] = (blocked() - naive()).abs().max().item()
        rows.append(row)
        print(f"  attention T={T}: naive {row['naive_ms']:.1f} ms, SDPA {row['sdpa_causal_ms']:.1f} ms, "
              f"blocked {row['blocked_causal_ms']:.1f} ms", flush=True)
    return rows


def backward_rows(sizes: Sizes, device: torch.device) -> list[dict]:
    """Chapter 11: the backward pass of causal attention, naive (chapter 1's formulas on whole
    matrices, ``attention_grads``) vs blocked (``blocked_backward``, recomputing P from O and L),
    and SDPA's own backward: time, peak tensor memory of the backward call, bytes saved for it."""
    rows = []
    for T in sizes.backward_T:
        torch.manual_seed(0)
        q, k, v, d_out = torch.randn(4, 1, sizes.heads, T, 64, device=device).unbind(0)  # [B, H, T, d] each
        allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        with torch.no_grad():
            out, lse, _ = blocked_forward(q, k, v, sizes.block)
        naive = lambda: attention_grads(q, k, v, d_out, allowed)  # noqa: E731
        blocked = lambda: blocked_backward(q, k, v, out, lse, d_out, sizes.block)  # noqa: E731
        grad_in = [t.clone().requires_grad_() for t in (q, k, v)]
        sdpa_out = F.scaled_dot_product_attention(*grad_in, is_causal=True)
        sdpa = lambda: sdpa_out.backward(d_out, retain_graph=True)  # noqa: E731
        row = {"T": T, "H": sizes.heads, "d": 64, "block": sizes.block}
        with torch.no_grad():
            pair = paired_seconds(wall_seconds(blocked, device), wall_seconds(naive, device), sizes.pair_repeats)
            row["blocked_backward_ms"], row["naive_backward_ms"] = 1e3 * pair["a"], 1e3 * pair["b"]
            row["time_ratio_blocked_vs_naive"] = pair["ratio"]  # median of per-round ratios, with the spread
            for name, fn in (("naive", naive), ("blocked", blocked)):
                row[f"{name}_backward_peak_MiB"] = peak_MiB(fn, device)
            naive_grads, blocked_grads = naive(), blocked()[:3]
        row["sdpa_backward_ms"] = 1e3 * median_seconds(sdpa, device, sizes.repeats)
        p_bytes, ol_bytes = saved_bytes_formula(1, sizes.heads, T, 64)
        row["naive_saved_MiB"], row["blocked_saved_MiB"] = p_bytes / 2**20, ol_bytes / 2**20
        row["peak_ratio_blocked_vs_naive"] = row["blocked_backward_peak_MiB"] / row["naive_backward_peak_MiB"]
        row["grads_within_tolerance"] = all(torch.allclose(a, b, atol=1e-4, rtol=1e-3)
                                            for a, b in zip(naive_grads, blocked_grads))
        rows.append(row)
        print(f"  backward T={T}: naive {row['naive_backward_ms']:.1f} ms, blocked {row['blocked_backward_ms']:.1f} ms,"
              f" SDPA {row['sdpa_backward_ms']:.1f} ms", flush=True)
    return rows


def bf16_rows(sizes: Sizes, device: torch.device, compile_flex: bool = True) -> list[dict]:
    """Chapters 3 and 8 on a GPU, in bfloat16 (H = ``gpu_heads``, d = 128, batch 1): SDPA's flash
    backend with ``is_causal`` against no mask, and FlexAttention (compiled) with a causal and a
    sliding-window block mask against an all-allowed one: time, blocks visited, peak memory.
    ``compile_flex=False`` runs FlexAttention's reference path (a rehearsal of this code on a CPU)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    window = sizes.window
    rules = {"causal": lambda b, h, q, kv: q >= kv,
             "window": lambda b, h, q, kv: (q >= kv) & (q - kv < window),
             "full": lambda b, h, q, kv: q >= 0}
    flex = torch.compile(flex_attention) if compile_flex else flex_attention
    rows = []
    for T in sizes.gpu_T:
        torch.manual_seed(0)
        q, k, v = torch.randn(3, 1, sizes.gpu_heads, T, 128, device=device, dtype=torch.bfloat16).unbind(0)
        row = {"T": T, "H": sizes.gpu_heads, "d": 128, "dtype": "bfloat16", "window": window}
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            causal = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            full = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
            pair = paired_seconds(wall_seconds(full, device), wall_seconds(causal, device), sizes.pair_repeats)
            row["flash_full_ms"], row["flash_causal_ms"] = 1e3 * pair["a"], 1e3 * pair["b"]
            row["flash_full_over_causal"] = pair["ratio"]  # chapter 3's "causal is about 1.7-1.8x faster"
            row["flash_causal_peak_MiB"] = peak_MiB(causal, device)
            reference = causal()
        if T <= sizes.naive_max_T:
            row["naive_ms"] = 1e3 * median_seconds(lambda: causal_attention(q, k, v), device, sizes.repeats)
            row["naive_peak_MiB"] = peak_MiB(lambda: causal_attention(q, k, v), device)
        masks = {name: create_block_mask(rule, B=None, H=None, Q_LEN=T, KV_LEN=T, device=device)
                 for name, rule in rules.items()}
        calls = {name: (lambda m=m: flex(q, k, v, block_mask=m)) for name, m in masks.items()}
        for name, mask in masks.items():
            visited = int(mask.kv_num_blocks.sum()) + int(mask.full_kv_num_blocks.sum())
            row[f"flex_{name}_blocks"] = {"visited": visited, "total": mask.kv_num_blocks.shape[-1] ** 2}
        for name in ("causal", "window"):
            pair = paired_seconds(wall_seconds(calls[name], device), wall_seconds(calls["full"], device),
                                  sizes.pair_repeats)
            row[f"flex_{name}_ms"], row["flex_full_ms"] = 1e3 * pair["a"], 1e3 * pair["b"]
            row[f"flex_{name}_over_full"] = pair["ratio"]
        row["flex_causal_equals_flash"] = torch.allclose(calls["causal"]().float(), reference.float(), atol=2e-2)
        rows.append(row)
        print(f"  bf16 T={T}: flash causal {row['flash_causal_ms']:.2f} ms, full {row['flash_full_ms']:.2f} ms "
              f"(full/causal {row['flash_full_over_causal']['median']:.2f}); flex causal/full "
              f"{row['flex_causal_over_full']['median']:.2f}, window/full {row['flex_window_over_full']['median']:.2f}",
              flush=True)
    return rows


def decode_rows(sizes: Sizes, device: torch.device) -> tuple[list[dict], dict]:
    """Greedy decode tokens/s with and without the KV cache, and the cache's memory."""
    longest = max(sizes.decode_contexts) + sizes.decode_tokens
    config = GPTConfig(vocab_size=256, block_size=longest, **sizes.model)
    torch.manual_seed(0)
    model = GPT(config).to(device).eval()
    rows = []
    for context in sizes.decode_contexts:
        prompt = torch.randint(0, 256, (1, context), device=device)
        pair = paired_seconds(lambda: decode_seconds(model, prompt, sizes.decode_tokens, False, device),
                              lambda: decode_seconds(model, prompt, sizes.decode_tokens, True, device),
                              sizes.pair_repeats)
        timed = {False: pair["a"], True: pair["b"]}
        same = torch.equal(model.generate(prompt, sizes.decode_tokens, use_cache=True),
                           model.generate(prompt, sizes.decode_tokens, use_cache=False))
        row = {"context": context, "new_tokens": sizes.decode_tokens,
               "tokens_per_s_cache": sizes.decode_tokens / timed[True],
               "tokens_per_s_no_cache": sizes.decode_tokens / timed[False],
               "same_tokens": same}
        row["speedup"] = pair["ratio"]["median"]  # median over rounds of (time without cache / time with it)
        row["speedup_spread"] = {k: pair["ratio"][k] for k in ("min", "max")}
        rows.append(row)
        print(f"  decode context={context}: {row['tokens_per_s_cache']:.0f} vs "
              f"{row['tokens_per_s_no_cache']:.0f} tokens/s ({row['speedup']:.1f}x)", flush=True)
    cache = KVCache(config, batch_size=1, max_len=longest, device=device)
    formula = 2 * config.n_layer * 1 * config.n_head * config.head_dim * longest * 4
    memory = {"n_layer": config.n_layer, "n_head": config.n_head, "head_dim": config.head_dim,
              "max_len": longest, "bytes_formula": formula, "bytes_measured": cache.nbytes,
              "parameters": model.num_parameters()}
    return rows, memory


@torch.no_grad()
def decode_seconds(model: GPT, prompt: torch.Tensor, new_tokens: int, use_cache: bool,
                   device: torch.device) -> float:
    """Seconds of ``new_tokens`` greedy decode steps; the prompt's prefill is not timed.

    With the cache a step feeds one token [B, 1] and reads the cached keys and
    values; without it a step runs the whole sequence [B, t] again.
    """
    cache = KVCache(model.config, prompt.size(0), prompt.size(1) + new_tokens, device=device)
    logits, _ = model(prompt, cache=cache if use_cache else None)
    idx = prompt
    sync(device)
    start = time.perf_counter()
    for _ in range(new_tokens):
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # [B, 1]
        idx = torch.cat([idx, next_id], dim=1)
        logits, _ = model(next_id, cache=cache) if use_cache else model(idx)
    sync(device)
    return time.perf_counter() - start


def grader_row() -> dict | None:
    """Command-line grading time of one exercise notebook (when the grader exists)."""
    try:
        from attnlab import grader  # noqa: F401
    except ImportError:
        return None
    notebook = ROOT / "solutions" / "en" / "01-causal-mask.ipynb"
    if not notebook.exists():
        return None
    import subprocess

    start = time.perf_counter()
    import tempfile

    with tempfile.TemporaryDirectory() as reports:
        done = subprocess.run([sys.executable, "-m", "attnlab.grader", "grade", str(notebook), "--out", reports],
                              capture_output=True, text=True, cwd=ROOT)
    row = {"notebook": notebook.relative_to(ROOT).as_posix(), "seconds": time.perf_counter() - start,
           "exit_code": done.returncode}
    if done.returncode:  # a solution that does not grade is a finding: keep what the grader said
        row["output_tail"] = (done.stdout + done.stderr).strip().splitlines()[-6:]
    return row


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [f"# Benchmarks ({result['size']} sizes)", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']} with {m['torch_threads']} threads, "
             f"device {m['device']}" + (f" ({m['gpu']})" if m.get("gpu") else "") + f". Run: {result['date']}"
             + (f", load average {m['load_average_1min']} at the start" if m.get("load_average_1min") is not None
                else "") + ".",
             "", "Times are medians after warm-up. Each causal/full ratio and each speedup is the median "
             "over rounds that time both sides back to back (alternating which goes first), with the "
             "smallest and largest round in brackets, so a burst of other work on the machine moves "
             "single rounds, not the median. Peak memory is counted "
             "exactly by attnlab.memory on the CPU (tensors only; kernel scratch buffers are not seen) "
             "and taken from `torch.cuda.max_memory_allocated` on a GPU.", "",
             "## Attention: naive masked vs SDPA vs blocked tile-skipping (B=1, d=64)", "",
             "| T | H | naive ms | SDPA causal ms | SDPA full ms | causal/full SDPA | blocked causal ms "
             "| blocked full ms | causal/full blocked | naive MiB | SDPA MiB | blocked MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    mib = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    spread = lambda r: f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"  # noqa: E731
    for r in result["attention"]:
        lines.append(f"| {r['T']} | {r['H']} | {r['naive_ms']:.2f} | {r['sdpa_causal_ms']:.2f} | "
                     f"{r['sdpa_full_ms']:.2f} | {spread(r['sdpa_causal_over_full'])} | "
                     f"{r['blocked_causal_ms']:.1f} | {r['blocked_full_ms']:.1f} | "
                     f"{spread(r['blocked_causal_over_full'])} | {mib(r['naive_peak_MiB'])} | "
                     f"{mib(r['sdpa_causal_peak_MiB'])} | {mib(r['blocked_causal_peak_MiB'])} |")
    lines += ["", "## Score FLOPs of blocked causal attention vs full", "",
              "| T | block | tiles skipped / total | counted ratio | theory (T + b) / 2T |", "|---|---|---|---|---|"]
    for r in result["attention"]:
        lines.append(f"| {r['T']} | {r['block']} | {r['tiles_skipped']} / {r['tiles_total']} | "
                     f"{r['flops_ratio_counted']:.4f} | {r['flops_ratio_theory']:.4f} |")
    if result.get("backward"):
        lines += ["", "## Backward pass of causal attention: naive vs blocked vs SDPA (B=1, d=64; chapter 11)", "",
                  "Naive: chapter 1's gradient formulas on whole matrices; blocked: the tile loop that recomputes "
                  "P from O and the logsumexp. Peak = tensors the backward call allocates; saved = what the "
                  "forward keeps for it (P against O and L).", "",
                  "| T | H | naive ms | blocked ms | blocked/naive time | SDPA ms | naive peak MiB | blocked peak MiB "
                  "| blocked/naive peak | saved MiB naive / blocked | grads agree |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["backward"]:
            peak_ratio = r.get("peak_ratio_blocked_vs_naive")
            lines.append(f"| {r['T']} | {r['H']} | {r['naive_backward_ms']:.1f} | {r['blocked_backward_ms']:.1f} | "
                         f"{spread(r['time_ratio_blocked_vs_naive'])} | {r['sdpa_backward_ms']:.1f} | "
                         f"{mib(r['naive_backward_peak_MiB'])} | {mib(r['blocked_backward_peak_MiB'])} | "
                         f"{'-' if peak_ratio is None else f'{peak_ratio:.3f}'} | "
                         f"{r['naive_saved_MiB']:.2f} / {r['blocked_saved_MiB']:.2f} | {r['grads_within_tolerance']} |")
    if result.get("bf16"):
        lines += ["", "## bfloat16 on the GPU: flash and FlexAttention, causal against full (B=1, d=128; chapters 3 and 8)",
                  "", "SDPA under `sdpa_kernel(FLASH_ATTENTION)`; FlexAttention compiled with `torch.compile`, block "
                  "masks from `create_block_mask` (128 x 128 blocks; visited = partial + full blocks). Peak = "
                  "`torch.cuda.max_memory_allocated` during the call.", "",
                  "| T | H | flash causal ms | flash full ms | full/causal flash | naive ms | flash MiB | naive MiB "
                  "| flex causal/full | flex window/full | blocks visited causal / window / total | flex = flash |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["bf16"]:
            naive = (f"{r['naive_ms']:.2f}", mib(r["naive_peak_MiB"])) if "naive_ms" in r else ("-", "-")
            blocks = (f"{r['flex_causal_blocks']['visited']} / {r['flex_window_blocks']['visited']} / "
                      f"{r['flex_full_blocks']['total']}")
            lines.append(f"| {r['T']} | {r['H']} | {r['flash_causal_ms']:.3f} | {r['flash_full_ms']:.3f} | "
                         f"{spread(r['flash_full_over_causal'])} | {naive[0]} | {mib(r['flash_causal_peak_MiB'])} | "
                         f"{naive[1]} | {spread(r['flex_causal_over_full'])} | {spread(r['flex_window_over_full'])} | "
                         f"{blocks} | {r['flex_causal_equals_flash']} |")
    mem = result["kv_cache_memory"]
    lines += ["", f"## Greedy decoding with and without the KV cache (small GPT, {mem['parameters']:,} parameters)",
              "", "| context | new tokens | tokens/s with cache | tokens/s without | speedup | same tokens |",
              "|---|---|---|---|---|---|"]
    for r in result["decode"]:
        lines.append(f"| {r['context']} | {r['new_tokens']} | {r['tokens_per_s_cache']:.0f} | "
                     f"{r['tokens_per_s_no_cache']:.0f} | {r['speedup']:.1f}x "
                     f"({r['speedup_spread']['min']:.1f}-{r['speedup_spread']['max']:.1f}) | {r['same_tokens']} |")
    lines += ["", "## KV-cache memory", "",
              f"2 x layers x heads x head_dim x T x 4 bytes = 2 x {mem['n_layer']} x {mem['n_head']} x "
              f"{mem['head_dim']} x {mem['max_len']} x 4 = {mem['bytes_formula']:,} bytes; "
              f"measured tensor bytes: {mem['bytes_measured']:,}."]
    if result.get("grader"):
        g = result["grader"]
        lines += ["", "## Grader", "", f"Grading `{g['notebook']}` from the command line (fresh kernel): "
                  f"{g['seconds']:.1f} s (exit code {g['exit_code']})."]
        if g.get("output_tail"):
            lines += ["", "Its last lines:", "", "```", *g["output_tail"], "```"]
    lines += ["", "## Causal vs full", "", result["notes"], ""]
    return "\n".join(lines)


def plot(result: dict, path: pathlib.Path) -> None:
    from matplotlib.figure import Figure

    bf16 = result.get("bf16") or []
    fig = Figure(figsize=(13 if bf16 else 10, 3.6), layout="constrained")
    ax1, ax2, ax3, *ax4 = fig.subplots(1, 4 if bf16 else 3)
    Ts = [r["T"] for r in result["attention"]]
    for key, label in (("naive_ms", "naive masked"), ("sdpa_causal_ms", "SDPA is_causal"),
                       ("blocked_causal_ms", "blocked (tile skip)")):
        ax1.plot(Ts, [r[key] for r in result["attention"]], marker="o", label=label)
    ax1.set(xscale="log", yscale="log", xlabel="T", ylabel="ms", title="attention time")
    ax1.legend(fontsize=7)
    for key, label in (("naive_peak_MiB", "naive masked"), ("sdpa_causal_peak_MiB", "SDPA"),
                       ("blocked_causal_peak_MiB", "blocked")):
        values = [r[key] for r in result["attention"]]
        if all(v is not None for v in values):
            ax2.plot(Ts, values, marker="o", label=label)
    ax2.set(xscale="log", yscale="log", xlabel="T", ylabel="MiB", title="peak memory (tensors)")
    ax2.legend(fontsize=7)
    contexts = [r["context"] for r in result["decode"]]
    ax3.plot(contexts, [r["tokens_per_s_cache"] for r in result["decode"]], marker="o", label="KV cache")
    ax3.plot(contexts, [r["tokens_per_s_no_cache"] for r in result["decode"]], marker="o", label="recompute")
    ax3.set(xscale="log", yscale="log", xlabel="context", ylabel="tokens/s", title="greedy decoding")
    ax3.legend(fontsize=7)
    if bf16:
        Ts = [r["T"] for r in bf16]
        for key, label in (("flash_causal_ms", "flash is_causal"), ("flash_full_ms", "flash full"),
                           ("flex_causal_ms", "flex causal"), ("flex_window_ms", "flex window"),
                           ("flex_full_ms", "flex full")):
            ax4[0].plot(Ts, [r[key] for r in bf16], marker="o", label=label)
        ax4[0].set(xscale="log", yscale="log", xlabel="T", ylabel="ms", title="bfloat16 on the GPU")
        ax4[0].legend(fontsize=7)
    fig.savefig(path, dpi=100)


def run(size: str, device: torch.device) -> dict:
    sizes = SIZES[size]
    print(f"benchmarks ({size}) on {device.type}", flush=True)
    attention = attention_rows(sizes, device)
    backward = backward_rows(sizes, device)
    decode, memory = decode_rows(sizes, device)
    bf16 = bf16_rows(sizes, device) if device.type == "cuda" and sizes.gpu_T else []
    last = attention[-1]
    ratio = last["sdpa_causal_over_full"]["median"]
    notes = (f"at T={last['T']}, SDPA with is_causal=True took {ratio:.2f} of the time of SDPA without a mask "
             f"on {device.type}; a ratio near 0.5 means the kernel skips the key tiles above the diagonal, "
             f"near 1.0 that it computes them and masks. The blocked Python version skips them by "
             f"construction: causal/full = {last['blocked_causal_over_full']['median']:.2f} "
             f"against a counted FLOP ratio of {last['flops_ratio_counted']:.2f}.")
    return {"size": size, "date": time.strftime("%Y-%m-%d"), "machine": machine(device), "attention": attention,
            "backward": backward, "bf16": bf16, "decode": decode, "kv_cache_memory": memory, "grader": grader_row() if size != "smoke" else None,
            "notes": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_const", const="full", dest="size", help="bigger sizes")
    size.add_argument("--smoke", action="store_const", const="smoke", dest="size", help="tiny sizes (tests)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--name", default=None, help="result file name (default: cpu or gpu)")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the result files")
    parser.add_argument("--publish", action="store_true", help="also copy the JSON to attnlab/data/")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: 1 on the CPU, where a second thread waits whenever "
                             "another process holds a core; torch's own choice on a GPU; recorded with the results)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.threads is None and device.type == "cpu":
        args.threads = 1
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be at least 1")
        torch.set_num_threads(args.threads)
    result = run(args.size or ("gpu" if device.type == "cuda" else "default"), device)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("gpu" if device.type == "cuda" else "cpu")
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    (out / f"{name}.md").write_text(markdown(result), "utf-8")
    plot(result, out / f"{name}.png")
    if args.publish:  # the chapters quote the CPU file; a GPU run publishes next to it
        published = PUBLISHED if device.type == "cpu" else PUBLISHED.with_name(f"benchmarks_{device.type}.json")
        published.write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    print(f"wrote {out / name}.md, .json, .png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
