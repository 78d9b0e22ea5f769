"""Split-KV decoding (chapter 12): one query against a long cache, the keys split into parts.

A decode step has one query per sequence and head; one GPU thread block per (sequence, head)
leaves most of a GPU idle when the batch is small. Flash-Decoding (Dao et al. 2023) splits the
keys into n_splits parts, lets each part compute its softmax-weighted output and the log-sum-exp of
its scores, and then combines the parts: the log-sum-exp of all keys is the log-sum-exp of the
parts' log-sum-exps, and each part's output counts with the share exp(lse_s - lse) of the
softmax mass (the combine of chapters 9 and 11).

Which parts? :func:`split_plan` cuts the keys either into splits of a fixed number of tokens
or into a given number of splits. FlashAttention chooses the number from how many (sequence,
head) pairs the step already has, to fill the GPU (:func:`num_splits_heuristic`, ported from
``csrc/flash_attn/flash_api.cpp``): the plan of one sequence then depends on the batch it came
in, and so does the order of its sums. A split size fixed in tokens gives every sequence a plan
that depends on its own length alone: batch invariance (Thinking Machines Lab, 2025).

:func:`split_kv_decode` runs every sequence alone, split after split, as the GPU runs every
(sequence, head, split) in its own thread block: with a fixed split size, a sequence's result
is computed by the same calls on the same numbers whatever else is in the batch.
"""

from __future__ import annotations

import math

import torch

from .i18n import tr
from .inputs import describe, whole_number


def split_plan(T_kv, split_size=None, num_splits=None, block=256):
    """The (start, end) key ranges of the splits: ``split_size`` tokens each, or ``num_splits``
    splits of whole blocks of ``block`` keys (as FlashAttention cuts them); the last may be shorter.

    With ``num_splits`` every split gets ceil(ceil(T_kv / block) / num_splits) whole blocks, so there
    may be fewer splits than asked: 1000 keys are 4 blocks of 256, and 3 splits of 2 blocks are
    2 splits, (0, 512) and (512, 1000); more splits than blocks give one block each."""
    T_kv = whole_number("T_kv", T_kv, low=1)
    if (split_size is None) == (num_splits is None):
        raise ValueError(tr("ch12.err_split_choice", size=describe(split_size), count=describe(num_splits)))
    if num_splits is not None:
        num_splits, block = whole_number("num_splits", num_splits, low=1), whole_number("block", block, low=1)
        split_size = math.ceil(math.ceil(T_kv / block) / num_splits) * block  # whole blocks per split
    split_size = whole_number("split_size", split_size, low=1)
    return [(start, min(start + split_size, T_kv)) for start in range(0, T_kv, split_size)]


def split_partials(q, k, v, plan):
    """Per split: the softmax-weighted output over its keys and the log-sum-exp of its scores.
    q [..., T_q, d], k [..., T_kv, d], v [..., T_kv, d_v] -> outs [n_splits, ..., T_q, d_v], lses [n_splits, ..., T_q]."""
    outs, lses = [], []
    for start, end in plan:
        scores = q @ k[..., start:end, :].transpose(-2, -1) / math.sqrt(q.size(-1))  # [..., T_q, n]
        lse = torch.logsumexp(scores, dim=-1)  # [..., T_q]
        outs.append(torch.exp(scores - lse[..., None]) @ v[..., start:end, :])  # the split's own softmax
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def combine_splits(outs, lses):
    lse = torch.logsumexp(lses, dim=0)  # [..., T_q]: the log-sum-exp over all keys
    weights = torch.exp(lses - lse)  # [n_splits, ..., T_q]: each split's share of the softmax mass (they sum to 1)
    return (weights[..., None] * outs).sum(dim=0)  # [..., T_q, d_v]


def split_kv_attention(q, k, v, split_size=None, num_splits=None):
    """Attention of ``q`` over ``k``, ``v`` computed split by split and combined: what SDPA gives."""
    check_split_inputs(q, k, v)
    return combine_splits(*split_partials(q, k, v, split_plan(k.size(-2), split_size, num_splits)))


def split_kv_decode(q, k, v, split_size=None, num_splits=None):
    """A decode step for a batch: q [B, H, 1, d], k [B, H, T_kv, d], v [B, H, T_kv, d_v] ->
    [B, H, 1, d_v]. Each sequence is computed alone with its own plan: ``split_size`` tokens per
    split, or ``num_splits`` splits."""
    check_split_inputs(q, k, v)
    if q.dim() != 4:
        raise ValueError(tr("ch12.err_decode_shape", q=tuple(q.shape), k=tuple(k.shape)))
    return torch.stack([split_kv_attention(q[b], k[b], v[b], split_size, num_splits) for b in range(q.size(0))])


def check_split_inputs(q, k, v) -> None:
    for name, value in (("q", q), ("k", k), ("v", v)):
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise TypeError(tr("error.attention_float", name=name, got=describe(value)))
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(tr("ch12.err_split_dtypes", q=str(q.dtype), k=str(k.dtype), v=str(v.dtype)))
    if (q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim() or q.size(-1) != k.size(-1)
            or k.size(-2) != v.size(-2) or k.size(-2) == 0 or q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]):
        raise ValueError(tr("error.attention_shapes", q=list(q.shape), k=list(k.shape), v=list(v.shape)))


def num_splits_heuristic(batch_nheads_mblocks, num_sms, num_n_blocks, max_splits=128):
    """FlashAttention's choice of the number of splits (``csrc/flash_attn/flash_api.cpp``).

    With enough (sequence, head, query block) work items to fill about 80 % of the streaming
    multiprocessors, one split. Otherwise the count whose last wave of thread blocks is fullest
    ("efficiency", waves / rounded-up waves), the smallest within 85 % of the best; a count that
    gives the same blocks per split as the count before it is skipped.
    """
    work = whole_number("batch_nheads_mblocks", batch_nheads_mblocks, low=1)
    num_sms, num_n_blocks = whole_number("num_sms", num_sms, low=1), whole_number("num_n_blocks", num_n_blocks, low=1)
    if work >= 0.8 * num_sms:
        return 1
    max_splits = min(whole_number("max_splits", max_splits, low=1), num_sms, num_n_blocks)

    def eligible(s):  # 64 blocks in 12 splits are 11 splits of 6: skip 12
        return s == 1 or math.ceil(num_n_blocks / s) != math.ceil(num_n_blocks / (s - 1))

    efficiency = {s: (work * s / num_sms) / math.ceil(work * s / num_sms) for s in range(1, max_splits + 1) if eligible(s)}
    best = max(efficiency.values())
    return min(s for s, e in efficiency.items() if e >= 0.85 * best)


def flash_num_splits(batch_size, num_heads, T_kv, head_dim, num_sms=132):
    """The splits FlashAttention's forward picks for one new query per sequence (``mha_fwd`` with
    ``num_splits=0``): key blocks of 256 (d <= 64), 128 (d <= 128) or 64, and twice the SM count
    (two thread blocks of 128 threads per SM). ``num_sms=132``: an H100 SXM."""
    block = 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64
    return num_splits_heuristic(batch_size * num_heads, 2 * num_sms, math.ceil(T_kv / block)), block
