"""Chapter 12's rows: chunked prefill (peak memory and time against the chunk size C), a paged KV
cache against a contiguous one (memory reserved for a mix of request lengths, time of a decode
step through the block table), and speculative decoding with the chapter's trained target and
draft (target passes and time per generated token, against greedy decoding)."""

from __future__ import annotations

import math

import torch

from attnlab.chunked_prefill import prefill_in_chunks
from attnlab.decoding_models import load_model
from attnlab.gpt import GPT, GPTConfig, KVCache
from attnlab.paged_cache import BlockPool, PagedSequence
from attnlab.speculative import speculative_generate
from attnlab.tokenizer import course_tokenizer
from attnlab.tree_speculation import tree_generate

from .sizes import Sizes
from .timing import median_seconds, paired_seconds, peak_MiB, wall_seconds

SPEC_PROMPT = "During training the whole sentence is already in memory, "  # chapter 12's English prompt


def chunked_prefill_rows(sizes: Sizes, device: torch.device) -> list[dict]:
    """An untrained GPT with chapter 1's explicit attention (the scores are tensors) over a prompt of
    ``prefill_T`` tokens, prefilled in chunks of C: peak memory and time against C."""
    T = sizes.prefill_T
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=T, n_head=4, attention="explicit")).to(device).eval()
    prompt = torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(0)).to(device)
    rows = []
    for C in sizes.prefill_chunks:
        def prefill(C=C):
            return prefill_in_chunks(model, prompt, C, KVCache(model.config, 1, T, device=device))

        row = {"T": T, "C": C, "H": 4, "passes": math.ceil(T / C)}
        row["ms"] = 1e3 * median_seconds(prefill, device, sizes.repeats)
        cache = KVCache(model.config, 1, T, device=device)  # allocated before: the peak is what the prefill adds
        row["peak_MiB"] = peak_MiB(lambda: prefill_in_chunks(model, prompt, C, cache), device)
        row["scores_MiB"] = 4 * C * T * 4 / 2**20  # one layer's [1, H, C, T] float32 scores of the last chunk
        rows.append(row)
        print(f"  chunked prefill T={T} C={C}: {row['ms']:.1f} ms, peak {row['peak_MiB']:.2f} MiB", flush=True)
    return rows


def paged_rows(sizes: Sizes, device: torch.device) -> dict:
    """Memory of a contiguous cache (max_len per request) and of pages, on a mix of request lengths;
    the time of decode steps through the block table against the contiguous cache."""
    model = load_model("target").to(device)
    config = model.config
    lengths = torch.randint(8, config.block_size + 1, (sizes.paged_requests,),
                            generator=torch.Generator().manual_seed(0)).tolist()
    per_position = 2 * config.n_layer * config.kv_heads * config.head_dim * 4
    result = {"requests": len(lengths), "max_len": config.block_size, "tokens": sum(lengths),
              "contiguous_bytes": len(lengths) * config.block_size * per_position,
              "used_bytes": sum(lengths) * per_position, "paged": []}
    for block_size in sizes.paged_block_sizes:
        pool = BlockPool(config, sum(-(-n // block_size) for n in lengths), block_size, device=device)
        for n in lengths:
            sequence = PagedSequence(pool)
            sequence.reserve(n)
            sequence.advance(n)
        result["paged"].append({"block_size": block_size, "bytes": pool.bytes_in_use})
    prompt = torch.randint(0, config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(1)).to(device)
    steps = 32

    @torch.no_grad()
    def decode(cache):
        logits, _ = model(prompt, cache=cache)
        for _ in range(steps):
            logits, _ = model(logits[:, -1:].argmax(-1), cache=cache)

    def paged():
        decode(PagedSequence(BlockPool(config, -(-(64 + steps) // 16), 16, device=device)))

    def contiguous():
        decode(KVCache(config, 1, 64 + steps, device=device))

    pair = paired_seconds(wall_seconds(paged, device), wall_seconds(contiguous, device), sizes.pair_repeats)
    result["decode_ms_paged"], result["decode_ms_contiguous"] = 1e3 * pair["a"], 1e3 * pair["b"]
    result["paged_over_contiguous"] = pair["ratio"]
    print(f"  paged cache: {result['paged']}, decode paged/contiguous {pair['ratio']['median']:.2f}", flush=True)
    return result


def speculative_rows(sizes: Sizes, device: torch.device) -> list[dict]:
    """Greedy decoding of the trained target against speculative decoding (draft GPT, prompt lookup,
    a tree of the draft's candidates): target passes and milliseconds per generated token."""
    target, draft = load_model("target").to(device), load_model("draft").to(device)
    prompt = torch.tensor([course_tokenizer().encode(SPEC_PROMPT)], device=device)
    n = sizes.spec_tokens
    greedy = target.generate(prompt, n)
    runs = {"greedy": lambda: (target.generate(prompt, n), None),
            "draft k=4": lambda: speculative_generate(target, prompt, n, 4, draft=draft),
            "prompt lookup k=4": lambda: speculative_generate(target, prompt, n, 4, draft="prompt_lookup"),
            "tree 2x2x1": lambda: tree_generate(target, draft, prompt, n, (2, 2, 1))[:2]}
    rows = []
    for name, run in runs.items():
        tokens, stats = run()
        pair = paired_seconds(wall_seconds(run, device), wall_seconds(lambda: target.generate(prompt, n), device),
                              sizes.pair_repeats)
        row = {"method": name, "new_tokens": n, "same_tokens_as_greedy": bool(torch.equal(tokens, greedy)),
               "target_passes": n if stats is None else stats.target_passes,
               "draft_passes": 0 if stats is None else stats.draft_passes,
               "acceptance": None if stats is None else stats.acceptance_rate,
               "ms_per_token": 1e3 * pair["a"] / n, "time_over_greedy": pair["ratio"]}
        rows.append(row)
        print(f"  speculative {name}: {row['target_passes']} target passes for {n} tokens, "
              f"{row['ms_per_token']:.2f} ms/token ({pair['ratio']['median']:.2f} of greedy)", flush=True)
    return rows


def decoding_rows(sizes: Sizes, device: torch.device) -> dict:
    return {"chunked_prefill": chunked_prefill_rows(sizes, device), "paged": paged_rows(sizes, device),
            "speculative": speculative_rows(sizes, device)}


def markdown_lines(decoding: dict) -> list[str]:
    spread = lambda r: f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"  # noqa: E731
    measured = (f" Measured on {decoding['date']}, apart from the rows above (`--only decoding`)."
                if decoding.get("date") else "")
    lines = ["", "## Chunked prefill: peak memory and time against the chunk size C (chapter 12)", "",
             "An untrained GPT (2 layers, D = 64, H = 4) with chapter 1's explicit attention, so that the scores "
             "are tensors; the prompt is prefilled in chunks of C tokens under the chunk mask. Scores = one layer's "
             "[1, H, C, T] float32 scores of one chunk (C divides T in every size)." + measured, "",
             "| T | C | passes | ms | peak MiB | scores MiB |", "|---|---|---|---|---|---|"]
    for r in decoding["chunked_prefill"]:
        lines.append(f"| {r['T']} | {r['C']} | {r['passes']} | {r['ms']:.1f} | {r['peak_MiB']:.2f} | {r['scores_MiB']:.2f} |")
    p = decoding["paged"]
    lines += ["", f"## Paged against contiguous KV cache (chapter 12's target, {p['requests']} requests of 8 to "
              f"{p['max_len']} tokens)", "",
              "| cache | bytes reserved | share holding tokens |", "|---|---|---|",
              f"| contiguous, max_len = {p['max_len']} | {p['contiguous_bytes']:,} | {p['used_bytes'] / p['contiguous_bytes']:.1%} |"]
    for r in p["paged"]:
        lines.append(f"| paged, block_size = {r['block_size']} | {r['bytes']:,} | {p['used_bytes'] / r['bytes']:.1%} |")
    lines += ["", f"Greedy decoding (64-token prompt, 32 steps) through the block table (blocks of 16, gathered "
              f"per layer and step: the course's `gather_kv` copies the sequence's keys and values, while vLLM's kernels "
              f"read the blocks through the table in place, so the ratio measures that copy, not PagedAttention's "
              f"cost): {p['decode_ms_paged']:.1f} ms against {p['decode_ms_contiguous']:.1f} ms "
              f"with the contiguous cache; paged/contiguous {spread(p['paged_over_contiguous'])}.",
              "", "## Speculative decoding with chapter 12's trained target and draft", "",
              "| method | new tokens | same tokens as greedy | target passes | draft passes | acceptance | ms/token "
              "| time / greedy |", "|---|---|---|---|---|---|---|---|"]
    for r in decoding["speculative"]:
        acceptance = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
        lines.append(f"| {r['method']} | {r['new_tokens']} | {r['same_tokens_as_greedy']} | {r['target_passes']} | "
                     f"{r['draft_passes']} | {acceptance} | {r['ms_per_token']:.2f} | {spread(r['time_over_greedy'])} |")
    return lines
