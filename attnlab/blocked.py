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

Chapter 9 (ring attention) needs the same loop for keys that arrive in blocks
from other processes, with the positions of any layout: :func:`attend_tiles`
is ``blocked_attention``'s loop with explicit positions and the running
statistics kept in :class:`OnlineSoftmax` between calls. On one whole
sequence it gives bit for bit the output and the counts of
``blocked_attention`` (tests/test_blocked_and_memory.py).
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

    def __add__(self, other: TileCounts) -> TileCounts:
        return TileCounts(self.full + other.full, self.diagonal + other.diagonal,
                          self.skipped + other.skipped, self.score_flops + other.score_flops)


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


def sdpa_cpu_tiles(T_q: int) -> tuple[int, int]:
    """(queries, keys) per tile of PyTorch's CPU flash kernel for ``T_q`` queries: 256 x 512 from
    768 queries on, 64 x 512 from 192, 32 x 512 below (``flash_attention_kernel_impl`` in
    aten/src/ATen/native/cpu/FlashAttentionKernel.cpp, torch 2.13; a key tile never exceeds the keys)."""
    T_q = whole_number("T_q", T_q, low=1)
    return (256 if T_q >= 768 else 64 if T_q >= 192 else 32), 512


def sdpa_cpu_causal_work(T: int) -> float:
    """The share of a full call's score work that SDPA's CPU flash kernel does with ``is_causal=True``
    for T queries and T keys. A tile of queries starting at m computes every key tile that begins
    at or before its last query (``num_keys = min(m + rows, T)``), each in full: the diagonal tile is masked
    element by element, not shortened, and a key tile of 512 reaches far past the diagonal."""
    T = whole_number("T", T, low=1)
    q_tile, k_tile = sdpa_cpu_tiles(T)
    k_tile = min(k_tile, T)
    work = 0
    for m in range(0, T, q_tile):
        rows = min(q_tile, T - m)
        keys = sum(min(k_tile, T - n) for n in range(0, m + rows, k_tile))  # [rows, keys] scores computed
        work += rows * keys
    return work / (T * T)


def attention_flops(T: int, heads: int, head_dim: int, causal: bool) -> int:
    """Floating-point operations of one attention forward over T queries and T keys (batch 1) that
    computes only the (query, key) pairs it needs: 2 x head_dim for q . k and 2 x head_dim for the
    weighted sum of v, per pair and head; T^2 pairs, or T (T + 1) / 2 with the causal mask."""
    T, heads, head_dim = (whole_number(name, value, low=1) for name, value in
                          (("T", T), ("heads", heads), ("head_dim", head_dim)))
    pairs = T * (T + 1) // 2 if causal else T * T
    return 4 * heads * head_dim * pairs


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


# --------------------------------------------------------------------------- blocks that arrive one by one


class OnlineSoftmax:
    """The running statistics of ``blocked_attention`` for one query tile, kept between calls:
    maximum ``m`` and sum of exponentials ``l`` per row, unnormalised output ``acc``."""

    def __init__(self, rows: torch.Size, d_v: int, device: torch.device, dtype: torch.dtype = torch.float32):
        # dtype: what the sums run in (float32; float64 for float64 inputs, as gradcheck needs)
        self.m = torch.full(rows, float("-inf"), dtype=dtype, device=device)  # [..., bq]
        self.l = torch.zeros(rows, dtype=dtype, device=device)  # [..., bq]
        self.acc = torch.zeros(*rows, d_v, dtype=dtype, device=device)  # [..., bq, d_v]

    def add(self, scores: torch.Tensor, v: torch.Tensor) -> None:
        """Fold in one tile: ``scores`` [..., bq, bk] (the state's dtype, -inf where masked), ``v`` [..., bk, d_v]."""
        m_new = torch.maximum(self.m, scores.amax(dim=-1))  # [..., bq]
        # a row that has seen only masked keys so far keeps m = -inf: subtract 0 there, not -inf (no NaN)
        shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
        p = torch.exp(scores - shift[..., None])  # [..., bq, bk]
        correction = torch.exp(self.m - shift)  # rescales what was summed under the old maximum
        self.l = self.l * correction + p.sum(dim=-1)
        self.acc = self.acc * correction[..., None] + p @ v.to(self.acc.dtype)
        self.m = m_new

    def result(self, dtype: torch.dtype) -> torch.Tensor:
        return (self.acc / self.l[..., None]).to(dtype)  # [..., bq, d_v]


def start_states(q: torch.Tensor, d_v: int, block: int) -> list[OnlineSoftmax]:
    """One :class:`OnlineSoftmax` per query tile of ``q`` [..., S_q, d]."""
    if not isinstance(q, torch.Tensor) or q.dim() < 2:
        from .inputs import describe
        raise TypeError(tr("ring.error_states_q", got=describe(q)))
    d_v, block = whole_number("d_v", d_v, 1), whole_number("block", block, 1)
    S_q = q.shape[-2]
    return [OnlineSoftmax(torch.Size((*q.shape[:-2], min(block, S_q - s))), d_v, q.device)
            for s in range(0, S_q, block)]


def finish_states(states: list[OnlineSoftmax], dtype: torch.dtype) -> torch.Tensor:
    return torch.cat([state.result(dtype) for state in states], dim=-2)  # [..., S_q, d_v]


def attend_tiles(states: list[OnlineSoftmax], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 q_pos: torch.Tensor, k_pos: torch.Tensor, block: int, causal: bool = True) -> TileCounts:
    """Fold keys ``k`` / values ``v`` [..., S_k, d] into the running softmax of the queries ``q``
    [..., S_q, d], tile by tile, as ``blocked_attention`` does.

    ``states[i]`` holds query tile i (rows i*block ...). ``q_pos`` [S_q] and ``k_pos`` [S_k]
    are the positions in the whole sequence, increasing within each: a key may be read by a
    query whose position is not smaller. Returns what was computed and what was skipped.
    """
    counts = TileCounts()
    S_q, S_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    for i, q_start in enumerate(range(0, S_q, block)):
        q_end = min(q_start + block, S_q)
        q_tile = q[..., q_start:q_end, :] / math.sqrt(d)  # [..., bq, d]
        for k_start in range(0, S_k, block):
            k_end = min(k_start + block, S_k)
            kind = "full"
            if causal:
                kind = tile_kind(int(q_pos[q_start]), int(q_pos[q_end - 1]) + 1,
                                 int(k_pos[k_start]), int(k_pos[k_end - 1]) + 1)
            if kind == "skipped":
                counts.skipped += 1
                continue  # the keys and values of this tile are never read
            scores = (q_tile @ k[..., k_start:k_end, :].transpose(-2, -1)).float()  # [..., bq, bk]
            counts.score_flops += 2 * (q_end - q_start) * (k_end - k_start) * d * math.prod(q.shape[:-2])
            if kind == "diagonal":
                future = k_pos[None, k_start:k_end] > q_pos[q_start:q_end, None]  # [bq, bk]
                scores = scores.masked_fill(future, float("-inf"))
                counts.diagonal += 1
            else:
                counts.full += 1
            states[i].add(scores, v[..., k_start:k_end, :])
    return counts
