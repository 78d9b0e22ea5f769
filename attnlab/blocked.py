"""Blocked causal attention with an online softmax: what flash attention does, in
plain PyTorch, so that every step can be read and counted.

Queries and keys are cut into tiles of ``block`` positions. For query tile i
and key tile j:

* j entirely below the diagonal  -> computed in full, no mask needed;
* j on the diagonal              -> computed with an element-wise causal mask;
* j entirely above the diagonal  -> skipped: its keys and values are never read.

Each query row keeps a running maximum ``m``, a running sum ``l`` of
exponentials and an unnormalised output ``acc`` (:class:`OnlineSoftmax`); a
new tile rescales them, so no row of T scores is ever materialized.

The tiles are visited by :func:`attend_tiles`, which knows each row's and
column's position in the sequence. Chapter 3's :func:`blocked_attention`
calls it once with positions 0..T-1; ring attention (``attnlab.ring``) calls
it once per key block that arrives from another process, with the positions
of whatever layout the shards use.
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

    def __add__(self, other: TileCounts) -> TileCounts:
        return TileCounts(self.full + other.full, self.diagonal + other.diagonal,
                          self.skipped + other.skipped, self.score_flops + other.score_flops)


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


class OnlineSoftmax:
    """Softmax-weighted sum over keys that arrive tile by tile, for a group of query rows."""

    def __init__(self, rows: torch.Size, d_v: int, device: torch.device):
        self.m = torch.full(rows, float("-inf"), dtype=torch.float32, device=device)  # [..., r] running max
        self.l = torch.zeros(rows, dtype=torch.float32, device=device)  # [..., r] running sum of exp
        self.acc = torch.zeros(*rows, d_v, dtype=torch.float32, device=device)  # [..., r, d_v]

    def add(self, scores: torch.Tensor, v: torch.Tensor) -> None:
        """Fold in one tile: ``scores`` [..., r, c] (float32, -inf where masked), ``v`` [..., c, d_v]."""
        m_new = torch.maximum(self.m, scores.amax(dim=-1))  # [..., r]
        # A row that has seen only masked keys so far keeps m = -inf; subtract 0 there, not -inf (no NaN).
        shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
        p = torch.exp(scores - shift[..., None])  # [..., r, c]
        correction = torch.exp(self.m - shift)  # rescale what was summed with the old maximum
        self.l = self.l * correction + p.sum(dim=-1)
        self.acc = self.acc * correction[..., None] + p @ v.float()
        self.m = m_new

    def result(self, dtype: torch.dtype) -> torch.Tensor:
        return (self.acc / self.l[..., None]).to(dtype)  # [..., r, d_v]


def attend_tiles(states: list[OnlineSoftmax], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 q_pos: torch.Tensor, k_pos: torch.Tensor, block: int, causal: bool = True) -> TileCounts:
    """Fold keys ``k``/``v`` [..., S_k, d] into the running softmax of queries ``q`` [..., S_q, d].

    ``q`` is already scaled by 1/sqrt(d). ``states[i]`` holds query tile i
    (rows i*block ...). ``q_pos`` [S_q] and ``k_pos`` [S_k] are the positions in
    the whole sequence, increasing within a shard: a key may be read by a
    query when its position is not larger. Returns what was computed and skipped.
    """
    counts = TileCounts()
    S_q, S_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    for i, q_start in enumerate(range(0, S_q, block)):
        q_end = min(q_start + block, S_q)
        for k_start in range(0, S_k, block):
            k_end = min(k_start + block, S_k)
            kind = "full"
            if causal:
                kind = tile_kind(int(q_pos[q_start]), int(q_pos[q_end - 1]) + 1,
                                 int(k_pos[k_start]), int(k_pos[k_end - 1]) + 1)
            if kind == "skipped":
                counts.skipped += 1
                continue
            scores = (q[..., q_start:q_end, :] @ k[..., k_start:k_end, :].transpose(-2, -1)).float()  # [..., bq, bk]
            counts.score_flops += 2 * (q_end - q_start) * (k_end - k_start) * d * _batch_size(q)
            if kind == "diagonal":
                future = k_pos[None, k_start:k_end] > q_pos[q_start:q_end, None]  # [bq, bk]
                scores = scores.masked_fill(future, float("-inf"))
                counts.diagonal += 1
            else:
                counts.full += 1
            states[i].add(scores, v[..., k_start:k_end, :])
    return counts


def start_states(q: torch.Tensor, d_v: int, block: int) -> list[OnlineSoftmax]:
    """One :class:`OnlineSoftmax` per query tile of ``q`` [..., S_q, d]."""
    S_q = q.shape[-2]
    return [OnlineSoftmax(torch.Size((*q.shape[:-2], min(block, S_q - s))), d_v, q.device)
            for s in range(0, S_q, block)]


def finish_states(states: list[OnlineSoftmax], dtype: torch.dtype) -> torch.Tensor:
    return torch.cat([state.result(dtype) for state in states], dim=-2)  # [..., S_q, d_v]


def blocked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int = 64,
                      causal: bool = True) -> tuple[torch.Tensor, TileCounts]:
    """Attention over tiles with an online softmax: [..., T, d] -> [..., T, d_v].

    With ``causal=False`` every tile is computed (full attention), which is the
    fair baseline for counting and timing the skipped tiles.
    """
    T, d = q.shape[-2], q.shape[-1]
    positions = torch.arange(T, device=q.device)
    states = start_states(q, v.shape[-1], block)
    counts = attend_tiles(states, q * (1.0 / math.sqrt(d)), k, v, positions, positions, block, causal)
    return finish_states(states, q.dtype), counts


def _batch_size(x: torch.Tensor) -> int:
    return math.prod(x.shape[:-2])
