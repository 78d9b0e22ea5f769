"""Exercise 8, tasks 1 to 3: the causal + key-padding mask of a left-padded batch, the packed-document
mask and the sliding-window mask (SDPA's convention: True = may attend)."""

from __future__ import annotations

import torch

from ...grader import Case, Contract, Task
from .. import case_device, per_row_rule, square_rule

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


def padding_draw(d):
    """keep [B, T] of a left-padded batch: rows of every length from 0 (all padding) to T, T up to 1025."""
    B, T = d.size("B", 1, 5, edges=(1,)), d.size("T", 1, 60, edges=(1, 65, 130))
    lengths = torch.randint(0, T + 1, (B,), generator=d.generator("lengths"))
    if d.flag("full_row"):
        lengths[0] = T
    if d.flag("empty_row"):  # a row of padding only: its queries read nothing
        lengths[-1] = 0
    keep = torch.arange(T)[None, :] >= T - lengths[:, None]
    return Case((d.layout("keep", keep),), label=f"B={B}, T={T}, lengths={lengths.tolist() if B <= 6 else '...'}")


def document_draw(d):
    """Packed rows of documents of 1 token or more, ids increasing with gaps from any start (up to 10**6: past
    int16), long or int32, any layout."""
    B, T = d.size("B", 1, 4, edges=(1,)), d.size("T", 1, 40, edges=(1, 130))
    generator = d.generator("documents")
    starts = torch.rand(B, T, generator=generator) < d.choice("share_new", (0.2, 0.5, 0.02))
    starts[:, 0] = True
    steps = torch.randint(1, 4, (B, T), generator=generator) * starts
    first = torch.randint(0, d.choice("first", (1, 1000, 10**6)), (B, 1), generator=generator)
    ids = (first + steps.cumsum(dim=1) - 1).to(d.choice("dtype", (torch.long, torch.int32)))
    return Case((d.layout("document_ids", ids),), label=f"B={B}, T={T}, ids {ids.dtype}".replace("torch.", ""))


def window_draw(d):
    T = d.size("T", 1, 200, edges=(1, 2, 65, 300))
    return Case((T, d.size("W", 1, T + 5, edges=(1, 2, T, T + 5))))


PADDED_CAUSAL_MASK = Task(
    id="ch8.padded_causal_mask", exercise=EXERCISE, reference=padded_causal_mask, cases=padding_cases,
    contract=Contract(draw=padding_draw),
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
    contract=Contract(draw=document_draw),
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
    contract=Contract(draw=window_draw),
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
