"""The report of a benchmark run: its tables as markdown (``benchmarks/results/<name>.md``) and
its figure (``.png``: attention time and peak memory, decoding, the bfloat16 rows on a GPU)."""

from __future__ import annotations

import pathlib


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
    if result.get("decoding"):
        from .decoding import markdown_lines

        lines += markdown_lines(result["decoding"])
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
    label_the_measured_sizes(ax1, Ts)
    label_the_measured_sizes(ax2, Ts)
    label_the_measured_sizes(ax3, contexts)
    if bf16:
        Ts = [r["T"] for r in bf16]
        for key, label in (("flash_causal_ms", "flash is_causal"), ("flash_full_ms", "flash full"),
                           ("flex_causal_ms", "flex causal"), ("flex_window_ms", "flex window"),
                           ("flex_full_ms", "flex full")):
            ax4[0].plot(Ts, [r[key] for r in bf16], marker="o", label=label)
        ax4[0].set(xscale="log", yscale="log", xlabel="T", ylabel="ms", title="bfloat16 on the GPU")
        ax4[0].legend(fontsize=7)
        label_the_measured_sizes(ax4[0], Ts)
    fig.savefig(path, dpi=100)


def label_the_measured_sizes(ax, sizes: list[int]) -> None:
    """Ticks at the sizes measured, written 1k, 4k, ..., and no labels on minor ticks: a log axis
    spanning less than a decade labels them (2x10^3, 3x10^3, ...), and their labels run into each
    other. A y axis spanning under two decades gets plain labels at 1, 2 and 5 times a power of
    ten instead, so it keeps some."""
    import math

    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1024:g}k" if x >= 1024 else f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())
    low, high = ax.get_ylim()
    if math.log10(high / low) < 2:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
