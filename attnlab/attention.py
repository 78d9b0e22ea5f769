"""Single-head scaled dot-product attention, written out step by step.

Every function takes ``[..., T, d]`` tensors, so the same code serves one
sequence ``[T, d]``, a batch ``[B, T, d]`` or heads ``[B, H, T, d]``.
"""

from __future__ import annotations

import math

import torch

from .i18n import tr
from .inputs import check_bool_mask, describe
from .masks import causal_allowed


def check_attention_inputs(q, k, v, allowed=None) -> None:
    """A clear error, in the reader's language, for inputs :func:`attention` would fail on deep
    inside torch: q, k, v not floating-point tensors of one dtype, shapes that do not fit
    ([..., T_q, d], [..., T_kv, d], [..., T_kv, d_v]), a mask that is not boolean (True = may read)
    or does not cover the scores [..., T_q, T_kv]."""
    for name, value in (("q", q), ("k", k), ("v", v)):
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            got = describe(value) + (f" {str(value.dtype).removeprefix('torch.')}" if isinstance(value, torch.Tensor) else "")
            raise TypeError(tr("error.attention_float", name=name, got=got))
    if not q.dtype == k.dtype == v.dtype:
        dtypes = [str(t.dtype).removeprefix("torch.") for t in (q, k, v)]
        raise TypeError(tr("error.attention_dtypes", q=dtypes[0], k=dtypes[1], v=dtypes[2]))
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2 or q.size(-1) != k.size(-1) or k.size(-2) != v.size(-2):
        raise ValueError(tr("error.attention_shapes", q=list(q.shape), k=list(k.shape), v=list(v.shape)))
    if allowed is not None:
        if not isinstance(allowed, torch.Tensor):
            raise TypeError(tr("error.mask_type", name="allowed", T_q=q.size(-2), T_kv=k.size(-2), got=describe(allowed)))
        check_bool_mask("allowed", allowed)
        T_q, T_kv = q.size(-2), k.size(-2)
        if allowed.dim() < 2 or allowed.size(-2) not in (1, T_q) or allowed.size(-1) not in (1, T_kv):
            raise ValueError(tr("error.mask_covers", name="allowed", T_q=T_q, T_kv=T_kv, shape=list(allowed.shape)))


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled scores ``q k^T / sqrt(d)``: [..., T_q, d] x [..., T_kv, d] -> [..., T_q, T_kv]."""
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def mask_scores(scores: torch.Tensor, allowed: torch.Tensor,
                fill: float = float("-inf")) -> torch.Tensor:
    """Set every score that ``allowed`` forbids to ``fill`` (default -inf)."""
    return scores.masked_fill(~allowed, fill)


def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Attention weights: mask (if given), then softmax over the keys (last axis).

    For float16/bfloat16 scores PyTorch's softmax accumulates in float32
    inside the kernel and rounds only the weights to the input dtype (chapter 1
    shows it is bit-identical to a float32 softmax rounded at the end).
    """
    if allowed is not None:
        scores = mask_scores(scores, allowed)
    return scores.softmax(dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Explicit attention: ``softmax(mask(q k^T / sqrt(d))) v``; [..., T_q, d_v] out."""
    check_attention_inputs(q, k, v, allowed)
    weights = masked_softmax(attention_scores(q, k), allowed)  # [..., T_q, T_kv]
    return weights @ v


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Explicit causal attention for equally long q, k, v: [..., T, d] -> [..., T, d_v]."""
    T = q.size(-2)
    return attention(q, k, v, causal_allowed(T, device=q.device))


def prefix_by_prefix_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The slow, obviously honest way: position t attends over the prefix 0..t only.

    One unmasked attention call per position; equals :func:`causal_attention`.
    This is what training would cost without a mask (T forward passes).
    """
    T = q.size(-2)
    rows = []
    for t in range(T):
        out_t = attention(q[..., t:t + 1, :], k[..., : t + 1, :], v[..., : t + 1, :])
        rows.append(out_t)  # [..., 1, d_v]
    return torch.cat(rows, dim=-2)  # [..., T, d_v]
