"""The backward pass of blocked causal attention (chapter 11): recompute, do not store.

Chapter 3's blocked attention never holds the [T, T] scores in the forward
pass. Training needs gradients, and autograd of the explicit attention of
chapter 1 keeps the attention weights A [..., T, T] (the probabilities; FlashAttention
writes them P, but in this course P is the number of ranks of chapter 9) of every layer until the
backward pass. FlashAttention-2's backward (Dao 2023, arXiv 2307.08691,
section 3.1.2 and Algorithm 2) keeps only the output O and the row-wise
logsumexp L [..., T] and recomputes each tile's probabilities from them:
``A_ij = exp(S_ij - L_i)``. With ``D = rowsum(dO * O)``:

    dV = A^T dO,   dA = dO V^T,   dS = A * (dA - D),
    dQ = dS K / sqrt(d),   dK = dS^T Q / sqrt(d).

:func:`attention_grads` writes these formulas out on whole matrices;
:func:`blocked_forward` is chapter 3's loop that also returns L;
:func:`blocked_backward` is the tile loop (key tiles outside, query tiles
inside, as in Algorithm 2), skipping the tiles above the diagonal exactly
as the forward does; :class:`BlockedAttention` joins them as a
``torch.autograd.Function``. Chapter 11 shows ``attention_grads``,
``tile_grads`` and ``blocked_backward`` in the notebook; a test keeps that
code and this module equal.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import torch

from .attention import attention
from . import inputs
from .blocked import OnlineSoftmax, check_blocked_inputs, tile_kind
from .i18n import tr


@dataclass
class PassCounts:
    """Tiles computed and skipped by one pass, and the multiply-adds x 2 of its matrix products."""
    full: int = 0
    diagonal: int = 0
    skipped: int = 0
    matmul_flops: int = 0

    @property
    def computed(self) -> int:
        return self.full + self.diagonal


# --------------------------------------------------------------------------- clear errors for bad input


def _tensors(**named):
    """Every value a floating-point tensor, all of one dtype (a learner may pass numpy, ints, a mix)."""
    for name, value in named.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(tr("ch11.error_tensor", name=name, got=inputs.describe(value)))
    dtypes = {name: str(value.dtype).removeprefix("torch.") for name, value in named.items()}
    if not all(value.is_floating_point() for value in named.values()) or len(set(dtypes.values())) > 1:
        raise TypeError(tr("ch11.error_dtype", names=", ".join(named),
                           got=", ".join(f"{name} {dtype}" for name, dtype in dtypes.items())))


def check_grads_inputs(q, k, v, d_out, allowed):
    """Clear errors for :func:`attention_grads`: q, k, v, d_out and the mask ``allowed`` of chapter 1."""
    _tensors(q=q, k=k, v=v, d_out=d_out)
    check_blocked_inputs(q, k, v, 1, False)
    expected = (*q.shape[:-1], v.shape[-1])
    if tuple(d_out.shape) != expected:
        raise ValueError(tr("ch11.error_d_out", expected=expected, got=tuple(d_out.shape)))
    if allowed is not None and (not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool
                                or tuple(allowed.shape[-2:]) != (q.shape[-2], k.shape[-2])):
        got = inputs.describe(allowed) if not isinstance(allowed, torch.Tensor) else \
            f"{tuple(allowed.shape)} {str(allowed.dtype).removeprefix('torch.')}"
        raise ValueError(tr("ch11.error_allowed", expected=(q.shape[-2], k.shape[-2]), got=got))


def check_backward_inputs(q, k, v, out, lse, d_out, block, causal, keep):
    """Clear errors for :func:`blocked_backward`: the forward's inputs, O and L from blocked_forward, and dO."""
    _check(q, k, v, block, causal, keep)
    _tensors(out=out, d_out=d_out)
    if not isinstance(lse, torch.Tensor):
        raise TypeError(tr("ch11.error_tensor", name="lse", got=inputs.describe(lse)))
    expected = (*q.shape[:-1], v.shape[-1])
    if tuple(out.shape) != expected or tuple(d_out.shape) != expected or tuple(lse.shape) != tuple(q.shape[:-1]):
        raise ValueError(tr("ch11.error_backward_shapes", out=expected, lse=tuple(q.shape[:-1]),
                            got_out=tuple(out.shape), got_d_out=tuple(d_out.shape), got_lse=tuple(lse.shape)))


# --------------------------------------------------------------------------- by hand, whole matrices


def attention_grads(q, k, v, d_out, allowed=None):
    check_grads_inputs(q, k, v, d_out, allowed)  # clear errors for bad input
    scale = 1 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale  # S [..., T_q, T_kv]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    a = scores.softmax(dim=-1)  # A: a masked entry is exactly 0
    out = a @ v  # O
    D = (d_out * out).sum(dim=-1, keepdim=True)  # D = rowsum(dO * O) [..., T_q, 1]
    dv = a.transpose(-2, -1) @ d_out  # dV = A^T dO
    da = d_out @ v.transpose(-2, -1)  # dA = dO V^T
    ds = a * (da - D)  # dS = A * (dA - D): the softmax backward
    dq = ds @ k * scale  # dQ = dS K / sqrt(d)
    dk = ds.transpose(-2, -1) @ q * scale  # dK = dS^T Q / sqrt(d)
    return dq, dk, dv


class ByHand(torch.autograd.Function):
    """Chapter 1's explicit attention whose backward is :func:`attention_grads`, for gradcheck."""

    @staticmethod
    def forward(ctx, q, k, v, allowed):
        ctx.save_for_backward(q, k, v, allowed)
        return attention(q, k, v, allowed)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, allowed = ctx.saved_tensors
        return *attention_grads(q, k, v, d_out, allowed), None


# --------------------------------------------------------------------------- one tile


def tile_grads(q, k, v, d_out, lse, D, blocked=None):
    scale = 1 / math.sqrt(q.size(-1))
    dtype = torch.promote_types(q.dtype, torch.float32)  # sums in float32 (float64 stays float64)
    scores = (q @ k.transpose(-2, -1)).to(dtype) * scale  # S_ij [..., bq, bk], recomputed
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))
    a = torch.exp(scores - lse[..., None])  # A_ij = exp(S_ij - L_i), no softmax; 0 where L_i = +inf
    dv = a.transpose(-2, -1) @ d_out.to(dtype)  # this tile's share of dV_j
    da = d_out.to(dtype) @ v.to(dtype).transpose(-2, -1)
    ds = a * (da - D[..., None])
    dq = ds @ k.to(dtype) * scale  # this tile's share of dQ_i
    dk = ds.transpose(-2, -1) @ q.to(dtype) * scale  # this tile's share of dK_j
    return dq, dk, dv


def tile_mask(kind, q_pos, k_pos, keep):
    """The entries of a tile to mask ([..., bq, bk] bool), or None when none is."""
    if kind not in ("full", "diagonal"):
        raise ValueError(tr("ch11.error_tile_kind", got=inputs.describe(kind)))
    blocked = None
    if kind == "diagonal":
        blocked = k_pos[None, :] > q_pos[:, None]  # the future inside the tile
    if keep is not None:  # keep [B, T_kv]: False for padding keys
        padding = ~keep[:, None, None, k_pos]
        blocked = padding if blocked is None else blocked | padding
    return blocked


# --------------------------------------------------------------------------- forward that keeps L


def _check(q, k, v, block, causal, keep):
    _tensors(q=q, k=k, v=v)
    if not isinstance(causal, bool):
        raise TypeError(tr("ch11.error_causal", got=inputs.describe(causal)))
    check_blocked_inputs(q, k, v, block, causal)
    if keep is not None and (keep.dtype != torch.bool or q.dim() != 4 or keep.shape != (q.shape[0], k.shape[-2])):
        raise ValueError(tr("ch11.error_keep", expected=(q.shape[0], k.shape[-2]), got=tuple(keep.shape),
                            dtype=str(keep.dtype).removeprefix("torch.")))


def blocked_forward(q, k, v, block=64, causal=True, keep=None):
    """Chapter 3's blocked attention, returning also the row-wise logsumexp L.

    q [..., T_q, d], k and v [..., T_kv, d]; ``keep`` [B, T_kv] bool (False: a padding
    key) for q of shape [B, H, T_q, d]. Returns (O [..., T_q, d_v], L [..., T_q] in float32, or
    float64 for float64 inputs, PassCounts). A row that may read no key at all (left padding
    before the first real token) gets O = 0 and L = +inf, as FlashAttention-2 stores it: then
    exp(S - L) = 0 in every tile of the backward, and the row adds nothing to any gradient.
    """
    _check(q, k, v, block, causal, keep)
    T_q, T_kv, d = q.shape[-2], k.shape[-2], q.shape[-1]
    offset, positions = T_kv - T_q, torch.arange(T_kv, device=q.device)
    counts = PassCounts()
    dtype = torch.promote_types(q.dtype, torch.float32)  # the sums: float32, float64 for float64 inputs
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=dtype, device=q.device)
    for q_start in range(0, T_q, block):
        q_end = min(q_start + block, T_q)
        q_tile = q[..., q_start:q_end, :] / math.sqrt(d)
        state = OnlineSoftmax(q_tile.shape[:-1], v.shape[-1], q.device, dtype)
        for k_start in range(0, T_kv, block):
            k_end = min(k_start + block, T_kv)
            kind = tile_kind(offset + q_start, offset + q_end, k_start, k_end) if causal else "full"
            if kind == "skipped":
                counts.skipped += 1
                continue
            setattr(counts, kind, getattr(counts, kind) + 1)
            counts.matmul_flops += 2 * (q_end - q_start) * (k_end - k_start) * (d + v.shape[-1]) \
                * math.prod(q.shape[:-2])  # S = Q K^T and A V
            scores = (q_tile @ k[..., k_start:k_end, :].transpose(-2, -1)).to(dtype)
            blocked = tile_mask(kind, positions[offset + q_start:offset + q_end], positions[k_start:k_end], keep)
            if blocked is not None:
                scores = scores.masked_fill(blocked, float("-inf"))
            state.add(scores, v[..., k_start:k_end, :])
        empty = state.l == 0  # a row that read no key (l >= 1 for any row that read one)
        out[..., q_start:q_end, :] = state.result(q.dtype).masked_fill(empty[..., None], 0)  # not 0/0 = NaN
        lse[..., q_start:q_end] = (state.m + torch.log(state.l)).masked_fill(empty, float("inf"))  # L = m + log(l)
    return out, lse, counts


# --------------------------------------------------------------------------- backward over tiles


def blocked_backward(q, k, v, out, lse, d_out, block=64, causal=True, keep=None):
    check_backward_inputs(q, k, v, out, lse, d_out, block, causal, keep)  # clear errors for bad input
    T_q, T_kv, d = q.shape[-2], k.shape[-2], q.shape[-1]
    offset, positions = T_kv - T_q, torch.arange(T_kv, device=q.device)
    dtype = torch.promote_types(q.dtype, torch.float32)  # sums in float32 (float64 stays float64)
    D = (d_out.to(dtype) * out.to(dtype)).sum(dim=-1)  # D = rowsum(dO * O) [..., T_q], once
    dq = torch.zeros(q.shape, dtype=dtype, device=q.device)
    dk = torch.zeros(k.shape, dtype=dtype, device=q.device)
    dv = torch.zeros(v.shape, dtype=dtype, device=q.device)
    counts = PassCounts()
    for k_start in range(0, T_kv, block):  # outer loop: one key tile, its dK_j and dV_j stay here
        k_end = min(k_start + block, T_kv)
        for q_start in range(0, T_q, block):  # inner loop: every query tile that reads it
            q_end = min(q_start + block, T_q)
            kind = tile_kind(offset + q_start, offset + q_end, k_start, k_end) if causal else "full"
            if kind == "skipped":
                counts.skipped += 1
                continue  # A is 0 there: no gradient to compute, as in the forward
            setattr(counts, kind, getattr(counts, kind) + 1)
            counts.matmul_flops += 2 * (q_end - q_start) * (k_end - k_start) * (3 * d + 2 * v.shape[-1]) \
                * math.prod(q.shape[:-2])  # S, dV, dA, dQ, dK
            qs, ks = slice(q_start, q_end), slice(k_start, k_end)
            blocked = tile_mask(kind, positions[offset + q_start:offset + q_end], positions[ks], keep)
            tile_dq, tile_dk, tile_dv = tile_grads(q[..., qs, :], k[..., ks, :], v[..., ks, :], d_out[..., qs, :],
                                                   lse[..., qs], D[..., qs], blocked)
            dq[..., qs, :] += tile_dq
            dk[..., ks, :] += tile_dk
            dv[..., ks, :] += tile_dv
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), counts


class BlockedAttention(torch.autograd.Function):
    """Blocked attention that saves q, k, v, O and L for backward, never A."""

    @staticmethod
    def forward(ctx, q, k, v, block, causal, keep):
        out, lse, _ = blocked_forward(q, k, v, block, causal, keep)
        ctx.save_for_backward(q, k, v, out, lse, *(() if keep is None else (keep,)))
        ctx.block, ctx.causal = block, causal
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse, *keep = ctx.saved_tensors
        dq, dk, dv, _ = blocked_backward(q, k, v, out, lse, d_out, ctx.block, ctx.causal, keep[0] if keep else None)
        return dq, dk, dv, None, None, None


def blocked_attention_train(q, k, v, block=64, causal=True, keep=None, function=None):
    """Differentiable blocked attention: [..., T_q, d] x [..., T_kv, d] -> [..., T_q, d_v].
    ``function``: the ``torch.autograd.Function`` to apply (:class:`BlockedAttention` unless given)."""
    _check(q, k, v, block, causal, keep)
    return (function or BlockedAttention).apply(q, k, v, block, causal, keep)


# --------------------------------------------------------------------------- what is saved, counted


def saved_tensors(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` and list what autograd saves for backward, beyond the inputs.

    Returns (result, [(shape, dtype, bytes)] of each new storage once). Measured with
    ``torch.autograd.graph.saved_tensors_hooks``: the pack hook sees every saved tensor.
    """
    if not callable(fn):
        raise TypeError(tr("ch11.error_saved_fn", got=inputs.describe(fn)))
    if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values())):
        raise ValueError(tr("ch11.error_saved_grad"))
    own = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
    seen, saved = set(), []

    def pack(tensor):
        key = tensor.untyped_storage().data_ptr()
        if key not in own and key not in seen:
            seen.add(key)
            saved.append((tuple(tensor.shape), tensor.dtype, tensor.untyped_storage().nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = fn(*args, **kwargs)
    return result, saved


def saved_bytes_formula(B, H, T, d_v, element_size=4):
    """(explicit attention: A [B, H, T, T]; blocked: O [B, H, T, d_v] and L [B, H, T], which is float32,
    float64 for float64 inputs (``element_size`` 8): ``BlockedAttention`` sums in
    ``torch.promote_types(dtype, float32)``)."""
    B, H, T, d_v = (inputs.whole_number(name, value, 1) for name, value in zip("B H T d_v".split(), (B, H, T, d_v)))
    element_size = inputs.whole_number("element_size", element_size, 1)
    lse_size = 8 if element_size == 8 else 4  # L in float32, in float64 for float64 inputs (exercise 11, task 3)
    return B * H * T * T * element_size, B * H * T * d_v * element_size + B * H * T * lse_size


def _blocked_attend(group, block, function, q, k, v):
    """One ``SelfAttention.attend`` by blocked attention. Grouped-query attention (``n_kv_head < n_head``):
    each K/V head is repeated for the ``group`` query heads that read it, as SDPA's ``enable_gqa`` reads it;
    autograd of ``repeat_interleave`` then sums the group's shares into the shared head's dK, dV."""
    if group > 1:
        k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    return blocked_attention_train(q, k, v, block=block, function=function)


@contextlib.contextmanager
def blocked_attention_in(model, block=64, function=None):
    """Inside ``with``: every ``SelfAttention`` of the course's GPT attends with
    :func:`blocked_attention_train` instead of SDPA (full-length causal self-attention, shared
    key/value heads included; no window, no dropout in training).
    ``function``: the ``torch.autograd.Function`` to run, ``apply(q, k, v, block, causal, keep)``
    (chapter 11 passes the ``BlockedAttention`` of its cell, so an edit there reaches the model);
    the package's :class:`BlockedAttention` unless given."""
    from .gpt import SelfAttention

    if not isinstance(model, torch.nn.Module):
        raise TypeError(tr("ch11.error_model", got=inputs.describe(model)))
    block = inputs.whole_number("block", block, 1)
    if function is not None and not (isinstance(function, type) and issubclass(function, torch.autograd.Function)):
        raise TypeError(tr("ch11.error_function", got=inputs.describe(function)))
    modules = [m for m in model.modules() if isinstance(m, SelfAttention)]
    for module in modules:
        config = module.config
        what = [name for name, odd in [("causal=False", not config.causal), (f"window={config.window}",
                config.window is not None), (f"dropout={config.dropout} (training=True)", bool(config.dropout) and model.training)] if odd]
        if what:
            raise ValueError(tr("ch11.error_gpt", what=", ".join(what)))
    for module in modules:
        module.attend = functools.partial(_blocked_attend, module.n_head // module.n_kv_head, block, function)
    try:
        yield model
    finally:
        for module in modules:
            del module.attend  # the class's method again
