"""Chunked prefill and shared prefixes (chapter 12): new tokens on top of a KV cache, under a mask.

A prompt of T tokens can be prefilled in chunks of C tokens: each chunk's queries read the
cache (every earlier chunk) and themselves, causally. That is the causal mask aligned to the
lower right (``torch.nn.attention.bias.causal_lower_right``): query i of a chunk that starts
after ``cache_len`` cached positions may read keys 0 .. cache_len + i. ``is_causal=True``
aligns it to the top left instead (query i reads keys 0 .. i, the oldest cached keys, and none of
its own chunk once the cache holds C positions), and is wrong as soon as the cache is not empty.
FlashAttention (2.1 on) aligns its ``causal=True`` to the lower right, like this chunk mask.

:func:`forward_with_mask` runs the course's GPT (``attnlab.gpt``) over new tokens with a mask
and positions given by the caller, writing their keys and values into a cache: chunked prefill
gives it :func:`chunk_mask`, speculative decoding the same mask over its drafted tokens, tree
speculation a tree mask and positions from the depth (``attnlab.tree_speculation``). It uses the
model's own layers, so a model changed in a notebook runs changed here too.

A shared prefix (a system prompt) is prefilled once; each request then copies that cache
(:func:`copy_cache`) and prefills only its own tokens, as one chunk on top of it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import attention
from .gpt import GPT, KVCache
from .i18n import tr
from .inputs import describe, whole_number
from .multihead import merge_heads
from .tokenizer import course_tokenizer


def chunk_mask(C, cache_len, device=None):
    C, cache_len = whole_number("C", C, low=1), whole_number("cache_len", cache_len, low=0)
    # [C, cache_len + C] bool: query i sits at position cache_len + i and reads keys 0 .. cache_len + i
    return torch.ones(C, cache_len + C, dtype=torch.bool, device=device).tril(diagonal=cache_len)


def top_left_mask(C, cache_len, device=None):
    """The mistake: ``is_causal=True`` with a cache, [C, cache_len + C]: query i reads keys 0 .. i only."""
    C, cache_len = whole_number("C", C, low=1), whole_number("cache_len", cache_len, low=0)
    return torch.ones(C, cache_len + C, dtype=torch.bool, device=device).tril()


def check_model(model) -> None:
    """The course's causal GPT without a sliding window (its own mask would be needed on top)."""
    if not isinstance(model, GPT):
        raise TypeError(tr("ch12.err_model", got=describe(model)))
    if not model.config.causal or model.config.window is not None:
        raise ValueError(tr("ch12.err_model_kind"))


def check_masked_inputs(model, idx, cache, allowed, positions) -> torch.Tensor:
    """Clear errors before :func:`forward_with_mask` runs; returns the positions [T_new]."""
    check_model(model)
    check_not_empty(idx)
    model.check_idx(idx)
    if not hasattr(cache, "update") or not hasattr(cache, "pos"):
        raise TypeError(tr("error.gpt_cache_type", got=describe(cache)))
    B, T_new = idx.shape
    cache.check_fits(model.config, B, T_new)
    shape = (T_new, cache.pos + T_new)
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool or tuple(allowed.shape) != shape:
        got = f"{describe(allowed)} {allowed.dtype}" if isinstance(allowed, torch.Tensor) else describe(allowed)
        raise ValueError(tr("ch12.err_allowed", shape=shape, got=got))
    if not allowed.any(dim=-1).all():
        raise ValueError(tr("ch12.err_empty_row"))
    if positions is None:
        positions = torch.arange(cache.pos, cache.pos + T_new)
    if not isinstance(positions, torch.Tensor) or positions.shape != (T_new,) or positions.is_floating_point():
        raise ValueError(tr("ch12.err_positions", T=T_new, got=describe(positions)))
    if T_new and model.position_embedding is not None and not 0 <= int(positions.min()) <= int(positions.max()) < model.config.block_size:
        raise ValueError(tr("error.block_size", first=int(positions.min()), last=int(positions.max()),
                            block_size=model.config.block_size))
    return positions.to(torch.long)


@torch.no_grad()
def forward_with_mask(model, idx, cache, allowed, positions=None):
    """Logits [B, T_new, V] of the new tokens ``idx`` [B, T_new] on top of ``cache``.

    Query i reads the keys where ``allowed[i]`` is True ([T_new, cache.pos + T_new], True = may
    read; the first cache.pos columns are the cached keys). ``positions`` [T_new] place the tokens
    in the sequence (default cache.pos, cache.pos + 1, ...). Their keys and values are written at
    cache.pos .. cache.pos + T_new - 1, and cache.pos moves on by T_new.
    """
    positions = check_masked_inputs(model, idx, cache, allowed, positions)
    device = model.token_embedding.weight.device
    positions, allowed = positions.to(device), allowed.to(device)
    x = model.token_embedding(idx)  # [B, T_new, D]
    if model.position_embedding is not None:  # RoPE rotates q and k by these positions instead
        x = x + model.position_embedding(positions)
    for block in model.blocks:
        attn = block.attn
        q, k, v = attn.project(block.norm_1(x), positions)  # [B, H, T_new, d], [B, H_kv, T_new, d]
        k, v = cache.update(attn.layer, k, v)  # [B, H_kv, cache.pos + T_new, d]
        x = x + attn.out_proj(merge_heads(attend_with_mask(attn, q, k, v, allowed)))
        x = x + block.mlp(block.norm_2(x))
    cache.advance(idx.size(1))
    return model.head(model.norm_f(x))  # [B, T_new, V]


def attend_with_mask(attn, q, k, v, allowed):
    """[B, H, T_q, d] queries over [B, H_kv, T_kv, d] keys with an ``allowed`` [T_q, T_kv] mask,
    as the model's attention would compute them (SDPA, or chapter 1's explicit attention)."""
    groups = attn.n_head // attn.n_kv_head
    if attn.config.attention == "explicit":  # the [B, H, T_q, T_kv] scores exist as a tensor
        if groups > 1:
            k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        return attention(q, k, v, allowed)
    gqa = {"enable_gqa": True} if groups > 1 else {}
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, **gqa)


def prefill_in_chunks(model, ids, chunk_size, cache, mask=chunk_mask):
    check_prefill_inputs(model, ids, chunk_size)  # clear errors for a wrong model, prompt or chunk size
    logits = []
    for start in range(0, ids.size(1), chunk_size):
        chunk = ids[:, start:start + chunk_size]  # [B, C] (the last chunk may be shorter)
        allowed = mask(chunk.size(1), cache.pos)  # [C, cache.pos + C]
        logits.append(forward_with_mask(model, chunk, cache, allowed))
    return torch.cat(logits, dim=1)  # [B, T, V]


def check_prefill_inputs(model, ids, chunk_size) -> None:
    check_model(model)
    check_not_empty(ids)
    model.check_idx(ids)
    whole_number("chunk_size", chunk_size, low=1)


def check_not_empty(ids) -> None:
    """An empty prompt is named as such, before its dtype (``torch.tensor([[]])`` is float32)."""
    if isinstance(ids, torch.Tensor) and ids.dim() == 2 and ids.size(1) == 0:
        raise ValueError(tr("ch12.err_empty_prompt", got=describe(ids)))


def prompt_ids(text: str) -> torch.Tensor:
    """[1, T] token ids (torch.long) of ``text`` under the course's tokenizer; a clear error for an empty text."""
    if not isinstance(text, str):
        raise TypeError(tr("ch12.err_prompt_text", got=describe(text)))
    ids = course_tokenizer().encode(text)
    if not ids:
        raise ValueError(tr("ch12.err_empty_prompt", got=repr(text)))
    return torch.tensor([ids], dtype=torch.long)


def copy_cache(cache: KVCache, max_len: int | None = None) -> KVCache:
    """A new cache that starts with the ``cache.pos`` filled positions of ``cache`` (a shared prefix),
    with room for ``max_len`` positions in all (default: as many as ``cache`` has)."""
    if not isinstance(cache, KVCache):
        raise TypeError(tr("error.gpt_cache_type", got=describe(cache)))
    L, B, H, room, d = cache.k.shape
    max_len = room if max_len is None else whole_number("max_len", max_len, low=max(cache.pos, 1))
    copy = KVCache.__new__(KVCache)
    copy.k = cache.k.new_zeros(L, B, H, max_len, d)  # [L, B, H_kv, max_len, d]
    copy.v = cache.v.new_zeros(L, B, H, max_len, d)
    copy.k[:, :, :, :cache.pos] = cache.k[:, :, :, :cache.pos]
    copy.v[:, :, :, :cache.pos] = cache.v[:, :, :, :cache.pos]
    copy.pos, copy.max_len = cache.pos, max_len
    return copy


def chunk_scores(T: int, C: int) -> list[int]:
    """Per chunk of a prompt of ``T`` tokens in chunks of ``C``: the scores it computes per head, its
    queries x the keys up to its end (C x (start + C); the last chunk may be shorter)."""
    T, C = whole_number("T", T, low=1), whole_number("C", C, low=1)
    return [min(C, T - start) * (start + min(C, T - start)) for start in range(0, T, C)]


def prefill_work(prefix_len: int, request_lens, shared: bool) -> dict:
    """Tokens a prefill runs through the model, and attention scores it computes (query-key pairs
    a causal mask allows), for requests that all start with the same ``prefix_len`` tokens."""
    prefix_len = whole_number("prefix_len", prefix_len, low=0)
    lens = [whole_number("request_len", n, low=1) for n in request_lens]
    pairs = lambda first, last: sum(range(first + 1, last + 1))  # noqa: E731 - queries first..last-1, causal
    if shared:
        tokens = prefix_len + sum(lens)
        scores = pairs(0, prefix_len) + sum(pairs(prefix_len, prefix_len + n) for n in lens)
    else:
        tokens = sum(prefix_len + n for n in lens)
        scores = sum(pairs(0, prefix_len + n) for n in lens)
    return {"tokens": tokens, "scores": scores}
