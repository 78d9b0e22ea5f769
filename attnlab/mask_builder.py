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
"""

from __future__ import annotations

from typing import Callable

import torch

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
MASK_KINDS = ("causal", "strict", "bidirectional", "prefix_lm", "sliding_window", "cross")


def mask_mod(kind: str, *, prefix: int | None = None, window: int | None = None) -> MaskMod:
    """The rule of one mask type as ``mask_mod(b, h, q_idx, kv_idx)`` (True = may read)."""
    if kind not in MASK_KINDS:
        raise ValueError(f"unknown mask kind {kind!r}; choose one of {', '.join(MASK_KINDS)}")
    if kind == "prefix_lm" and (prefix is None or prefix < 0):
        raise ValueError("prefix_lm needs prefix=<number of prefix tokens, >= 0>")
    if kind == "sliding_window" and (window is None or window < 1):
        raise ValueError("sliding_window needs window=<number of keys a query sees, >= 1>")

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


def build_mask(kind: str, T_q: int, T_kv: int | None = None, *, prefix: int | None = None,
               window: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Dense boolean mask [T_q, T_kv], True = may read; queries are the last T_q positions."""
    T_kv = T_q if T_kv is None else T_kv
    if T_q < 1 or T_kv < 1:
        raise ValueError(f"T_q and T_kv must be >= 1, got {T_q} and {T_kv}")
    if kind != "cross" and T_q > T_kv:
        raise ValueError(f"self-attention needs T_q <= T_kv (queries are the last T_q of the T_kv "
                         f"positions); got T_q={T_q}, T_kv={T_kv}")
    rule = mask_mod(kind, prefix=prefix, window=window)
    offset = 0 if kind == "cross" else T_kv - T_q
    q_idx = torch.arange(offset, offset + T_q, device=device)[:, None]  # [T_q, 1]
    kv_idx = torch.arange(T_kv, device=device)[None, :]  # [1, T_kv]
    zero = torch.zeros((), dtype=torch.long, device=device)
    return rule(zero, zero, q_idx, kv_idx).expand(T_q, T_kv).clone()  # [T_q, T_kv]
