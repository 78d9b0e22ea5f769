"""Exercise 3 (exercises/src/03-sdpa-flash-attention.md): calling SDPA correctly (dropout,
``is_causal`` against an explicit mask) and counting the tiles and FLOPs of blocked
causal attention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from ..grader import Case, Contract, Problem, Task, compare_outputs
from . import case_device, tiles_draw

EXERCISE = "03-sdpa-flash-attention"


def _qkv(generator, B, H, T_q, T_kv, d):
    q = torch.randn(B, H, T_q, d, generator=generator)
    k, v = torch.randn(2, B, H, T_kv, d, generator=generator).unbind(0)
    return tuple(t.to(case_device()) for t in (q, k, v))


# --------------------------------------------------------------------------
# 1. attention_forward(q, k, v, dropout_p, training): causal SDPA, dropout only in training


def attention_forward(q, k, v, dropout_p, training):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p if training else 0.0, is_causal=True)


DROPOUT_COPIES = 512  # the training case repeats one input this often; dropout differs per copy
DROPOUT_Z = 6.0  # the mean over the copies may stray this many standard errors from the no-dropout output
PARTIAL_ROWS = 0.01  # dropout on the weights: (almost) no output row is partly zero


def _dropout_judge(q, k, v, p):
    """Training with dropout: random per copy, and unbiased (the mean over copies equals no dropout)."""
    expected = attention_forward(q, k, v, 0.0, False)  # [N, H, T, d]

    def judge(run):
        got = run(1)
        problem = compare_outputs(expected, got)
        if problem is not None and problem.key not in ("grader.values",):
            return problem  # None, type, shape, dtype, device or NaN
        got = got.double()
        if bool((got == got[:1]).all()):  # every copy alike
            return Problem("grader.mutant.ch3.attention_forward.dropout_ignored",
                           detail=Problem("grader.identical_copies", {"n": got.shape[0]}))
        mean, sem = got.mean(dim=0), got.std(dim=0) / math.sqrt(got.shape[0]) + 1e-6
        target = expected[0].double()
        z = ((mean - target) / sem).abs()
        if z.max() > DROPOUT_Z:
            detail = Problem("grader.dropout_mean", {"expected": f"{target.flatten()[int(z.argmax())].item():.4g}",
                                                     "got": f"{mean.flatten()[int(z.argmax())].item():.4g}"})
            if (((mean - (1 - p) * target) / sem).abs().max() <= DROPOUT_Z):
                return Problem("grader.mutant.ch3.attention_forward.unscaled", detail=detail)
            return detail
        return _dropout_pattern(got, p)

    return judge


def _dropout_pattern(got, p):
    """Unbiased, but is it dropout on the weights at rate p? On the weights, an output row is zero
    only as a whole (every weight of the row dropped), and the first query's row (one key) is
    zero with probability p. Dropout on the output or on v zeroes single entries."""
    zero = got == 0  # [copies, H, T, d]
    partial = zero.any(dim=-1) & ~zero.all(dim=-1)  # rows with some entries zero, some not
    if partial.double().mean() > PARTIAL_ROWS:
        return Problem("grader.mutant.ch3.attention_forward.dropout_wrong_place",
                       detail=Problem("grader.dropout_partial_rows", {"share": 100 * partial.double().mean().item()}))
    first = zero[:, :, 0].all(dim=-1).double()  # [copies, H]: the first query's row is zero
    share, n = first.mean().item(), first.numel()
    if abs(share - p) > DROPOUT_Z * math.sqrt(p * (1 - p) / n):
        return Problem("grader.mutant.ch3.attention_forward.dropout_wrong_rate",
                       detail=Problem("grader.dropout_first_row", {"got": 100 * share, "p": f"{p:g}",
                                                                  "expected": 100 * p}))
    return None


def dropout_cases(generator):
    cases = []
    for B, H, T, d, p, training, seed in [(2, 3, 6, 8, 0.3, False, 10), (1, 4, 7, 16, 0.5, False, 11),
                                          (2, 2, 5, 8, 0.0, True, 12), (1, 1, 11, 4, 0.1, False, 13)]:
        cases.append(Case((*_qkv(generator, B, H, T, T, d), p, training), seed=seed,
                          label=f"B={B}, H={H}, T={T}, d={d}, dropout_p={p}, training={training}"))
    q, k, v = _qkv(generator, 1, 2, 6, 6, 4)
    q, k, v = (t.expand(DROPOUT_COPIES, -1, -1, -1).contiguous() for t in (q, k, v))
    cases.append(Case((q, k, v, 0.5, True), seed=14, judge=_dropout_judge(q, k, v, 0.5),
                      label=f"B={DROPOUT_COPIES}, H=2, T=6, d=4, dropout_p=0.5, training=True"))
    return cases


def _manual_dropout(q, k, v, dropout_p, training):
    T = q.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    blocked = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(diagonal=1)
    weights = F.dropout(scores.masked_fill(blocked, float("-inf")).softmax(dim=-1), p=dropout_p, training=training)
    return weights @ v


RATES = (0.1, 0.3, 0.8, 0.5)  # a wrong keep probability or a 1/p scale is right at 0.5 only


def _qkv_draw(d, T_q_edges=(1,), square=True):
    B, H = d.size("B", 1, 3, edges=(1,)), d.size("H", 1, 4, edges=(1,))
    T_kv = d.size("T", 1, 40, edges=(1, 300))
    T_q = T_kv if square else d.size("T_q", 1, T_kv, edges=(1, T_kv))
    head = d.size("d", 1, 16, edges=(1, 64))
    dtype = d.choice("dtype", (torch.float32, torch.float64))
    scale = d.choice("scale", (1.0, 4.0))
    q = d.normal("q", (B, H, T_q, head), dtype, scale)
    k, v = d.normal("k", (B, H, T_kv, head), dtype, scale), d.normal("v", (B, H, T_kv, head), dtype)
    return q, k, v


def dropout_draw(d):
    """Eval mode (no dropout) at any size, dtype and layout; or training, judged by the statistics of 512
    copies of one small input at a rate drawn from several: the first input trains at 0.1, the second at 0.8."""
    training = d.schedule in ("low", "high") or d.flag("training")
    p = {"low": 0.1, "high": 0.8}.get(d.schedule) or d.choice("dropout_p", RATES)
    if not training:
        return Case((*_qkv_draw(d), p, False), seed=7)
    H, T, head = d.size("H", 1, 3, edges=(2,)), d.size("T", 2, 8, edges=(6,)), d.size("d", 2, 8, edges=(4,))
    generator = d.generator("qkv")
    q, k, v = (torch.randn(1, H, T, head, generator=generator).expand(DROPOUT_COPIES, -1, -1, -1).contiguous()
               .to(d.device) for _ in range(3))
    return Case((q, k, v, p, True), seed=d.size("seed", 0, 10**6), judge=_dropout_judge(q, k, v, p),
                label=f"B={DROPOUT_COPIES}, H={H}, T={T}, d={head}, dropout_p={p}, training=True")


def cached_draw(d):
    return Case(_qkv_draw(d, square=False))


ATTENTION_FORWARD = Task(
    id="ch3.attention_forward", exercise=EXERCISE, reference=attention_forward, cases=dropout_cases,
    contract=Contract(draw=dropout_draw, grads=("q", "k", "v")),
    mutants={
        "dropout_in_eval": lambda q, k, v, p, training: F.scaled_dot_product_attention(
            q, k, v, dropout_p=p, is_causal=True),
        "not_causal": lambda q, k, v, p, training: F.scaled_dot_product_attention(
            q, k, v, dropout_p=p if training else 0.0),
        "mask_inverted": lambda q, k, v, p, training: F.scaled_dot_product_attention(
            q, k, v, dropout_p=p if training else 0.0,
            attn_mask=torch.ones(q.size(-2), q.size(-2), dtype=torch.bool, device=q.device).triu(diagonal=1)),
        # judged in the training case (named by _dropout_judge):
        "dropout_ignored": lambda q, k, v, p, training: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "unscaled": lambda q, k, v, p, training: (
            F.scaled_dot_product_attention(q, k, v, is_causal=True) if not training or p == 0 else
            (_manual_dropout(q, k, v, p, True) * (1 - p))),
        "dropout_wrong_place": lambda q, k, v, p, training: F.dropout(
            F.scaled_dot_product_attention(q, k, v, is_causal=True), p=p, training=training),
        "dropout_wrong_rate": lambda q, k, v, p, training: F.scaled_dot_product_attention(
            q, k, v, dropout_p=0.1 if training else 0.0, is_causal=True),
    },
    alternatives=[
        _manual_dropout,
        lambda q, k, v, dropout_p, training: F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p * training,
            attn_mask=torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()),
    ],
)


# --------------------------------------------------------------------------
# 2. attend_new_queries(q, k, v): q holds the LAST T_q of T_kv positions (a KV cache)


def attend_new_queries(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.size(-2), k.size(-2)))


def cached_cases(generator):
    cases = [Case(_qkv(generator, B, H, T_q, T_kv, d), label=f"B={B}, H={H}, T_q={T_q}, T_kv={T_kv}, d={d}")
             for B, H, T_q, T_kv, d in [(2, 2, 3, 7, 8), (1, 3, 1, 6, 4), (1, 2, 5, 5, 8), (2, 1, 2, 9, 4)]]
    q, k, v = _qkv(generator, 1, 2, 4, 70, 8)  # float64 and T_kv = 70: the dtype kept, no 64-position mask
    cases.append(Case(tuple(t.double() for t in (q, k, v)), label="B=1, H=2, T_q=4, T_kv=70, d=8, float64"))
    return cases


def _index_mask_attention(q, k, v):
    T_q, T_kv = q.size(-2), k.size(-2)
    q_pos = torch.arange(T_kv - T_q, T_kv, device=q.device)[:, None]  # the true positions of the queries
    allowed = torch.arange(T_kv, device=q.device)[None, :] <= q_pos
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def _manual_cached(q, k, v):
    T_q, T_kv = q.size(-2), k.size(-2)
    blocked = torch.ones(T_q, T_kv, dtype=torch.bool, device=q.device).triu(diagonal=T_kv - T_q + 1)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    return scores.masked_fill(blocked, float("-inf")).softmax(dim=-1) @ v


ATTEND_NEW_QUERIES = Task(
    id="ch3.attend_new_queries", exercise=EXERCISE, reference=attend_new_queries, cases=cached_cases,
    contract=Contract(draw=cached_draw, grads=("q", "k", "v")),
    mutants={
        "top_left": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "no_mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "mask_inverted": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=~causal_lower_right(q.size(-2), k.size(-2))._materialize(q.device)),
    },
    alternatives=[_index_mask_attention, _manual_cached],
)


# --------------------------------------------------------------------------
# 3. tile_kinds(T, block): [n][n] of "full", "diagonal", "skipped"
# 4. score_flops(T, block, d): FLOPs of q k^T over the computed tiles of one head

TILE_SIZES = [(10, 4, 8), (16, 4, 16), (11, 3, 4), (5, 8, 32), (14, 4, 2), (12, 5, 6)]  # (T, block, d)


def tile_kinds(T, block):
    starts = range(0, T, block)
    kinds = []
    for q_start in starts:
        q_end = min(q_start + block, T)
        row = []
        for k_start in starts:
            k_end = min(k_start + block, T)
            if k_start > q_end - 1:
                row.append("skipped")
            elif k_end - 1 <= q_start:
                row.append("full")
            else:
                row.append("diagonal")
        kinds.append(row)
    return kinds


def tile_cases(generator):
    return [Case((T, block), label=f"T={T}, block={block}") for T, block, _ in TILE_SIZES]


def _tiles_by_index(T, block):
    n = math.ceil(T / block)
    return [["full" if j < i else "diagonal" if j == i else "skipped" for j in range(n)] for i in range(n)]


def tile_kinds_draw(draw):
    """Tiles of at least 2 positions, the last one too: a tile of one query and one key on the diagonal
    would be "full" by one reading and "diagonal" by another."""
    T, block, _ = tiles_draw(draw, None, min_block=2)
    if T % block == 1:
        T += 1
    return Case((T, block), label=f"T={T}, block={block}")


def flops_draw(draw):
    T, block, d = tiles_draw(draw)
    return Case((T, block, d), label=f"T={T}, block={block}, d={d}")


TILE_KINDS = Task(
    id="ch3.tile_kinds", exercise=EXERCISE, reference=tile_kinds, cases=tile_cases,
    contract=Contract(draw=tile_kinds_draw),
    course_copies=("attnlab.blocked.tile_map", "attnlab.blocked.tile_kind"),
    mutants={
        "transposed": lambda T, b: [[{"full": "skipped", "skipped": "full"}.get(kind, kind) for kind in row]
                                    for row in tile_kinds(T, b)],
        "drops_ragged": lambda T, b: [row[:T // b] for row in tile_kinds(T, b)[:T // b]],
        "extra_tile": lambda T, b: _tiles_by_index(T // b * b + b, b),
    },
    alternatives=[
        _tiles_by_index,
        lambda T, b: [["skipped" if j > i else "diagonal" if i == j else "full" for j in range(-(-T // b))]
                      for i in range(-(-T // b))],
    ],
)


def score_flops(T, block, d):
    total = 0
    for q_start in range(0, T, block):
        q_end = min(q_start + block, T)
        for k_start in range(0, T, block):
            k_end = min(k_start + block, T)
            if k_start <= q_end - 1:  # not skipped
                total += 2 * (q_end - q_start) * (k_end - k_start) * d
    return total


def flop_cases(generator):
    return [Case((T, block, d), label=f"T={T}, block={block}, d={d}") for T, block, d in TILE_SIZES]


def _flops_closed_form(T, block, d):
    # query tile i has rows [i*b, min((i+1)*b, T)) and reads every key up to the end of its own tile
    return sum(2 * (min(s + block, T) - s) * min(s + block, T) * d for s in range(0, T, block))


def _count_tiles(T, block, d, kinds=("full", "diagonal"), square=False, n=None):
    n = n if n is not None else math.ceil(T / block)
    total = 0
    for i in range(n):
        for j in range(n):
            kind = "skipped" if j > i else "diagonal" if i == j else "full"
            if kind in kinds:
                rows = block if square else min(block, T - i * block)
                cols = block if square else min(block, T - j * block)
                total += 2 * rows * cols * d
    return total


TILE_FLOPS = Task(
    id="ch3.score_flops", exercise=EXERCISE, reference=score_flops, cases=flop_cases, contract=Contract(draw=flops_draw),
    mutants={
        "square_tiles": lambda T, b, d: _count_tiles(T, b, d, square=True),
        "drops_ragged": lambda T, b, d: _count_tiles(T, b, d, n=T // b),
        "counts_skipped": lambda T, b, d: _count_tiles(T, b, d, kinds=("full", "diagonal", "skipped")),
        "no_factor_2": lambda T, b, d: score_flops(T, b, d) // 2,
        "only_full": lambda T, b, d: _count_tiles(T, b, d, kinds=("full",)),
    },
    alternatives=[
        _flops_closed_form,
        lambda T, b, d: sum(2 * (min(i + b, T) - i) * (min(j + b, T) - j) * d
                            for i, row in zip(range(0, T, b), tile_kinds(T, b))
                            for j, kind in zip(range(0, T, b), row) if kind != "skipped"),
    ],
)

TASKS = [ATTENTION_FORWARD, ATTEND_NEW_QUERIES, TILE_KINDS, TILE_FLOPS]
