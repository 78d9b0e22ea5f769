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

With fewer queries than keys (T_q < T_kv), the queries are the *last* T_q
positions: the diagonal sits in the lower-right corner, as with
``torch.nn.attention.bias.causal_lower_right``. Chapter 3 shows
``tile_kind`` and ``blocked_attention`` in the notebook; a test keeps that
code and this module equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import torch

from .i18n import tr
from .inputs import whole_number


@dataclass
class TileCounts:
    full: int = 0  # tiles below the diagonal
    diagonal: int = 0  # tiles cut by the diagonal
    skipped: int = 0  # tiles above the diagonal
    score_flops: int = 0  # multiply-adds x 2 spent on q k^T in the computed tiles

    @property
    def computed(self) -> int:
        return self.full + self.diagonal


def check_blocked_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block, causal: bool) -> None:
    """Clear (localized) errors for inputs ``blocked_attention`` cannot take."""
    whole_number("block", block, low=1)
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(tr("error.qkv_dims", q=tuple(q.shape), k=tuple(k.shape), v=tuple(v.shape)))
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(tr("error.qkv_shapes", q=tuple(q.shape), k=tuple(k.shape), v=tuple(v.shape)))
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(tr("error.more_queries_than_keys", T_q=q.shape[-2], T_kv=k.shape[-2]))


def tile_kind(q_start, q_end, k_start, k_end):
    """"full", "diagonal" or "skipped" for query positions [q_start, q_end) and keys [k_start, k_end)."""
    if k_start > q_end - 1:
        return "skipped"  # even the last query of the tile precedes the first key
    if k_end - 1 <= q_start:
        return "full"  # even the first query of the tile follows the last key
    return "diagonal"


def tile_map(T: int, block: int) -> list[list[str]]:
    """The kind of every (query tile, key tile) pair of a square [T, T] matrix, for figures."""
    starts = range(0, T, block)
    return [[tile_kind(i, min(i + block, T), j, min(j + block, T)) for j in starts] for i in starts]


def blocked_attention(q, k, v, block=64, causal=True):
    """Attention over tiles with an online softmax: [..., T_q, d], [..., T_kv, d], [..., T_kv, d_v]
    -> ([..., T_q, d_v], TileCounts).

    With ``causal=False`` every tile is computed (full attention), which is the
    fair baseline for counting and timing the skipped tiles.
    """
    check_blocked_inputs(q, k, v, block, causal)
    T_q, T_kv, d = q.shape[-2], k.shape[-2], q.shape[-1]
    offset = T_kv - T_q  # query i sits at position offset + i (lower-right alignment)
    counts = TileCounts()
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # [..., T_q, d_v]
    for q_start in range(0, T_q, block):
        q_end = min(q_start + block, T_q)
        q_tile = q[..., q_start:q_end, :] / math.sqrt(d)  # [..., bq, d]
        # running maximum m and sum of exponentials l per row [..., bq]; unnormalised output acc [..., bq, d_v]
        m = torch.full(q_tile.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q_tile.shape[:-1], v.shape[-1], dtype=torch.float32, device=q.device)
        for k_start in range(0, T_kv, block):
            k_end = min(k_start + block, T_kv)
            kind = tile_kind(offset + q_start, offset + q_end, k_start, k_end) if causal else "full"
            if kind == "skipped":
                counts.skipped += 1
                continue  # the keys and values of this tile are never read
            scores = (q_tile @ k[..., k_start:k_end, :].transpose(-2, -1)).float()  # [..., bq, bk]
            counts.score_flops += 2 * (q_end - q_start) * (k_end - k_start) * d * math.prod(q.shape[:-2])
            if kind == "diagonal":
                rows = torch.arange(offset + q_start, offset + q_end, device=q.device)[:, None]  # [bq, 1]
                cols = torch.arange(k_start, k_end, device=q.device)[None, :]  # [1, bk]
                scores = scores.masked_fill(cols > rows, float("-inf"))
                counts.diagonal += 1
            else:
                counts.full += 1
            m_new = torch.maximum(m, scores.amax(dim=-1))  # [..., bq]
            p = torch.exp(scores - m_new[..., None])  # [..., bq, bk]
            correction = torch.exp(m - m_new)  # rescales what was summed under the old maximum
            l = l * correction + p.sum(dim=-1)
            acc = acc * correction[..., None] + p @ v[..., k_start:k_end, :].float()
            m = m_new
        out[..., q_start:q_end, :] = (acc / l[..., None]).to(out.dtype)
    return out, counts
