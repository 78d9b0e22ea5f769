"""Exercise 6 (exercises/src/06-kv-cache.md): one decode step with a KV cache, graded
against full recomputation over several steps; the decode mask for several new
queries on a cache; the memory a cache takes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..grader import Case, Contract, Task, watched_models
from ..gpt import GPTConfig, KVCache, SelfAttention
from ..multihead import merge_heads, split_heads
from . import case_device

EXERCISE = "06-kv-cache"


# --------------------------------------------------------------------------
# 1. decode_step(attn, position_embedding, x, k_cache, v_cache) -> (out, k_cache, v_cache)
#    One layer: token embedding + learned position -> attn (attnlab.gpt.SelfAttention).
#    x [B, T, D] holds the token embeddings of every position so far (the last one is new),
#    k_cache, v_cache [B, H, T-1, d] the keys and values of the first T-1 positions.
#    Returns the new position's output [B, 1, D] and the caches [B, H, T, d].


def _project(attn, h):
    return [split_heads(proj(h), attn.n_head) for proj in (attn.q_proj, attn.k_proj, attn.v_proj)]


def decode_step(attn, position_embedding, x, k_cache, v_cache):
    t = k_cache.size(-2)  # the new token's position: it comes after the T-1 cached ones
    h = x[:, -1:] + position_embedding(torch.tensor([t], device=x.device))  # [B, 1, D]
    q, k, v = _project(attn, h)  # [B, H, 1, d]
    k_cache = torch.cat([k_cache, k], dim=-2)  # [B, H, T, d]
    v_cache = torch.cat([v_cache, v], dim=-2)
    out = F.scaled_dot_product_attention(q, k_cache, v_cache)  # one query may read every key: no mask
    return attn.out_proj(merge_heads(out)), k_cache, v_cache


DECODE_SIZES = [(1, 3, 1, 16, 2), (2, 5, 3, 12, 3), (3, 1, 4, 8, 2), (2, 7, 2, 24, 4), (1, 4, 5, 16, 4)]
# (B, prompt, steps, D, H); the notebook's example is B=1, prompt=2, D=8, H=2


def decode_cases(generator):
    device = case_device()
    cases = []
    for B, prompt, steps, D, H in DECODE_SIZES:
        state = {f"{name}.weight": (torch.randn(D, D, generator=generator) / math.sqrt(D)).to(device)
                 for name in ("q_proj", "k_proj", "v_proj", "out_proj")}
        positions = torch.randn(prompt + steps, D, generator=generator).to(device)  # [max_len, D]
        x = torch.randn(B, prompt + steps, D, generator=generator).to(device)  # [B, T_total, D]
        cases.append(Case((state, positions, x, prompt, H),
                          label=f"B={B}, prompt={prompt}, steps={steps}, D={D}, H={H}"))
    return cases


def _is_step_result(got):
    return isinstance(got, (tuple, list)) and len(got) == 3 and all(isinstance(g, torch.Tensor) for g in got)


def _run_decode(fn, state, positions, x, prompt, n_head):
    """Prefill the prompt's keys and values, then call ``fn`` once per new token, feeding it the
    caches it returned. Returns (the outputs of every step [B, steps, D], the last k_cache, v_cache);
    a step that returns something else than three tensors ends the run with what it returned.

    A returned cache of the wrong length cannot be fed to the next step: that step gets the
    right cache instead, and the last step's cache is compared (and its length reported).
    """
    B, T_total, D = x.shape
    attn = SelfAttention(GPTConfig(vocab_size=1, block_size=T_total, n_head=n_head, n_embd=D)).to(x.device)
    attn.load_state_dict(state)
    attn.eval().requires_grad_(False)  # gradients on for the learner's code, none needed for the weights
    with watched_models(attn):  # its weights changed, or put in training mode: named
        return _decode_steps(fn, attn, positions, x, prompt)


def _decode_steps(fn, attn, positions, x, prompt):
    B, T_total, D = x.shape
    position_embedding = nn.Embedding.from_pretrained(positions)  # [max_len, D]
    _, k_all, v_all = _project(attn, x + positions)  # [B, H, T_total, d]: full recomputation
    k_cache, v_cache = k_all[:, :, :prompt], v_all[:, :, :prompt]  # the prefill
    outs = []
    for t in range(prompt, T_total):
        got = fn(attn, position_embedding, x[:, :t + 1], k_cache, v_cache)
        if not _is_step_result(got):
            return got
        out, k_got, v_got = got
        if tuple(out.shape) != (B, 1, D):
            return got
        outs.append(out)
        right = tuple(k_all[:, :, :t + 1].shape)
        k_cache = k_got if tuple(k_got.shape) == right else k_all[:, :, :t + 1]
        v_cache = v_got if tuple(v_got.shape) == right else v_all[:, :, :t + 1]
    return torch.cat(outs, dim=1), k_got, v_got


def _recompute_everything(attn, position_embedding, x, k_cache, v_cache):
    """Correct, only slower: ignore the cache and run causal attention over every position."""
    T = x.size(1)
    q, k, v = _project(attn, x + position_embedding(torch.arange(T, device=x.device)))  # [B, H, T, d]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return attn.out_proj(merge_heads(out))[:, -1:], k, v


def _course_cache(attn, position_embedding, x, k_cache, v_cache):
    """Correct: the course's KVCache and SelfAttention.forward, which append and attend."""
    B, T, D = x.shape
    cache = KVCache(attn.config, B, T, device=x.device, dtype=x.dtype)
    cache.k[0, :, :, :T - 1], cache.v[0, :, :, :T - 1] = k_cache, v_cache
    cache.advance(T - 1)
    out = attn(x[:, -1:] + position_embedding.weight[cache.pos], cache)  # [B, 1, D]
    return out, cache.k[0, :, :, :T], cache.v[0, :, :, :T]


def _einsum_preallocated(attn, position_embedding, x, k_cache, v_cache):
    """Correct: a cache written into a larger buffer, and attention with einsum and softmax."""
    B, H, t, d = k_cache.shape
    h = x[:, -1:] + position_embedding.weight[x.size(1) - 1]
    q, k, v = _project(attn, h)
    keys, values = k_cache.new_empty(B, H, t + 1, d), v_cache.new_empty(B, H, t + 1, d)
    keys[:, :, :t], keys[:, :, t:] = k_cache, k
    values[:, :, :t], values[:, :, t:] = v_cache, v
    weights = (torch.einsum("bhqd,bhkd->bhqk", q, keys) / math.sqrt(d)).softmax(dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, values)
    return attn.out_proj(merge_heads(out)), keys, values


def _course_attend(attn, position_embedding, x, k_cache, v_cache):
    """Correct: torch.concat and the course's SelfAttention.attend (no mask for one query)."""
    pos = torch.full((1,), x.size(1) - 1, dtype=torch.long, device=x.device)
    q, k, v = _project(attn, x[:, -1:] + position_embedding(pos))
    k_cache, v_cache = torch.concat((k_cache, k), dim=2), torch.concat((v_cache, v), dim=2)
    return attn.out_proj(merge_heads(attn.attend(q, k_cache, v_cache))), k_cache, v_cache


def _step_mutant(position=None, order="append", causal=False, keep_old_v=False, keep_old_k=False, attend_old=False,
                 out_proj=True, scale=True):
    def step(attn, position_embedding, x, k_cache, v_cache):
        t = k_cache.size(-2) if position is None else position
        h = x[:, -1:] + (0 if t == "none" else position_embedding(torch.tensor([t], device=x.device)))
        q, k, v = _project(attn, h)
        if order == "prepend":
            k_all, v_all = torch.cat([k, k_cache], dim=-2), torch.cat([v, v_cache], dim=-2)
        else:
            k_all, v_all = torch.cat([k_cache, k], dim=-2), torch.cat([v_cache, v], dim=-2)
        keys, values = (k_cache, v_cache) if attend_old else (k_all, v_all)
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=causal, scale=None if scale else 1.0)
        merged = merge_heads(out)
        return (attn.out_proj(merged) if out_proj else merged), k_cache if keep_old_k else k_all, \
            v_cache if keep_old_v else v_all

    return step


def decode_draw(d):
    """A layer of width H * d, a prompt of 1 token or more, 1 to 5 steps, x at scale 1 or 5 (float32)."""
    H, head = d.size("H", 1, 4, edges=(1,)), d.size("d", 1, 8, edges=(1, 16))
    B, prompt, steps = d.size("B", 1, 3, edges=(1,)), d.size("prompt", 1, 8, edges=(1, 40)), d.size("steps", 1, 4, edges=(1,))
    D = H * head
    generator = d.generator("weights")
    state = {f"{name}.weight": (torch.randn(D, D, generator=generator) / math.sqrt(D)).to(d.device)
             for name in ("q_proj", "k_proj", "v_proj", "out_proj")}
    positions = torch.randn(prompt + steps, D, generator=generator).to(d.device)
    x = torch.randn(B, prompt + steps, D, generator=generator) * d.choice("scale", (1.0, 5.0))
    return Case((state, positions, x.to(d.device), prompt, H),
                label=f"B={B}, prompt={prompt}, steps={steps}, D={D}, H={H}")


DECODE_STEP = Task(
    id="ch6.decode_step", exercise=EXERCISE, reference=decode_step, cases=decode_cases, call=_run_decode,
    contract=Contract(draw=decode_draw, examples=4), output_names=("out", "k_cache", "v_cache"),
    input_names=("state", "positions", "x", "prompt", "n_head"),
    mutants={
        "wrong_order": _step_mutant(order="prepend"),
        "top_left": _step_mutant(causal=True),
        "positions_from_zero": _step_mutant(position=0),
        "no_position": _step_mutant(position="none"),
        "caches_not_appended": _step_mutant(keep_old_k=True, keep_old_v=True),
        "keys_not_appended": _step_mutant(keep_old_k=True),
        "values_not_appended": _step_mutant(keep_old_v=True),
        "old_cache_only": _step_mutant(attend_old=True),
        "no_out_proj": _step_mutant(out_proj=False),
        "unscaled": _step_mutant(scale=False),
    },
    course_copies=("attnlab.gpt.SelfAttention.forward",),  # its attend (attention over the keys) is fine
    alternatives=[_recompute_everything, _einsum_preallocated, _course_attend],
)


# --------------------------------------------------------------------------
# 2. decode_mask(T_q, T_kv) -> [T_q, T_kv] bool: the LAST T_q of T_kv positions, causal
#    (lower-right: key j is allowed for query i when j <= i + T_kv - T_q)


def decode_mask(T_q, T_kv):
    return torch.ones(T_q, T_kv, dtype=torch.bool).tril(diagonal=T_kv - T_q)


def mask_cases(generator):
    return [Case((T_q, T_kv), label=f"T_q={T_q}, T_kv={T_kv}")
            for T_q, T_kv in [(1, 6), (3, 7), (4, 4), (2, 9), (5, 8), (3, 80)]]  # T_kv = 80: no 64-key mask kept  # the notebook shows (2, 4)


def decode_mask_draw(d):
    T_kv = d.size("T_kv", 1, 200, edges=(1, 2, 65, 300, 4099))  # 4099: positions past 2048 (float16 rounds them)
    return Case((d.size("T_q", 1, min(T_kv, 200), edges=(1, T_kv if T_kv <= 300 else 3)), T_kv))


DECODE_MASK = Task(
    id="ch6.decode_mask", exercise=EXERCISE, reference=decode_mask, cases=mask_cases,
    contract=Contract(draw=decode_mask_draw),
    course_copies=("attnlab.masks.causal_allowed_from_indices", "attnlab.mask_builder.build_mask",
                   "attnlab.mask_builder.batch_mask"),
    mutants={
        "top_left": lambda T_q, T_kv: torch.ones(T_q, T_kv, dtype=torch.bool).tril(),
        "strictly_lower": lambda T_q, T_kv: torch.ones(T_q, T_kv, dtype=torch.bool).tril(diagonal=T_kv - T_q - 1),
        "transposed": lambda T_q, T_kv: torch.ones(T_q, T_kv, dtype=torch.bool).triu(diagonal=T_kv - T_q),
        "inverted": lambda T_q, T_kv: torch.ones(T_q, T_kv, dtype=torch.bool).triu(diagonal=T_kv - T_q + 1),
        "no_mask": lambda T_q, T_kv: torch.ones(T_q, T_kv, dtype=torch.bool),
        "offset_sign": lambda T_q, T_kv: torch.ones(T_q, T_kv, dtype=torch.bool).tril(diagonal=T_q - T_kv),
    },
    alternatives=[
        lambda T_q, T_kv: torch.arange(T_kv)[None, :] <= torch.arange(T_kv - T_q, T_kv)[:, None],
        lambda T_q, T_kv: ~torch.ones(T_q, T_kv, dtype=torch.bool).triu(diagonal=T_kv - T_q + 1),
        lambda T_q, T_kv: torch.ones(T_kv, T_kv, dtype=torch.bool).tril()[-T_q:],
        lambda T_q, T_kv: torch.tensor([[j <= i + T_kv - T_q for j in range(T_kv)] for i in range(T_q)]),
    ],
)


# --------------------------------------------------------------------------
# 3. kv_cache_bytes(config, batch_size, seq_len, dtype) -> int:
#    2 (K and V) x n_layer x batch x H_kv x head_dim x seq_len x bytes per number;
#    H_kv = config.kv_heads, the key/value heads (n_head unless the model shares them: GQA, MQA)


def kv_cache_bytes(config, batch_size, seq_len, dtype):
    bytes_per_number = torch.finfo(dtype).bits // 8
    return 2 * config.n_layer * batch_size * config.kv_heads * config.head_dim * seq_len * bytes_per_number


BYTE_SIZES = [  # (n_layer, n_head, n_kv_head, n_embd, batch, seq_len, dtype); the notebook shows the course's model.
    # No two mistakes give the same number on one case: n_layer, batch and n_head avoid 2 and 8.
    # The last two share key/value heads (GQA 12 -> 3, MQA 6 -> 1): the cache counts H_kv, not n_head.
    (3, 4, None, 32, 5, 100, torch.float32), (6, 12, None, 384, 1, 500, torch.float16),
    (4, 3, None, 48, 6, 48, torch.bfloat16), (12, 12, None, 768, 4, 1024, torch.float32),
    (1, 6, None, 48, 3, 30, torch.float16), (5, 5, None, 40, 7, 9, torch.bfloat16),
    (5, 12, 3, 384, 3, 70, torch.float16), (3, 6, 1, 96, 5, 40, torch.float32),
]


def bytes_cases(generator):
    cases = []
    for L, H, H_kv, D, B, T, dtype in BYTE_SIZES:
        config = GPTConfig(vocab_size=100, block_size=4096, n_layer=L, n_head=H, n_embd=D, n_kv_head=H_kv)
        kv = "" if H_kv is None else f"n_kv_head={H_kv}, "
        cases.append(Case((config, B, T, dtype),
                          label=f"n_layer={L}, n_head={H}, {kv}n_embd={D}, batch_size={B}, seq_len={T}, "
                                f"{str(dtype).removeprefix('torch.')}"))
    return cases


def _bytes(factor=2, layers=True, batch=True, width="head_dim", length="seq_len", size="bytes"):
    def count(config, batch_size, seq_len, dtype):
        per_number = {"bytes": torch.finfo(dtype).bits // 8, "bits": torch.finfo(dtype).bits, "float32": 4}[size]
        numbers = {"head_dim": config.kv_heads * config.head_dim, "n_embd": config.n_head * config.n_embd,
                   "query_heads": config.n_head * config.head_dim}[width]
        return (factor * (config.n_layer if layers else 1) * (batch_size if batch else 1) * numbers
                * (seq_len if length == "seq_len" else config.block_size) * per_number)

    return count


def bytes_draw(d):
    """A model up to a real one's size (96 layers, 128 heads, a context of 131072, a batch of 64: counts far
    above 2**31), heads shared (GQA, MQA) or not, any float dtype."""
    head_dim = d.size("head_dim", 1, 128, edges=(1, 64, 128))
    H = d.size("n_head", 1, 32, edges=(1, 128))
    H_kv = d.choice("kv", ("all", "one", "some"))
    H_kv = {"all": None, "one": 1, "some": max(h for h in range(1, H + 1) if H % h == 0 and (h < H or H == 1))}[H_kv]
    config = GPTConfig(vocab_size=100, block_size=131072, n_layer=d.size("n_layer", 1, 32, edges=(1, 96)),
                       n_head=H, n_embd=H * head_dim, n_kv_head=H_kv)
    B, T = d.size("batch_size", 1, 16, edges=(1, 64)), d.size("seq_len", 1, 4096, edges=(1, 131072))
    dtype = d.choice("dtype", (torch.float32, torch.float16, torch.bfloat16, torch.float64))
    kv = "" if H_kv is None else f"n_kv_head={H_kv}, "
    return Case((config, B, T, dtype), label=f"n_layer={config.n_layer}, n_head={H}, {kv}n_embd={config.n_embd}, "
                                             f"batch_size={B}, seq_len={T}, {str(dtype).removeprefix('torch.')}")


KV_CACHE_BYTES = Task(
    id="ch6.kv_cache_bytes", exercise=EXERCISE, reference=kv_cache_bytes, cases=bytes_cases,
    contract=Contract(draw=bytes_draw), input_names=("config", "batch_size", "seq_len", "dtype"),
    course_copies=("attnlab.gpt.KVCache.nbytes",),
    mutants={
        "no_factor_2": _bytes(factor=1),
        "heads_twice": _bytes(width="n_embd"),
        "no_layers": _bytes(layers=False),
        "no_batch": _bytes(batch=False),
        "bits_not_bytes": _bytes(size="bits"),
        "always_float32": _bytes(size="float32"),
        "block_size": _bytes(length="block_size"),
        "query_heads": _bytes(width="query_heads"),
    },
    alternatives=[
        lambda config, B, T, dtype: 2 * config.n_layer * B * T * config.kv_heads * config.head_dim * dtype.itemsize,
        lambda config, B, T, dtype: torch.empty(0, dtype=dtype).element_size() * 2 * math.prod(
            (config.n_layer, B, config.kv_heads, T, config.n_embd // config.n_head)),
    ],
)

TASKS = [DECODE_STEP, DECODE_MASK, KV_CACHE_BYTES]
