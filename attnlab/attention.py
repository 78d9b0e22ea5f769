"""Single-head scaled dot-product attention, written out step by step.

Every function takes ``[..., T, d]`` tensors, so the same code serves one
sequence ``[T, d]``, a batch ``[B, T, d]`` or heads ``[B, H, T, d]``.
"""

from __future__ import annotations

import math

import torch

from .masks import causal_allowed


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
