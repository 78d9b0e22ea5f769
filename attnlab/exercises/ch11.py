"""Exercise 11 (exercises/src/11-backward-pass.md): the softmax backward dS from P, dP and
D; one tile of the blocked backward pass; the bytes autograd saves; the FLOPs of the
causal backward pass.
"""

from __future__ import annotations

import math

import torch

from ..grader import Case, Contract, Task, compare_outputs
from . import case_device, tiles_draw

EXERCISE = "11-backward-pass"


def _randn(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(case_device())


def _float32_too(value):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.double()
    if isinstance(value, (tuple, list)):
        return type(value)(_float32_too(v) for v in value)
    return value


def compare_float64(expected, got):
    """The cases are float64 (the intro says so); a result in float32 (a tensor made without dtype=) is
    compared by its values, with the same tolerances: the task is about the formula, not the dtype."""
    return compare_outputs(expected, _float32_too(got))


def compare_tile(expected, got):
    """As compare_float64, the returned values named dq, dk, dv."""
    return compare_outputs(expected, _float32_too(got), names=("dq", "dk", "dv"))


# --------------------------------------------------------------------------
# 1. score_grad(a, da, d_out, out): dS = A * (dA - D), D = rowsum(dO * O)


def score_grad(a, da, d_out, out):
    D = (d_out * out).sum(dim=-1, keepdim=True)
    return a * (da - D)


def _softmax_case(generator, B, T, d, masked):
    scores = _randn(generator, B, T, T)
    if masked:
        future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
    p = scores.softmax(dim=-1)
    v, d_out = _randn(generator, B, T, d), _randn(generator, B, T, d)
    out = p @ v
    return p, d_out @ v.transpose(-2, -1), d_out, out


def score_grad_draw(d):
    """A, dA, dO, O of a [B, T, T] softmax (T from 1, causal or not, scores up to 30), float64, any layout."""
    B, T, head = d.size("B", 1, 4, edges=(1,)), d.size("T", 1, 20, edges=(1, 64)), d.size("d", 1, 8, edges=(1, 32))
    generator = d.generator("values")
    scores = torch.randn(B, T, T, generator=generator, dtype=torch.float64) * d.choice("scale", (1.0, 30.0))
    if d.flag("causal"):
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(diagonal=1), float("-inf"))
    p = scores.softmax(dim=-1)
    v, d_out = (torch.randn(B, T, head, generator=generator, dtype=torch.float64) for _ in range(2))
    args = (p, d_out @ v.transpose(-2, -1), d_out, p @ v)
    return Case(tuple(d.layout(name, t) for name, t in zip(("a", "da", "d_out", "out"), args)))


def score_grad_cases(generator):
    return [Case(_softmax_case(generator, B, T, d, masked), label=f"B={B}, T={T}, d={d}, causal={masked}")
            for B, T, d, masked in [(1, 5, 3, True), (2, 6, 4, False), (3, 7, 2, True), (1, 9, 5, True)]]


SCORE_GRAD = Task(
    id="ch11.score_grad", exercise=EXERCISE, reference=score_grad, cases=score_grad_cases, compare=compare_float64,
    contract=Contract(draw=score_grad_draw),
    course_copies=("attnlab.blocked_backward.attention_grads", "attnlab.blocked_backward.ByHand.backward"),
    mutants={
        "forgets_d": lambda p, dp, d_out, out: p * dp,
        "forgets_p": lambda p, dp, d_out, out: dp - (d_out * out).sum(dim=-1, keepdim=True),
        "d_outside": lambda p, dp, d_out, out: p * dp - (d_out * out).sum(dim=-1, keepdim=True),
        "d_over_queries": lambda p, dp, d_out, out: p * (dp - (p * dp).sum(dim=-2, keepdim=True)),
        # D of shape [B, T] lines up with the keys (what dp - D does at B = 1; at B > 1 it raises)
        "d_without_keepdim": lambda p, dp, d_out, out: p * (dp - (d_out * out).sum(dim=-1)[:, None, :]),
        "d_mean": lambda p, dp, d_out, out: p * (dp - (d_out * out).mean(dim=-1, keepdim=True)),
    },
    alternatives=[
        lambda p, dp, d_out, out: p * (dp - (p * dp).sum(dim=-1, keepdim=True)),  # rowsum(P * dP) = rowsum(dO * O)
        lambda p, dp, d_out, out: p * dp - p * torch.einsum("bqd,bqd->bq", d_out, out)[..., None],
        lambda p, dp, d_out, out: (torch.diag_embed(p) - p[..., :, None] * p[..., None, :]).matmul(
            dp[..., None]).squeeze(-1),  # the softmax Jacobian, row by row
    ],
)


# --------------------------------------------------------------------------
# 2. tile_backward(q, k, v, d_out, lse, D, blocked): one tile's shares of dQ, dK, dV


def tile_backward(q, k, v, d_out, lse, D, blocked):
    scale = 1 / math.sqrt(q.size(-1))
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(blocked, float("-inf"))
    p = torch.exp(scores - lse[:, None])
    dv = p.T @ d_out
    ds = p * (d_out @ v.T - D[:, None])
    return ds @ k * scale, ds.T @ q * scale, dv


def _tile_case(generator, T, block, i, j, d, scale=1.0, block_k=None):
    """The tile (query tile i, key tile j) of a causal [T, T] attention with its true L and D; with
    ``scale``, the scores grow with the key's position (a blocked score is thousands above L: exp of it
    overflows float64). ``block_k``: key tiles of another size (a tile that is not square)."""
    block_k = block if block_k is None else block_k
    q, k, v, d_out = (_randn(generator, T, d) for _ in range(4))
    if scale != 1:  # every later key scores higher: the blocked (future) scores lie far above L
        q, k = q.abs() + 1, (k.abs() + 1) * torch.arange(T, device=k.device)[:, None] * scale
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    p = (q @ k.T / math.sqrt(d)).masked_fill(~allowed, float("-inf"))
    lse, p = p.logsumexp(dim=-1), p.softmax(dim=-1)
    D = (d_out * (p @ v)).sum(dim=-1)
    qs, ks = slice(i * block, (i + 1) * block), slice(j * block_k, (j + 1) * block_k)
    return q[qs], k[ks], v[ks], d_out[qs], lse[qs], D[qs], ~allowed[qs, ks]


def tile_draw(d):
    """A tile of a causal attention that is computed (not skipped): query and key tiles of their own sizes, so
    that tiles are not square and the last ones are short; scores up to the thousands (a blocked score far above
    L), head size from 1, float64."""
    block, block_k = d.size("block_q", 1, 6, edges=(1, 4)), d.size("block_k", 1, 6, edges=(1, 3))
    T = d.size("T", 1, 24, edges=(1, 11))
    i = d.size("tile_q", 0, (T - 1) // block, edges=(0, (T - 1) // block))
    last_key = min((i + 1) * block, T) - 1  # key tiles starting after it are skipped
    j = d.size("tile_k", 0, last_key // block_k, edges=(0, last_key // block_k))
    head, scale = d.size("d", 1, 6, edges=(1, 16)), d.choice("scale", (1.0, 400.0))
    args = _tile_case(d.generator("values"), T, block, i, j, head, scale, block_k)
    return Case(tuple(d.layout(name, t.to(d.device)) for name, t in
                      zip(("q", "k", "v", "d_out", "lse", "D", "blocked"), args)))


def tile_cases(generator):
    cases = [Case(_tile_case(generator, T, block, i, j, d, scale),
                  label=f"T={T}, block={block}, tile=({i},{j}), d={d}" + (f", scores*{scale:g}" if scale != 1 else ""))
             for T, block, i, j, d, scale in [(12, 4, 1, 1, 4, 1), (12, 4, 2, 0, 3, 1), (15, 5, 2, 2, 2, 400),
                                              (16, 4, 3, 1, 5, 1), (10, 5, 1, 1, 6, 1)]]
    # a short tile that is not square: queries 8..10 (tiles of 4), keys 9..10 (tiles of 3); its blocked part is
    # not a triangle of its own corner
    cases.append(Case(_tile_case(generator, 11, 4, 2, 3, 3, 1.0, block_k=3),
                      label="T=11, block_q=4, block_k=3, tile=(2,3), d=3"))
    return cases


def _exp_then_mask(q, k, v, d_out, lse, D, blocked):
    """exp(S - L) of every score, then multiplied by the mask: where a blocked score is far above L,
    exp gives inf, and inf * 0 is NaN."""
    scale = 1 / math.sqrt(q.size(-1))
    p = torch.exp(q @ k.T * scale - lse[:, None]) * ~blocked
    ds = p * (d_out @ v.T - D[:, None])
    return ds @ k * scale, ds.T @ q * scale, p.T @ d_out


def _unmasked_tile(q, k, v, d_out, lse, D, blocked):
    return tile_backward(q, k, v, d_out, lse, D, torch.zeros_like(blocked))


def _tile_with_softmax(q, k, v, d_out, lse, D, blocked):
    scale = q.size(-1) ** -0.5
    scores = torch.where(blocked, float("-inf"), torch.einsum("qd,kd->qk", q, k) * scale)
    p = (scores - lse[:, None]).exp()
    ds = p * (torch.einsum("qd,kd->qk", d_out, v) - D[:, None])
    return torch.einsum("qk,kd->qd", ds, k) * scale, torch.einsum("qk,qd->kd", ds, q) * scale, \
        torch.einsum("qk,qd->kd", p, d_out)


def _zero_filled_tile(q, k, v, d_out, lse, D, blocked):
    """The blocked scores set to 0 instead of -inf: exp(0 - L) is not 0, the future gets weight."""
    scale = 1 / math.sqrt(q.size(-1))
    p = torch.exp((q @ k.T * scale).masked_fill(blocked, 0.0) - lse[:, None])
    ds = p * (d_out @ v.T - D[:, None])
    return ds @ k * scale, ds.T @ q * scale, p.T @ d_out


def _d_by_key(q, k, v, d_out, lse, D, blocked):
    """D subtracted without [:, None]: on a square tile it broadcasts along the keys, D of query j at column j."""
    scale = 1 / math.sqrt(q.size(-1))
    p = torch.exp((q @ k.T * scale).masked_fill(blocked, float("-inf")) - lse[:, None])
    ds = p * (d_out @ v.T - D)
    return ds @ k * scale, ds.T @ q * scale, p.T @ d_out


def _lse_by_key(q, k, v, d_out, lse, D, blocked):
    """lse subtracted without [:, None]: on a square tile it broadcasts along the keys, L of query j at column j."""
    scale = 1 / math.sqrt(q.size(-1))
    p = torch.exp((q @ k.T * scale).masked_fill(blocked, float("-inf")) - lse)
    ds = p * (d_out @ v.T - D[:, None])
    return ds @ k * scale, ds.T @ q * scale, p.T @ d_out


def _local_d(q, k, v, d_out, lse, D, blocked):
    """D computed from the tile alone, rowsum(dO * (A v)) over this tile's keys: D belongs to the whole row."""
    scale = 1 / math.sqrt(q.size(-1))
    p = torch.exp((q @ k.T * scale).masked_fill(blocked, float("-inf")) - lse[:, None])
    local = (d_out * (p @ v)).sum(dim=-1)
    return tile_backward(q, k, v, d_out, lse, local, blocked)


TILE_BACKWARD = Task(
    id="ch11.tile_backward", exercise=EXERCISE, reference=tile_backward, cases=tile_cases,
    contract=Contract(draw=tile_draw), output_names=("dq", "dk", "dv"),
    mutants={
        "blocked_inverted": lambda q, k, v, d_out, lse, D, blocked: tile_backward(q, k, v, d_out, lse, D, ~blocked),
        "local_d": _local_d,
        "swapped_dq_dk": lambda q, k, v, d_out, lse, D, blocked: (
            lambda dq, dk, dv: (dk, dq, dv))(*tile_backward(q, k, v, d_out, lse, D, blocked)),
        "forgets_d": lambda q, k, v, d_out, lse, D, blocked: tile_backward(q, k, v, d_out, lse, torch.zeros_like(D),
                                                                         blocked),
        "scale_wrong_side": lambda q, k, v, d_out, lse, D, blocked: tuple(
            g * q.size(-1) if n < 2 else g for n, g in enumerate(tile_backward(q, k, v, d_out, lse, D, blocked))),
        "unscaled_grads": lambda q, k, v, d_out, lse, D, blocked: tuple(
            g * math.sqrt(q.size(-1)) if n < 2 else g
            for n, g in enumerate(tile_backward(q, k, v, d_out, lse, D, blocked))),
        "unmasked_p": _unmasked_tile,
        "softmax_of_tile": lambda q, k, v, d_out, lse, D, blocked: tile_backward(
            q, k, v, d_out, (q @ k.T / math.sqrt(q.size(-1))).masked_fill(blocked, float("-inf")).logsumexp(-1),
            D, blocked),
        "lse_without_none": _lse_by_key,
        "masked_with_zero": _zero_filled_tile,
        "d_without_none": _d_by_key,
        "exp_then_mask": _exp_then_mask,
    },
    compare=compare_tile,
    course_copies=("attnlab.blocked_backward.tile_grads", "attnlab.blocked_backward.blocked_backward",
                   "attnlab.blocked_backward.ByHand.backward", "attnlab.blocked_backward.attention_grads"),
    alternatives=[_tile_with_softmax],
)


# --------------------------------------------------------------------------
# 3. saved_bytes(B, H, T, d, element_size): (explicit attention's P, blocked attention's O and L)


def saved_bytes(B, H, T, d, element_size):
    lse_size = 8 if element_size == 8 else 4  # L in float32, in float64 for float64 inputs
    return B * H * T * T * element_size, B * H * T * d * element_size + B * H * T * lse_size


def saved_draw(d):
    """Sizes up to a real model's (a context of 131072, 128 heads: counts far above 2**31), element sizes 2, 4 and
    8 (L in float64 for float64 inputs)."""
    B, H = d.size("B", 1, 16, edges=(1, 64)), d.size("H", 1, 32, edges=(1, 128))
    T, head = d.size("T", 1, 4096, edges=(1, 131072)), d.size("d", 1, 128, edges=(1, 256))
    return Case((B, H, T, head, d.choice("element_size", (4, 2, 8))))


def saved_cases(generator):
    return [Case((B, H, T, d, size), label=f"B={B}, H={H}, T={T}, d={d}, element_size={size}")
            for B, H, T, d, size in [(1, 2, 16, 8, 4), (2, 4, 64, 16, 2), (3, 1, 10, 32, 4), (1, 6, 128, 64, 2)]]


SAVED_BYTES = Task(
    id="ch11.saved_bytes", exercise=EXERCISE, reference=saved_bytes, cases=saved_cases,
    contract=Contract(draw=saved_draw), output_names=("explicit", "blocked"),
    course_copies=("attnlab.blocked_backward.saved_bytes_formula", "attnlab.blocked_backward.saved_tensors"),
    mutants={
        "forgets_lse": lambda B, H, T, d, s: (B * H * T * T * s, B * H * T * d * s),
        "forgets_heads": lambda B, H, T, d, s: (B * T * T * s, B * T * d * s + B * T * 4),
        "lse_per_tile_entry": lambda B, H, T, d, s: (B * H * T * T * s, B * H * T * d * s + B * H * T * T * 4),
        "elements_not_bytes": lambda B, H, T, d, s: (B * H * T * T, B * H * T * d + B * H * T),
        "lse_in_input_dtype": lambda B, H, T, d, s: (B * H * T * T * s, B * H * T * (d + 1) * s),
        "bits_not_bytes": lambda B, H, T, d, s: (8 * B * H * T * T * s, 8 * (B * H * T * d * s + B * H * T * 4)),
    },
    alternatives=[
        lambda B, H, T, d, s: (math.prod((B, H, T, T)) * s, math.prod((B, H, T)) * (d * s + max(s, 4))),
        lambda B, H, T, d, s: (math.prod((B, H, T, T)) * s, B * H * T * d * s + B * H * T * (8 if s == 8 else 4)),
    ],
)


# --------------------------------------------------------------------------
# 4. backward_flops(T, block, d): matrix-product FLOPs of the causal blocked backward, one head


def flops_draw(d):
    T, block, dim = tiles_draw(d)
    return Case((T, block, dim), label=f"T={T}, block={block}, d={dim}")


def backward_flops(T, block, d):
    total = 0
    for q_start in range(0, T, block):
        q_end = min(q_start + block, T)
        for k_start in range(0, T, block):
            k_end = min(k_start + block, T)
            if k_start <= q_end - 1:  # not above the diagonal
                total += 5 * 2 * (q_end - q_start) * (k_end - k_start) * d  # S, dV, dP, dQ, dK
    return total


FLOP_SIZES = [(10, 4, 8), (16, 4, 16), (11, 3, 4), (10, 2, 2), (14, 4, 2), (12, 5, 6)]  # (T, block, d)


def flop_cases(generator):
    return [Case((T, block, d), label=f"T={T}, block={block}, d={d}") for T, block, d in FLOP_SIZES]


def _flops(T, block, d, products=5, skip=True, square=False, per_product=2, diagonal_half=False,
           diagonal=True, whole_tiles=False):
    n = T // block if whole_tiles else math.ceil(T / block)
    total = 0
    for i in range(n):
        for j in range(n if not skip else (i + 1 if diagonal else i)):
            rows = block if square else min(block, T - i * block)
            cols = block if square else min(block, T - j * block)
            flops = products * per_product * rows * cols * d
            total += flops // 2 if diagonal_half and i == j else flops
    return total


BACKWARD_FLOPS = Task(
    id="ch11.backward_flops", exercise=EXERCISE, reference=backward_flops, cases=flop_cases,
    contract=Contract(draw=flops_draw),
    course_copies=("attnlab.blocked_backward.blocked_backward", "attnlab.blocked_backward.blocked_forward",
                   "attnlab.blocked_backward.PassCounts"),
    mutants={
        "counts_skipped": lambda T, b, d: _flops(T, b, d, skip=False),
        "forward_flops": lambda T, b, d: _flops(T, b, d, products=2),
        "no_recompute": lambda T, b, d: _flops(T, b, d, products=4),
        "square_tiles": lambda T, b, d: _flops(T, b, d, square=True),
        "multiply_adds": lambda T, b, d: _flops(T, b, d, per_product=1),
        "diagonal_half": lambda T, b, d: _flops(T, b, d, diagonal_half=True),
        "skips_diagonal": lambda T, b, d: _flops(T, b, d, diagonal=False),
        "whole_tiles_only": lambda T, b, d: _flops(T, b, d, whole_tiles=True),
    },
    alternatives=[
        _flops,
        lambda T, b, d: 10 * d * sum((min(s + b, T) - s) * min(s + b, T) for s in range(0, T, b)),
    ],
)

TASKS = [SCORE_GRAD, TILE_BACKWARD, SAVED_BYTES, BACKWARD_FLOPS]
