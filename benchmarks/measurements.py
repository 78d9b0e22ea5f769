"""The measurements, one list of rows each: naive vs SDPA vs blocked attention (time, peak memory,
counted FLOPs), the backward pass of chapter 11, the bfloat16 rows of a GPU (flash and
FlexAttention), greedy decoding with and without the KV cache, and the grader's time for one
notebook."""

from __future__ import annotations

import math
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

from attnlab.attention import causal_attention
from attnlab.blocked import blocked_attention
from attnlab.blocked_backward import (attention_grads, blocked_backward, blocked_forward,
                                      saved_bytes_formula)
from attnlab.gpt import GPT, GPTConfig, KVCache

from .sizes import Sizes
from .timing import median_seconds, paired_seconds, peak_MiB, sync, wall_seconds

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
        if T == 1024:  # chapter 3: 16 sequences of 1k, as many tokens as FlashAttention-2's runs (a full GPU)
            row["flash_batch"] = flash_batch_row(16, T, sizes, device)
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


def flash_batch_row(B: int, T: int, sizes: Sizes, device: torch.device) -> dict:
    """Chapter 3's occupancy row: SDPA's flash backend, causal against full, at batch B (bfloat16, H =
    ``gpu_heads``, d = 128). With B x T = 16k tokens every tile round is full, as in FlashAttention-2's
    runs, so the ratio shows the causal saving apart from how full the GPU is."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = torch.randn(3, B, sizes.gpu_heads, T, 128, device=device, dtype=torch.bfloat16).unbind(0)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        causal = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        full = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
        pair = paired_seconds(wall_seconds(full, device), wall_seconds(causal, device), sizes.pair_repeats)
    return {"B": B, "T": T, "H": sizes.gpu_heads, "d": 128, "dtype": "bfloat16", "flash_full_ms": 1e3 * pair["a"],
            "flash_causal_ms": 1e3 * pair["b"], "flash_full_over_causal": pair["ratio"]}


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
