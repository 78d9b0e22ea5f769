"""Exercise 8 (exercises/src/08-masks-in-real-models.md): the causal + key-padding mask of a
left-padded batch, the packed-document mask, the sliding-window mask, and grouped-query
attention compared with SDPA's ``enable_gqa``. Masks follow SDPA: True = may attend.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..grader import Case, Task
from ..mask_builder import and_masks, batch_mask, build_mask, document_mod, mask_mod, padding_mod
from . import case_device

EXERCISE = "08-masks-in-real-models"


def _grid(B, T, device):
    """Index grids for a [B, 1, T, T] mask: b [B, 1, 1, 1], q [1, 1, T, 1], kv [1, 1, 1, T]."""
    b = torch.arange(B, device=device)[:, None, None, None]
    q = torch.arange(T, device=device)[None, None, :, None]
    kv = torch.arange(T, device=device)[None, None, None, :]
    return b, q, kv


# --------------------------------------------------------------------------
# 1. padded_causal_mask(keep) -> [B, 1, T, T] bool: causal and the key is a real token
#    keep [B, T] bool, True = real token; the batch is left-padded


def padded_causal_mask(keep):
    B, T = keep.shape
    causal = torch.ones(T, T, dtype=torch.bool, device=keep.device).tril()  # [T, T]
    return causal[None, None] & keep[:, None, None, :]  # [B, 1, T, T]


PADDING_SIZES = [  # (T, lengths); the notebook shows T=3, lengths [3, 1]. Each batch has a padded row.
    (5, [5, 2, 3]), (7, [4, 7]), (4, [1, 4, 2, 3]), (9, [6, 9, 3]), (6, [2, 5, 6, 4, 1]),
]


def padding_cases(generator):
    cases = []
    for T, lengths in PADDING_SIZES:
        keep = torch.arange(T)[None, :] >= T - torch.tensor(lengths)[:, None]  # [B, T], pads first
        cases.append(Case((keep.to(case_device()),), label=f"T={T}, lengths={lengths}"))
    return cases


def _padding_rule(rule):
    def mask(keep):
        b, q, kv = _grid(*keep.shape, keep.device)
        return rule(keep, b, q, kv).expand(keep.size(0), 1, keep.size(1), keep.size(1)).clone()

    return mask


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
        "queries_padded": _padding_rule(lambda keep, b, q, kv: (kv <= q) & keep[b, q]),
        "strict_diagonal": _padding_rule(lambda keep, b, q, kv: (kv < q) & keep[b, kv]),
        "inverted": _padding_rule(lambda keep, b, q, kv: ~((kv <= q) & keep[b, kv])),
        "padding_ignored": _padding_rule(lambda keep, b, q, kv: kv <= q),
        "not_causal": _padding_rule(lambda keep, b, q, kv: keep[b, kv] & (q >= 0)),
    },
    alternatives=[
        lambda keep: batch_mask(and_masks(mask_mod("causal"), padding_mod(keep)), *keep.shape, device=keep.device),
        _padding_rule(lambda keep, b, q, kv: (kv <= q) & keep[b, kv] & keep[b, q]),  # pad queries read nothing anyway
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


def _document_rule(rule):
    def mask(ids):
        b, q, kv = _grid(*ids.shape, ids.device)
        return rule(ids, b, q, kv).expand(ids.size(0), 1, ids.size(1), ids.size(1)).clone()

    return mask


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
        "not_causal": _document_rule(lambda ids, b, q, kv: ids[b, q] == ids[b, kv]),
        "causal_only": _document_rule(lambda ids, b, q, kv: (kv <= q) & (b >= 0)),
        "strict_diagonal": _document_rule(lambda ids, b, q, kv: (kv < q) & (ids[b, q] == ids[b, kv])),
        "transposed": _document_rule(lambda ids, b, q, kv: (kv >= q) & (ids[b, q] == ids[b, kv])),
    },
    alternatives=[
        lambda ids: batch_mask(and_masks(mask_mod("causal"), document_mod(ids)), *ids.shape, device=ids.device),
        _block_diagonal,
        lambda ids: (ids.unsqueeze(-1) == ids.unsqueeze(-2)).tril().unsqueeze(1),
        _document_rule(lambda ids, b, q, kv: (kv <= q) & (ids[b, q] - ids[b, kv] == 0)),
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
            for T, W in [(7, 2), (9, 4), (5, 1), (8, 8), (10, 3), (6, 9)]]  # the notebook shows T=6, W=3


def _window_rule(rule):
    def mask(T, W):
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        return rule(i, j, W).expand(T, T).clone()

    return mask


def _flex_style(T, W):
    def sliding(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < W)

    q_idx, kv_idx = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    return sliding(0, 0, q_idx, kv_idx)


SLIDING_WINDOW_MASK = Task(
    id="ch8.sliding_window_mask", exercise=EXERCISE, reference=sliding_window_mask, cases=window_cases,
    mutants={
        "off_by_one": _window_rule(lambda i, j, W: (j <= i) & (i - j <= W)),
        "not_causal": _window_rule(lambda i, j, W: (i - j).abs() < W),
        "future_window": _window_rule(lambda i, j, W: (j >= i) & (j - i < W)),
        "first_keys": _window_rule(lambda i, j, W: (j <= i) & (j < W)),
        "window_too_small": _window_rule(lambda i, j, W: (j <= i) & (i - j < W - 1)),
    },
    alternatives=[
        lambda T, W: build_mask("sliding_window", T, window=W),
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
    alternatives=[
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        _grouped_einsum,
        _expand_reshape,
        _index_select,
    ],
)

TASKS = [PADDED_CAUSAL_MASK, DOCUMENT_MASK, SLIDING_WINDOW_MASK, GQA_ATTENTION]
