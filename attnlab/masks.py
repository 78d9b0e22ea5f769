"""Causal masks in every convention the course meets.

Conventions (the whole chapter 1 is about not mixing them up):

* ``allowed`` masks: bool, True = "this query may read this key".
  This is what ``F.scaled_dot_product_attention(attn_mask=...)`` expects.
* ``blocked`` masks: bool, True = "this query must not read this key".
  This is what ``torch.nn.MultiheadAttention(attn_mask=...)`` expects.
* additive masks (a bias): float, 0 where allowed, -inf (or a large negative
  number) where blocked; added to the scores before softmax, as Hugging Face
  models do.
"""

from __future__ import annotations

import torch

from .i18n import tr
from .inputs import whole_number


def causal_allowed(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """[T, T] bool, True on and below the diagonal: query t may read keys 0..t."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def strictly_causal_allowed(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """[T, T] bool that also blocks the diagonal (the wrong mask: row 0 reads nothing)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(diagonal=-1)


def causal_allowed_from_indices(T_q: int, T_kv: int, device=None) -> torch.Tensor:
    """[T_q, T_kv] bool built from index comparisons, ``kv <= q`` (Hugging Face style).

    Queries are the *last* T_q positions of a sequence of length T_kv, so with
    T_q < T_kv (new tokens on top of a cache) the diagonal sits in the
    lower-right corner. With T_q == T_kv it equals :func:`causal_allowed`.
    """
    T_q, T_kv = whole_number("T_q", T_q, low=0), whole_number("T_kv", T_kv, low=0)
    if T_q > T_kv:  # the queries are the last T_q of T_kv positions: at most all of them
        raise ValueError(tr("error.more_queries_than_keys", T_q=T_q, T_kv=T_kv))
    q_idx = torch.arange(T_kv - T_q, T_kv, device=device)[:, None]  # [T_q, 1]
    kv_idx = torch.arange(T_kv, device=device)[None, :]  # [1, T_kv]
    return kv_idx <= q_idx  # [T_q, T_kv]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype = torch.float32,
                  fill: float = float("-inf")) -> torch.Tensor:
    """Bias with 0 where ``allowed`` and ``fill`` elsewhere (pre-filled, then opened up)."""
    bias = torch.full(allowed.shape, fill, dtype=dtype, device=allowed.device)
    return bias.masked_fill(allowed, 0.0)


def to_blocked(allowed: torch.Tensor) -> torch.Tensor:
    """SDPA convention (True = may attend) -> nn.MultiheadAttention convention (True = blocked)."""
    return ~allowed


def to_allowed(blocked: torch.Tensor) -> torch.Tensor:
    """nn.MultiheadAttention convention (True = blocked) -> SDPA convention (True = may attend)."""
    return ~blocked
