"""Exercise 8, tasks 4 and 5: grouped-query attention written without SDPA's ``enable_gqa``, and a decode
step with RoPE and a KV cache."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...grader import Case, Contract, Task
from ...rope import apply_rope, rope_angles
from .. import case_device

EXERCISE = "08-masks-in-real-models"

# --------------------------------------------------------------------------
# 4. gqa_attention(q, k, v) -> [B, H, T, d]: causal attention where query head h reads
#    key/value head h // (H // H_kv); q [B, H, T, d], k, v [B, H_kv, T, d]


def gqa_attention(q, k, v):
    G = q.size(1) // k.size(1)  # query heads per key/value head
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)  # [B, H, T, d]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


GQA_SIZES = [(2, 6, 3, 5, 8), (1, 8, 2, 7, 4), (3, 4, 1, 6, 8), (2, 6, 2, 4, 16), (1, 3, 3, 9, 4), (2, 8, 4, 5, 8)]
# (B, H, H_kv, T, d); the notebook shows H=4, H_kv=2


def gqa_cases(generator):
    device = case_device()
    cases = []
    for B, H, H_kv, T, d in GQA_SIZES:
        q = torch.randn(B, H, T, d, generator=generator)
        k, v = torch.randn(2, B, H_kv, T, d, generator=generator).unbind(0)
        cases.append(Case((q.to(device), k.to(device), v.to(device)), label=f"B={B}, H={H}, H_kv={H_kv}, T={T}, d={d}"))
    return cases


def _gqa_mutant(repeat="interleave", causal=True):
    def attend(q, k, v):
        G = q.size(1) // k.size(1)
        if repeat == "tile":
            k, v = k.repeat(1, G, 1, 1), v.repeat(1, G, 1, 1)
        elif repeat == "first_head":
            k, v = k[:, :1].expand_as(q), v[:, :1].expand_as(q)
        else:
            k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return attend


def _grouped_einsum(q, k, v):
    """Correct: group the query heads [B, H_kv, G, T, d] and let each group read its K/V head."""
    B, H, T, d = q.shape
    H_kv = k.size(1)
    groups = q.view(B, H_kv, H // H_kv, T, d)
    scores = torch.einsum("bkgqd,bktd->bkgqt", groups, k) / math.sqrt(d)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    return torch.einsum("bkgqt,bktd->bkgqd", weights, v).reshape(B, H, T, d)


def _expand_reshape(q, k, v):
    """Correct: Hugging Face's repeat_kv (expand a new dim, then reshape)."""
    B, H_kv, T, d = k.shape
    G = q.size(1) // H_kv
    k = k[:, :, None].expand(B, H_kv, G, T, d).reshape(B, H_kv * G, T, d)
    v = v[:, :, None].expand(B, H_kv, G, T, d).reshape(B, H_kv * G, T, d)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _index_select(q, k, v):
    """Correct: pick K/V head h // G for every query head h, then an explicit softmax."""
    G = q.size(1) // k.size(1)
    heads = torch.arange(q.size(1), device=q.device) // G
    k, v = k[:, heads], v[:, heads]
    T = q.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v


def _gqa_by_hand(scale=True, softmax_dim=-1):
    def attend(q, k, v):
        G = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
        T = q.size(-2)
        scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        return scores.masked_fill(future, float("-inf")).softmax(dim=softmax_dim) @ v

    return attend


def gqa_draw(d):
    """q [B, H, T, d] and k, v [B, H_kv, T, d] for any group size (MQA and plain attention too), float32 or
    float64, scores up to the hundreds, any layout."""
    B, H_kv, G = d.size("B", 1, 3, edges=(1,)), d.size("H_kv", 1, 4, edges=(1,)), d.size("group", 1, 4, edges=(1, 6))
    T, head = d.size("T", 1, 30, edges=(1, 130)), d.size("d", 1, 16, edges=(1, 32))
    dtype, scale = d.choice("dtype", (torch.float32, torch.float64)), d.choice("scale", (1.0, 6.0))
    q = d.normal("q", (B, H_kv * G, T, head), dtype, scale)
    return Case((q, d.normal("k", (B, H_kv, T, head), dtype, scale), d.normal("v", (B, H_kv, T, head), dtype)),
                label=f"B={B}, H={H_kv * G}, H_kv={H_kv}, T={T}, d={head}, {str(dtype)[6:]}, scale={scale:g}")


def _sdpa_with_fewer_kv_heads(op, args, kwargs):
    """An SDPA kernel (any route to it: F., torch.ops.aten, a module) handed fewer key/value heads than query
    heads: the kernel repeats them itself (what enable_gqa=True asks for)."""
    name = getattr(op, "__name__", "") or str(op)
    if "scaled_dot_product" not in name or len(args) < 3:
        return False
    q, k = args[0], args[1]
    return q.dim() >= 3 and k.dim() == q.dim() and k.size(-3) != q.size(-3)


GQA_ATTENTION = Task(
    id="ch8.gqa_attention", exercise=EXERCISE, reference=gqa_attention, cases=gqa_cases,
    contract=Contract(draw=gqa_draw, grads=("q", "k", "v")),
    forbidden_ops={"enable_gqa": _sdpa_with_fewer_kv_heads},
    mutants={
        "tiled": _gqa_mutant(repeat="tile"),
        "first_head_only": _gqa_mutant(repeat="first_head"),
        "not_causal": _gqa_mutant(causal=False),
        "unscaled": _gqa_by_hand(scale=False),
        "softmax_over_queries": _gqa_by_hand(softmax_dim=-2),
    },
    forbidden={  # the task says: without enable_gqa, repeat the key/value heads yourself
        "enable_gqa": lambda func, args, kwargs: func is F.scaled_dot_product_attention
        and bool(kwargs.get("enable_gqa", False)),
    },
    alternatives=[
        _grouped_einsum,
        _expand_reshape,
        _index_select,
    ],
)


# --------------------------------------------------------------------------
# 5. rope_decode_step(q_new, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache):
#    q_new, k_new, v_new [B, H, T_new, d] are the unrotated projections of the next T_new tokens;
#    k_cache [B, H, t, d] holds the keys of positions 0 .. t-1 already rotated, v_cache the values.
#    Rotate the new query and key by positions t .. t+T_new-1, append, attend causally (lower right).


def rope_decode_step(q_new, k_new, v_new, k_cache, v_cache):
    t, T_new = k_cache.size(2), q_new.size(2)
    positions = torch.arange(t, t + T_new, device=q_new.device)  # [T_new]: the new tokens' true positions
    k_cache = torch.cat([k_cache, apply_rope(k_new, positions)], dim=2)  # [B, H, t + T_new, d]
    v_cache = torch.cat([v_cache, v_new], dim=2)
    allowed = torch.ones(T_new, t + T_new, dtype=torch.bool, device=q_new.device).tril(diagonal=t)  # lower right
    out = F.scaled_dot_product_attention(apply_rope(q_new, positions), k_cache, v_cache, attn_mask=allowed)
    return out, k_cache, v_cache


ROPE_SIZES = [(2, 3, 5, 1, 8), (1, 4, 9, 3, 16), (3, 2, 1, 3, 4), (2, 2, 12, 1, 32), (1, 3, 6, 3, 8)]
# (B, H, t, T_new, d); the notebook shows t=4, T_new=2, d=6


def rope_cases(generator):
    device = case_device()
    cases = []
    for B, H, t, T_new, d in ROPE_SIZES:
        q_new, k_new, v_new = torch.randn(3, B, H, T_new, d, generator=generator).unbind(0)
        k_old, v_cache = torch.randn(2, B, H, t, d, generator=generator).unbind(0)
        k_cache = apply_rope(k_old, torch.arange(t))  # [B, H, t, d], stored already rotated
        args = tuple(x.to(device) for x in (q_new, k_new, v_new, k_cache, v_cache))
        cases.append(Case(args, label=f"B={B}, H={H}, t={t}, T_new={T_new}, d={d}"))
    return cases


def _rope_mutant(start="cache", rotate_q=True, rotate_k=True, rerotate_cache=False, mask="lower_right"):
    def step(q_new, k_new, v_new, k_cache, v_cache):
        t, T_new = k_cache.size(2), q_new.size(2)
        positions = torch.arange(T_new, device=q_new.device) + (t if start == "cache" else 0)
        if rerotate_cache:
            k_cache = apply_rope(k_cache, torch.arange(t, device=q_new.device))
        k_cache = torch.cat([k_cache, apply_rope(k_new, positions) if rotate_k else k_new], dim=2)
        v_cache = torch.cat([v_cache, v_new], dim=2)
        q = apply_rope(q_new, positions) if rotate_q else q_new
        if mask == "upper_left":
            out = F.scaled_dot_product_attention(q, k_cache, v_cache, is_causal=True)
        elif mask == "none":
            out = F.scaled_dot_product_attention(q, k_cache, v_cache)
        else:
            allowed = torch.ones(T_new, t + T_new, dtype=torch.bool, device=q.device).tril(diagonal=t)
            out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=allowed)
        return out, k_cache, v_cache

    return step


def _rope_by_hand(q_new, k_new, v_new, k_cache, v_cache):
    """Correct: the rotation from rope_angles, a preallocated cache, index comparisons, a manual softmax."""
    B, H, t, d = k_cache.shape
    T_new = q_new.size(2)
    angles = rope_angles(torch.arange(t, t + T_new, device=q_new.device), d)  # [T_new, d/2]
    cos, sin = angles.cos(), angles.sin()

    def rotate(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    keys = torch.empty(B, H, t + T_new, d, dtype=k_cache.dtype, device=k_cache.device)
    values = torch.empty_like(keys)
    keys[:, :, :t], keys[:, :, t:] = k_cache, rotate(k_new)
    values[:, :, :t], values[:, :, t:] = v_cache, v_new
    scores = rotate(q_new) @ keys.transpose(-2, -1) / math.sqrt(d)  # [B, H, T_new, t + T_new]
    query_pos = torch.arange(t, t + T_new, device=q_new.device)[:, None]
    key_pos = torch.arange(t + T_new, device=q_new.device)[None, :]
    weights = scores.masked_fill(key_pos > query_pos, float("-inf")).softmax(dim=-1)
    return weights @ values, keys, values


def _rope_row_positions(q_new, k_new, v_new, k_cache, v_cache):
    """Correct: positions [B, T_new] per row (as with a padded batch), and a float mask of -inf in the inputs'
    dtype (SDPA adds a float mask of another dtype wrongly: a float32 mask with float64 inputs gives other values)."""
    B, t, T_new = q_new.size(0), k_cache.size(2), q_new.size(2)
    positions = (k_cache.size(2) + torch.arange(T_new, device=q_new.device)).expand(B, T_new)
    keys = torch.cat([k_cache, apply_rope(k_new, positions)], dim=2)
    values = torch.cat([v_cache, v_new], dim=2)
    bias = torch.zeros(T_new, t + T_new, dtype=q_new.dtype, device=q_new.device).masked_fill(
        torch.ones(T_new, t + T_new, dtype=torch.bool, device=q_new.device).triu(diagonal=t + 1), float("-inf"))
    return F.scaled_dot_product_attention(apply_rope(q_new, positions), keys, values, attn_mask=bias), keys, values


def _rope_one_query_at_a_time(q_new, k_new, v_new, k_cache, v_cache):
    """Correct: decode the new tokens one by one, each query reading the cache up to itself."""
    outs = []
    for i in range(q_new.size(2)):
        position = torch.tensor([k_cache.size(2)], device=q_new.device)
        k_cache = torch.cat([k_cache, apply_rope(k_new[:, :, i:i + 1], position)], dim=2)
        v_cache = torch.cat([v_cache, v_new[:, :, i:i + 1]], dim=2)
        outs.append(F.scaled_dot_product_attention(apply_rope(q_new[:, :, i:i + 1], position), k_cache, v_cache))
    return torch.cat(outs, dim=2), k_cache, v_cache


def rope_draw(d):
    """A cache of 0 or more rotated keys, 1 or more new tokens, head size from 2 (even), float32 or float64."""
    B, H = d.size("B", 1, 3, edges=(1,)), d.size("H", 1, 4, edges=(1,))
    t, T_new, half = d.size("t", 0, 30, edges=(0, 1, 300)), d.size("T_new", 1, 6, edges=(1, 12)), d.size("d/2", 1, 16, edges=(1, 32))
    dtype = d.choice("dtype", (torch.float32, torch.float64))
    q_new, k_new, v_new = (d.normal(name, (B, H, T_new, 2 * half), dtype) for name in ("q_new", "k_new", "v_new"))
    k_old = torch.randn(B, H, t, 2 * half, generator=d.generator("k_cache"), dtype=torch.float64).to(dtype)
    k_cache = d.layout("k_cache", apply_rope(k_old, torch.arange(t)))
    v_cache = d.normal("v_cache", (B, H, t, 2 * half), dtype)
    return Case((q_new, k_new, v_new, k_cache, v_cache),
                label=f"B={B}, H={H}, t={t}, T_new={T_new}, d={2 * half}, {str(dtype)[6:]}")


ROPE_DECODE_STEP = Task(
    id="ch8.rope_decode_step", exercise=EXERCISE, reference=rope_decode_step, cases=rope_cases,
    contract=Contract(draw=rope_draw), output_names=("out", "k_cache", "v_cache"),
    mutants={
        "positions_restart": _rope_mutant(start="zero"),
        "key_not_rotated": _rope_mutant(rotate_k=False),
        "query_not_rotated": _rope_mutant(rotate_q=False),
        "cache_rotated_again": _rope_mutant(rerotate_cache=True),
        "upper_left_causal": _rope_mutant(mask="upper_left"),
        "new_tokens_not_causal": _rope_mutant(mask="none"),
    },
    alternatives=[_rope_by_hand, _rope_row_positions, _rope_one_query_at_a_time],
)
