"""Rotary position embeddings (RoPE, Su et al. 2021, https://arxiv.org/abs/2104.09864).

Instead of adding a position vector to the input, RoPE rotates every query and
key by an angle proportional to its absolute position. The d features of a
head are split into d/2 pairs; pair i of the vector at position p is rotated by
the angle ``p * theta_i`` with ``theta_i = base ** (-2i / d)`` (fast-turning
pairs for i near 0, slow ones for large i).

A rotation by ``a`` followed by the dot product with a vector rotated by ``b``
depends only on ``a - b``, so the score ``q_m . k_n`` depends on the
positions only through ``m - n``: RoPE is relative where it matters.

Pairs are (feature i, feature i + d/2), the "rotate half" layout of GPT-NeoX
and Hugging Face's Llama; Meta's original Llama code pairs neighbours
(2i, 2i+1). Both are the same rotation up to a fixed permutation of features.
"""

from __future__ import annotations

import torch

from .i18n import tr
from .inputs import describe


def rope_angles(positions: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """Rotation angles ``positions * theta_i``: [..., T] positions -> [..., T, d/2]."""
    if d % 2:
        raise ValueError(tr("ch8.err_rope_odd", d=d))
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32, device=positions.device) / d)  # [d/2]
    return positions.to(torch.float32)[..., None] * theta  # [..., T, d/2]


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys ``x`` [B, H, T, d] by their positions: [T], or [B, T] per row."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2:
        raise TypeError(tr("ch8.err_rope_x", got=describe(x) + (f" {x.dtype}" if isinstance(x, torch.Tensor) else "")))
    positions = torch.as_tensor(positions, device=x.device) if not isinstance(positions, torch.Tensor) else positions
    if (positions.is_floating_point() or positions.dim() not in (1, 2) or positions.size(-1) != x.size(-2)
            or (positions.dim() == 2 and x.dim() != 4)):
        got = describe(positions) + f" {positions.dtype}"  # the dtype too: float positions are a common slip
        raise ValueError(tr("ch8.err_rope_positions", T=x.size(-2), got=got))
    angles = rope_angles(positions, x.size(-1), base)  # [T, d/2] or [B, T, d/2]
    if angles.dim() == 3:
        angles = angles[:, None]  # [B, 1, T, d/2]: the same positions for every head
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)  # the two features of each pair, [..., T, d/2] each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # [..., T, d]
