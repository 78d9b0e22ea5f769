"""Batches as real models see them (chapter 8): padding, packed documents, position ids.

* :func:`forward_with_mask` runs the course's small GPT with an explicit
  [B, 1, T, T] mask and [B, T] position ids, the two inputs Hugging Face
  models call ``attention_mask`` and ``position_ids``.
* :func:`pack` concatenates documents into one row and returns the document
  id and the restarting position of every token.
* :func:`document_leaks` is chapter 5's prefix test applied per document:
  change every token outside one document and measure how much that
  document's outputs move (0.0 = nothing leaks in).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from .gpt import GPT
from .i18n import tr
from .inputs import as_allowed_mask, describe
from .multihead import merge_heads


def check_mask_inputs(model: GPT, idx: torch.Tensor, allowed: torch.Tensor, position_ids: torch.Tensor) -> None:
    """A clear error, in the reader's language, for inputs :func:`forward_with_mask` would run
    with silently wrong numbers or fail on deep inside torch: ``idx`` not [B, T] token ids;
    ``allowed`` not a boolean [B, 1, T, T] / [T, T] mask (a 0/1 float or additive 0/-inf mask,
    the other convention), one that allows nothing, or, for a causal model, one that lets a
    query read a later slot (an inverted mask, or a padding mask without its causal part);
    ``position_ids`` not [B, T] / [T] whole numbers, or past the position embeddings."""
    model.check_idx(idx)
    B, T = idx.shape
    as_allowed_mask("allowed", allowed, T, T, batch=B, heads=model.config.n_head)
    for name, value in (("allowed", allowed), ("position_ids", position_ids)):
        if isinstance(value, torch.Tensor) and value.device != idx.device:
            raise ValueError(tr("error.input_device", name=name, got=str(value.device), model=str(idx.device)))
    if not allowed.any():
        raise ValueError(tr("error.mask_empty", name="allowed"))
    if model.config.causal:
        later = torch.ones(T, T, dtype=torch.bool, device=allowed.device).triu(diagonal=1)  # key slot j > query slot i
        future = (allowed & later).expand(B, -1, T, T) if allowed.dim() == 4 else (allowed & later)[None, None]
        if future.any():
            b, _, i, j = (int(n) for n in future.nonzero()[0])
            raise ValueError(tr("error.mask_future", name="allowed", i=i, j=j, b=b))
    if (not isinstance(position_ids, torch.Tensor) or position_ids.is_floating_point() or position_ids.dtype == torch.bool
            or tuple(position_ids.shape) not in ((T,), (1, T), (B, T))):
        raise ValueError(tr("error.position_ids", T=T, B=B, got=describe(position_ids)
                            + (f" {position_ids.dtype}" if isinstance(position_ids, torch.Tensor) else "")))
    if model.position_embedding is not None and position_ids.numel():
        low, high = int(position_ids.min()), int(position_ids.max())
        if low < 0 or high >= model.config.block_size:
            raise ValueError(tr("error.position_ids_range", low_got=low, high_got=high,
                                high=model.config.block_size - 1, block_size=model.config.block_size))


def forward_with_mask(model: GPT, idx: torch.Tensor, allowed: torch.Tensor,
                      position_ids: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] of ``model`` for tokens ``idx`` [B, T], where attention follows
    ``allowed`` ([B, 1, T, T] or [T, T] bool, True = may read) instead of the model's own
    causal mask, and token t sits at position ``position_ids[b, t]``."""
    check_mask_inputs(model, idx, allowed, position_ids)  # a clear error for a float, inverted or misshaped mask, or positions past the embeddings
    x = model.token_embedding(idx)  # [B, T, D]
    if model.position_embedding is not None:
        x = x + model.position_embedding(position_ids)
    for block in model.blocks:
        attn = block.attn
        q, k, v = attn.project(block.norm_1(x), position_ids)  # [B, H, T, d], [B, H_kv, T, d]
        gqa = {} if attn.n_kv_head == attn.n_head else {"enable_gqa": True}
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, **gqa)  # [B, H, T, d]
        x = x + attn.out_proj(merge_heads(out))
        x = x + block.mlp(block.norm_2(x))
    return model.head(model.norm_f(x))  # [B, T, V]


def pack(documents: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Concatenate documents (lists of token ids) into one row.

    Returns tokens, document ids and position ids, each [1, T]; positions
    restart at 0 at the first token of every document.
    """
    if isinstance(documents, (str, torch.Tensor)) or any(
            isinstance(doc, str) or not hasattr(doc, "__len__") for doc in documents):
        raise TypeError(tr("ch8.err_pack_type", got=describe(documents)))
    if not documents or any(len(doc) == 0 for doc in documents):
        raise ValueError(tr("ch8.err_pack"))
    tokens = torch.tensor([t for doc in documents for t in doc])[None]  # [1, T]
    document_ids = torch.cat([torch.full((len(doc),), i) for i, doc in enumerate(documents)])[None]
    position_ids = torch.cat([torch.arange(len(doc)) for doc in documents])[None]
    return tokens, document_ids, position_ids


def positions_in_documents(document_ids: torch.Tensor) -> torch.Tensor:
    """[B, T] document ids (each document one contiguous run) -> [B, T] position of each
    token inside its own document ([T] -> [T] for one row)."""
    if not isinstance(document_ids, torch.Tensor):
        raise TypeError(tr("ch8.err_documents", shape=describe(document_ids), dtype=type(document_ids).__name__))
    if document_ids.dim() not in (1, 2) or document_ids.is_floating_point() or document_ids.dtype == torch.bool:
        raise ValueError(tr("ch8.err_documents", shape=tuple(document_ids.shape), dtype=str(document_ids.dtype)))
    if document_ids.dim() == 1:
        return positions_in_documents(document_ids[None])[0]
    T = document_ids.size(-1)
    slots = torch.arange(T, device=document_ids.device).expand_as(document_ids)  # [B, T]
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]  # True where a document begins
    first_slot = torch.where(starts, slots, torch.zeros_like(slots)).cummax(dim=-1).values  # [B, T]
    return slots - first_slot


def check_documents(tokens: torch.Tensor, document_ids: torch.Tensor) -> None:
    """A clear error, in the reader's language, when ``document_ids`` does not give one whole-number
    document id per token (same shape as ``tokens``, [1, T])."""
    if (not isinstance(document_ids, torch.Tensor) or document_ids.is_floating_point() or document_ids.dtype == torch.bool
            or not isinstance(tokens, torch.Tensor) or document_ids.shape != tokens.shape or document_ids.dim() != 2):
        expected = list(tokens.shape) if isinstance(tokens, torch.Tensor) else "[1, T]"
        got = describe(document_ids) + (f" {str(document_ids.dtype).removeprefix('torch.')}"
                                        if isinstance(document_ids, torch.Tensor) else "")
        raise ValueError(tr("error.document_ids", expected=expected, got=got))


def document_leaks(model_fn: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor,
                   document_ids: torch.Tensor, vocab_size: int, seed: int = 0) -> list[float]:
    """For every document d of row 0: replace every token outside d by a random other token
    and return max |change| of d's outputs. ``model_fn`` maps tokens [1, T] to outputs [1, T, ...]
    (its mask and positions fixed inside). 0.0 for every document = no document reads another."""
    check_documents(tokens, document_ids)  # one whole-number id per token
    generator = torch.Generator().manual_seed(seed)
    reference = model_fn(tokens)
    leaks = []
    for d in document_ids[0].unique().tolist():
        inside = document_ids[0] == d  # [T]
        shift = torch.randint(1, vocab_size, tokens.shape, generator=generator)
        changed = torch.where(inside, tokens, (tokens + shift) % vocab_size)  # every other token differs
        leaks.append((model_fn(changed)[0, inside] - reference[0, inside]).abs().max().item())
    return leaks
