"""One mask builder for every mask type of the course.

Each mask type is written once, as a ``mask_mod(b, h, q_idx, kv_idx) -> bool``
(FlexAttention's convention: True = this query may read this key). The same
function gives

* a dense boolean mask, by evaluating it on index grids (:func:`build_mask`),
  for SDPA's ``attn_mask`` or chapter 1's ``masked_fill``;
* a FlexAttention block mask, via ``torch.nn.attention.flex_attention.create_block_mask``.

Queries are the LAST ``T_q`` positions of a sequence of ``T_kv`` keys (the KV
cache's alignment, "lower right"), so ``build_mask("causal", 1, 9)`` lets the one
new query read all nine keys.

========================  ======================================================
kind                      query i may read key j when
========================  ======================================================
``causal``                j <= i (decoder-only: GPT, Llama)
``strict``                j < i (the diagonal blocked too: row 0 reads nothing)
``bidirectional``         always (encoder-only: BERT)
``prefix_lm``             j <= i or j < prefix (UL2, GLM: the prefix sees itself)
``sliding_window``        i - window < j <= i (Mistral 7B v0.1; Gemma 2/3 local layers)
``cross``                 always; queries and keys come from different sequences
                          (the decoder reading the encoder in T5)
========================  ======================================================

Chapter 8 adds rules that differ per row of a batch (:func:`padding_mod`,
:func:`document_mod`), :func:`and_masks` / :func:`or_masks` to combine rules,
and :func:`batch_mask` for a dense [B, 1, T_q, T_kv] mask.
"""

from __future__ import annotations

from typing import Callable

import torch

from .i18n import tr
from .inputs import describe, whole_number

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
MASK_KINDS = ("causal", "strict", "bidirectional", "prefix_lm", "sliding_window", "cross")


def mask_mod(kind: str, *, prefix: int | None = None, window: int | None = None) -> MaskMod:
    """The rule of one mask type as ``mask_mod(b, h, q_idx, kv_idx)`` (True = may read)."""
    kind, prefix, window = check_mask_options(kind, prefix, window)

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx

    def strict(b, h, q_idx, kv_idx):
        return kv_idx < q_idx

    def everything(b, h, q_idx, kv_idx):
        return (q_idx >= 0) & (kv_idx >= 0)

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (kv_idx < prefix)

    def sliding_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < window)

    rules = {"causal": causal, "strict": strict, "bidirectional": everything, "prefix_lm": prefix_lm,
             "sliding_window": sliding_window, "cross": everything}
    return rules[kind]


def check_mask_options(kind, prefix, window) -> tuple[str, int | None, int | None]:
    """A known kind, and exactly the options it uses (a prefix for prefix_lm, a window for sliding_window)."""
    if not isinstance(kind, str) or kind not in MASK_KINDS:
        raise ValueError(tr("error.kind", options=", ".join(MASK_KINDS), got=describe(kind)))
    owner = {"prefix": "prefix_lm", "window": "sliding_window"}  # the kind that uses each option
    for name, value in (("prefix", prefix), ("window", window)):
        if owner[name] == kind and value is None:
            raise ValueError(tr("error.mask_needs", kind=kind, name=name))
        if owner[name] != kind and value is not None:
            raise ValueError(tr("error.mask_extra", kind=kind, name=name, other=owner[name]))
    if prefix is not None:
        prefix = whole_number("prefix", prefix, low=0)
    if window is not None:
        window = whole_number("window", window, low=1)
    return kind, prefix, window


def build_mask(kind: str, T_q: int, T_kv: int | None = None, *, prefix: int | None = None,
               window: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Dense boolean mask [T_q, T_kv], True = may read; queries are the last T_q positions."""
    T_q = whole_number("T_q", T_q, low=1)
    T_kv = T_q if T_kv is None else whole_number("T_kv", T_kv, low=1)
    rule = mask_mod(kind, prefix=prefix, window=window)
    if kind != "cross" and T_q > T_kv:
        raise ValueError(tr("error.mask_more_queries", T_q=T_q, T_kv=T_kv))
    offset = 0 if kind == "cross" else T_kv - T_q
    q_idx = torch.arange(offset, offset + T_q, device=device)[:, None]  # [T_q, 1]
    kv_idx = torch.arange(T_kv, device=device)[None, :]  # [1, T_kv]
    zero = torch.zeros((), dtype=torch.long, device=device)
    return rule(zero, zero, q_idx, kv_idx).expand(T_q, T_kv).clone()  # [T_q, T_kv]


# Chapter 8: masks for a batch. Padding and packed documents differ from row to
# row of the batch, so their rules read tensors indexed by the batch index b.
# They are still mask_mods, so they combine with the rules above by and / or,
# as Hugging Face's ``create_causal_mask`` combines ``kv <= q`` with padding.

def check_rules(mods) -> None:
    """At least one rule, and every rule a function (not a kind's name or a mask tensor)."""
    if not mods:
        raise ValueError(tr("ch8.err_no_rules"))
    for mod in mods:
        if not callable(mod):
            raise TypeError(tr("ch8.err_rule_type", got=describe(mod)))


def and_masks(*mods: MaskMod) -> MaskMod:
    """A query may read a key only if every rule allows it (intersection)."""
    check_rules(mods)

    def every(b, h, q_idx, kv_idx):
        allowed = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            allowed = allowed & mod(b, h, q_idx, kv_idx)
        return allowed

    return every


def or_masks(*mods: MaskMod) -> MaskMod:
    """A query may read a key if any rule allows it (union)."""
    check_rules(mods)

    def any_of(b, h, q_idx, kv_idx):
        allowed = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            allowed = allowed | mod(b, h, q_idx, kv_idx)
        return allowed

    return any_of


def keep_from_lengths(lengths, T: int, side: str = "right", device=None) -> torch.Tensor:
    """[B, T] bool, True = a real token, False = padding; ``side`` is where the padding goes."""
    T = whole_number("T", T, low=1)
    if side not in ("right", "left"):
        raise ValueError(tr("ch8.err_side", side=side))
    try:
        lengths = torch.as_tensor(lengths, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(tr("ch8.err_lengths", T=T, lengths=describe(lengths))) from None
    if (lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool
            or (lengths < 0).any() or (lengths > T).any()):
        raise ValueError(tr("ch8.err_lengths", T=T, lengths=lengths.tolist()))
    slots = torch.arange(T, device=lengths.device)[None, :]  # [1, T]
    if side == "right":
        return slots < lengths[:, None]  # tokens first, then padding
    return slots >= T - lengths[:, None]  # padding first, then tokens


def padding_mod(keep: torch.Tensor) -> MaskMod:
    """Key padding: a query may read key ``kv_idx`` of row ``b`` only if it is a real token.
    ``keep`` is [B, T_kv] bool (True = real token), for example from :func:`keep_from_lengths`."""
    if not isinstance(keep, torch.Tensor):
        raise TypeError(tr("ch8.err_keep", shape=describe(keep), dtype=type(keep).__name__))
    if keep.dim() != 2 or keep.dtype != torch.bool:
        raise ValueError(tr("ch8.err_keep", shape=tuple(keep.shape), dtype=str(keep.dtype)))

    def padding(b, h, q_idx, kv_idx):
        return keep[b, kv_idx]

    return padding


def document_mod(document_ids: torch.Tensor) -> MaskMod:
    """Packed documents: a query may read a key only from its own document.
    ``document_ids`` is [B, T] (one integer per token); combine with ``causal``."""
    if not isinstance(document_ids, torch.Tensor):
        raise TypeError(tr("ch8.err_documents", shape=describe(document_ids), dtype=type(document_ids).__name__))
    if document_ids.dim() != 2 or document_ids.is_floating_point() or document_ids.dtype == torch.bool:
        raise ValueError(tr("ch8.err_documents", shape=tuple(document_ids.shape), dtype=str(document_ids.dtype)))

    def same_document(b, h, q_idx, kv_idx):
        return document_ids[b, q_idx] == document_ids[b, kv_idx]

    return same_document


def batch_mask(mod: MaskMod, B: int, T_q: int, T_kv: int | None = None,
               device: torch.device | str | None = None) -> torch.Tensor:
    """Dense boolean mask [B, 1, T_q, T_kv] of any mask_mod (True = may read), the
    shape SDPA broadcasts over heads; queries are the last T_q of T_kv positions."""
    check_rules([mod])
    B, T_q = whole_number("B", B), whole_number("T_q", T_q)
    T_kv = T_q if T_kv is None else whole_number("T_kv", T_kv)
    if B < 1 or T_q < 1 or T_q > T_kv:
        raise ValueError(tr("ch8.err_batch_shape", B=B, T_q=T_q, T_kv=T_kv))
    b = torch.arange(B, device=device)[:, None, None, None]  # [B, 1, 1, 1]
    h = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)  # one mask for every head
    q_idx = torch.arange(T_kv - T_q, T_kv, device=device)[None, None, :, None]  # [1, 1, T_q, 1]
    kv_idx = torch.arange(T_kv, device=device)[None, None, None, :]  # [1, 1, 1, T_kv]
    try:
        allowed = mod(b, h, q_idx, kv_idx)
    except IndexError as error:  # a keep / document_ids tensor with fewer rows or columns than the mask
        raise ValueError(tr("ch8.err_rule_index", B=B, T_kv=T_kv, detail=str(error))) from None
    return allowed.expand(B, 1, T_q, T_kv).clone()  # [B, 1, T_q, T_kv]
