"""Exercise 8 (exercises/src/08-masks-in-real-models.md): the causal + key-padding mask of a
left-padded batch, the packed-document mask, the sliding-window mask, grouped-query
attention compared with SDPA's ``enable_gqa``, and a decode step with RoPE and a KV cache.
Masks follow SDPA: True = may attend.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..grader import Case, Task
from ..rope import apply_rope, rope_angles
from . import case_device, per_row_rule, square_rule

EXERCISE = "08-masks-in-real-models"


# --------------------------------------------------------------------------
# 1. padded_causal_mask(keep) -> [B, 1, T, T] bool: causal and the key is a real token
#    keep [B, T] bool, True = real token; the batch is left-padded


def padded_causal_mask(keep):
    B, T = keep.shape
    causal = torch.ones(T, T, dtype=torch.bool, device=keep.device).tril()  # [T, T]
    return causal[None, None] & keep[:, None, None, :]  # [B, 1, T, T]


PADDING_SIZES = [  # (T, lengths); the notebook shows T=3, lengths [3, 1]. Each batch has a padded row.
    (5, [5, 2, 3]), (7, [4, 7]), (4, [1, 4, 2, 3]), (70, [60, 70, 3]), (6, [2, 5, 6, 4, 1]),  # T = 70: no 64 x 64 mask kept
]


def padding_cases(generator):
    cases = []
    for T, lengths in PADDING_SIZES:
        keep = torch.arange(T)[None, :] >= T - torch.tensor(lengths)[:, None]  # [B, T], pads first
        cases.append(Case((keep.to(case_device()),), label=f"T={T}, lengths={lengths}"))
    return cases


def _padding_loop(keep):
    B, T = keep.shape
    allowed = torch.zeros(B, 1, T, T, dtype=torch.bool, device=keep.device)
    for b in range(B):
        for i in range(T):
            for j in range(i + 1):
                allowed[b, 0, i, j] = bool(keep[b, j])
    return allowed


PADDED_CAUSAL_MASK = Task(
    id="ch8.padded_causal_mask", exercise=EXERCISE, reference=padded_causal_mask, cases=padding_cases,
    mutants={
        "queries_padded": per_row_rule(lambda keep, b, q, kv: (kv <= q) & keep[b, q]),
        "strict_diagonal": per_row_rule(lambda keep, b, q, kv: (kv < q) & keep[b, kv]),
        "inverted": per_row_rule(lambda keep, b, q, kv: ~((kv <= q) & keep[b, kv])),
        "padding_ignored": per_row_rule(lambda keep, b, q, kv: kv <= q),
        "not_causal": per_row_rule(lambda keep, b, q, kv: keep[b, kv] & (q >= 0)),
    },
    course_copies=("attnlab.mask_builder.padding_mod", "attnlab.mask_builder.batch_mask", "attnlab.mask_builder.build_mask"),
    alternatives=[
        per_row_rule(lambda keep, b, q, kv: (kv <= q) & keep[b, kv] & keep[b, q]),  # pad queries read nothing anyway
        lambda keep: (torch.tril(torch.ones(keep.size(1), keep.size(1), device=keep.device)).bool()
                      & keep.unsqueeze(1)).unsqueeze(1),
        lambda keep: torch.ones_like(keep[:, None, None, :].expand(-1, 1, keep.size(1), -1)).tril()
        .logical_and(keep[:, None, None, :]),
        _padding_loop,
    ],
)


# --------------------------------------------------------------------------
# 2. document_mask(document_ids) -> [B, 1, T, T] bool: causal and the same document
#    document_ids [B, T] integers, increasing along each packed row


def document_mask(document_ids):
    B, T = document_ids.shape
    causal = torch.ones(T, T, dtype=torch.bool, device=document_ids.device).tril()  # [T, T]
    same = document_ids[:, :, None] == document_ids[:, None, :]  # [B, T, T]
    return (causal & same)[:, None]  # [B, 1, T, T]


DOCUMENT_SIZES = [  # document lengths per row; the notebook shows one row [2, 3]
    [[3, 1, 4]], [[2, 2, 2], [5, 1, 0]], [[1, 6, 2], [4, 4, 1]], [[7], [3, 4]], [[2, 1, 3, 2, 2], [5, 5, 0]],
]


def document_cases(generator):
    cases = []
    for rows in DOCUMENT_SIZES:
        ids = torch.tensor([[d for d, n in enumerate(row) for _ in range(n)] for row in rows])  # [B, T]
        cases.append(Case((ids.to(case_device()),), label=f"B={len(rows)}, T={ids.size(1)}, lengths={rows}"))
    return cases


def _block_diagonal(ids):
    """Correct: one causal block per document, from the lengths of the runs of equal ids."""
    rows = []
    for row in ids:
        _, lengths = torch.unique_consecutive(row, return_counts=True)
        blocks = [torch.ones(n, n, dtype=torch.bool, device=ids.device).tril() for n in lengths.tolist()]
        rows.append(torch.block_diag(*blocks))
    return torch.stack(rows)[:, None]


DOCUMENT_MASK = Task(
    id="ch8.document_mask", exercise=EXERCISE, reference=document_mask, cases=document_cases,
    mutants={
        "not_causal": per_row_rule(lambda ids, b, q, kv: ids[b, q] == ids[b, kv]),
        "causal_only": per_row_rule(lambda ids, b, q, kv: (kv <= q) & (b >= 0)),
        "strict_diagonal": per_row_rule(lambda ids, b, q, kv: (kv < q) & (ids[b, q] == ids[b, kv])),
        "transposed": per_row_rule(lambda ids, b, q, kv: (kv >= q) & (ids[b, q] == ids[b, kv])),
    },
    course_copies=("attnlab.mask_builder.document_mod", "attnlab.mask_builder.batch_mask", "attnlab.mask_builder.build_mask"),
    alternatives=[
        _block_diagonal,
        lambda ids: (ids.unsqueeze(-1) == ids.unsqueeze(-2)).tril().unsqueeze(1),
        per_row_rule(lambda ids, b, q, kv: (kv <= q) & (ids[b, q] - ids[b, kv] == 0)),
    ],
)


# --------------------------------------------------------------------------
# 3. sliding_window_mask(T, W) -> [T, T] bool: query i reads keys i-W+1 .. i


def sliding_window_mask(T, W):
    i = torch.arange(T)[:, None]  # [T, 1] queries
    j = torch.arange(T)[None, :]  # [1, T] keys
    return (j <= i) & (i - j < W)


def window_cases(generator):
    return [Case((T, W), label=f"T={T}, W={W}")
            for T, W in [(7, 2), (9, 4), (5, 1), (8, 8), (70, 3), (6, 9)]]  # T = 70: no 64 x 64 mask kept  # the notebook shows T=6, W=3


def _flex_style(T, W):
    def sliding(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < W)

    q_idx, kv_idx = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    return sliding(0, 0, q_idx, kv_idx)


SLIDING_WINDOW_MASK = Task(
    id="ch8.sliding_window_mask", exercise=EXERCISE, reference=sliding_window_mask, cases=window_cases,
    mutants={
        "off_by_one": square_rule(lambda i, j, W: (j <= i) & (i - j <= W)),
        "not_causal": square_rule(lambda i, j, W: (i - j).abs() < W),
        "future_window": square_rule(lambda i, j, W: (j >= i) & (j - i < W)),
        "causal_flipped": square_rule(lambda i, j, W: (j >= i) & (i - j < W)),  # every later key: the whole upper triangle
        "first_keys": square_rule(lambda i, j, W: (j <= i) & (j < W)),
        "window_too_small": square_rule(lambda i, j, W: (j <= i) & (i - j < W - 1)),
        "window_ignored": lambda T, W: sliding_window_mask(T, 3),  # the worked example's W, hard-coded
    },
    course_copies=("attnlab.mask_builder.build_mask", "attnlab.mask_builder.mask_mod"),
    alternatives=[
        lambda T, W: torch.ones(T, T, dtype=torch.bool).tril().triu(diagonal=-(W - 1)),
        lambda T, W: torch.ones(T, T, dtype=torch.bool).tril() & ~torch.ones(T, T, dtype=torch.bool).tril(-W),
        _flex_style,
        lambda T, W: torch.tensor([[i - W < j <= i for j in range(T)] for i in range(T)], dtype=torch.bool)
        .reshape(T, T),
    ],
)


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


GQA_ATTENTION = Task(
    id="ch8.gqa_attention", exercise=EXERCISE, reference=gqa_attention, cases=gqa_cases,
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
    """Correct: positions [B, T_new] per row (as with a padded batch), and a float mask of -inf."""
    B, t, T_new = q_new.size(0), k_cache.size(2), q_new.size(2)
    positions = (k_cache.size(2) + torch.arange(T_new, device=q_new.device)).expand(B, T_new)
    keys = torch.cat([k_cache, apply_rope(k_new, positions)], dim=2)
    values = torch.cat([v_cache, v_new], dim=2)
    bias = torch.zeros(T_new, t + T_new, device=q_new.device).masked_fill(
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


ROPE_DECODE_STEP = Task(
    id="ch8.rope_decode_step", exercise=EXERCISE, reference=rope_decode_step, cases=rope_cases,
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

TASKS = [PADDED_CAUSAL_MASK, DOCUMENT_MASK, SLIDING_WINDOW_MASK, GQA_ATTENTION, ROPE_DECODE_STEP]
