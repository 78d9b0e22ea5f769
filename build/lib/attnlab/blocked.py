"""Blocked causal attention with an online softmax: what flash attention does, in
plain PyTorch, so that every step can be read and counted.

Queries and keys are cut into tiles of ``block`` positions. For query tile i
and key tile j:

* j entirely below the diagonal  -> computed in full, no mask needed;
* j on the diagonal              -> computed with an element-wise causal mask;
* j entirely above the diagonal  -> skipped: its keys and values are never read.

Each query row keeps a running maximum ``m``, a running sum ``l`` of
exponentials and an unnormalised output ``acc``; a new tile rescales them
(the "online softmax"), so no row of T scores is ever materialized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class TileCounts:
    full: int = 0  # tiles below the diagonal
    diagonal: int = 0  # tiles cut by the diagonal
    skipped: int = 0  # tiles above the diagonal
    score_flops: int = 0  # multiply-adds x 2 spent on q k^T in the computed tiles

    @property
    def computed(self) -> int:
        return self.full + self.diagonal


def tile_kind(q_start: int, q_end: int, k_start: int, k_end: int) -> str:
    """"full", "diagonal" or "skipped" for queries [q_start, q_end) and keys [k_start, k_end)."""
    if k_start > q_end - 1:
        return "skipped"  # even the last query of the tile precedes the first key
    if k_end - 1 <= q_start:
        return "full"  # even the first query of the tile follows the last key
    return "diagonal"


def tile_map(T: int, block: int) -> list[list[str]]:
    """The kind of every (query tile, key tile) pair, for figures."""
    starts = range(0, T, block)
    return [[tile_kind(i, min(i + block, T), j, min(j + block, T)) for j in starts] for i in starts]


def blocked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int = 64,
                      causal: bool = True) -> tuple[torch.Tensor, TileCounts]:
    """Attention over tiles with an online softmax: [..., T, d] -> [..., T, d_v].

    With ``causal=False`` every tile is computed (full attention), which is the
    fair baseline for counting and timing the skipped tiles.
    """
    T, d = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    counts = TileCounts()
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for q_start in range(0, T, block):
        q_end = min(q_start + block, T)
        q_tile = q[..., q_start:q_end, :] * scale  # [..., bq, d]
        m = torch.full(q_tile.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)  # [..., bq]
        l = torch.zeros_like(m)  # [..., bq]
        acc = torch.zeros(*q_tile.shape[:-1], v.shape[-1], dtype=torch.float32, device=q.device)
        for k_start in range(0, T, block):
            k_end = min(k_start + block, T)
            kind = tile_kind(q_start, q_end, k_start, k_end) if causal else "full"
            if kind == "skipped":
                counts.skipped += 1
                continue
            scores = (q_tile @ k[..., k_start:k_end, :].transpose(-2, -1)).float()  # [..., bq, bk]
            counts.score_flops += 2 * (q_end - q_start) * (k_end - k_start) * d * _batch_size(q)
            if kind == "diagonal":
                rows = torch.arange(q_start, q_end, device=q.device)[:, None]
                cols = torch.arange(k_start, k_end, device=q.device)[None, :]
                scores = scores.masked_fill(cols > rows, float("-inf"))
                counts.diagonal += 1
            else:
                counts.full += 1
            m_new = torch.maximum(m, scores.amax(dim=-1))  # [..., bq]
            p = torch.exp(scores - m_new[..., None])  # [..., bq, bk]
            correction = torch.exp(m - m_new)  # rescale what was summed with the old maximum
            l = l * correction + p.sum(dim=-1)
            acc = acc * correction[..., None] + p @ v[..., k_start:k_end, :].float()
            m = m_new
        out[..., q_start:q_end, :] = (acc / l[..., None]).to(out.dtype)
    return out, counts


def _batch_size(x: torch.Tensor) -> int:
    return math.prod(x.shape[:-2])
