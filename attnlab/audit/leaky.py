"""Three attention functions broken on purpose, registered through the library's own interface.

Chapter 10 audits them to see what the tests find: ``audit_drops_mask`` reads the whole sequence,
``audit_own_mask`` loses the causal rule on SDPA's fast path (the bug class of transformers issue
#48748), ``audit_ignores_padding`` is causal but reads the padding. :func:`register_leaky_attention`
registers them with ``AttentionInterface`` under the names of :data:`LEAKY`.
"""

from __future__ import annotations

import torch

from .library import require_transformers

LEAKY = ("audit_drops_mask", "audit_own_mask", "audit_ignores_padding")


def drops_mask_attention(module, query, key, value, attention_mask, **kwargs):
    """Broken on purpose: calls the library's SDPA function without the mask and without ``is_causal``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    return sdpa_attention_forward(module, query, key, value, None, is_causal=False, **kwargs)


def own_mask_attention(module, query, key, value, attention_mask, **kwargs):
    """Broken on purpose, the bug class of transformers issue #48748: the layer adds its own
    bias to the mask it was given, and builds that bias from nothing when the mask is ``None``.
    On SDPA's fast path the library passes ``None`` and relies on ``is_causal``; a mask that is
    not ``None`` switches ``is_causal`` off, so the causal rule is lost."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    T_q, T_kv = query.size(-2), key.size(-2)
    own = torch.zeros(query.size(0), 1, T_q, T_kv, dtype=query.dtype)  # the layer's own bias (zero here)
    if attention_mask is not None:  # the causal rule arrives only when the library built a mask
        blocked = ~attention_mask if attention_mask.dtype == torch.bool else attention_mask < 0
        own = own.masked_fill(blocked[..., -T_kv:], torch.finfo(query.dtype).min)
    return sdpa_attention_forward(module, query, key, value, own, **kwargs)


def ignores_padding_attention(module, query, key, value, attention_mask, **kwargs):
    """Broken on purpose: causal, but blind to padding. It drops the mask and lets the library's SDPA
    function fall back on ``is_causal``, as a kernel that only knows "causal" would: a real token reads
    the padding before it (left padding), never the padding after it (right padding)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, None, **kwargs)


def register_leaky_attention() -> tuple[str, ...]:
    """Register :data:`LEAKY` with ``AttentionInterface`` (and SDPA's mask function with
    ``AttentionMaskInterface``, so the library builds the masks it builds for ``sdpa``)."""
    require_transformers()
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    for name, function in zip(LEAKY, (drops_mask_attention, own_mask_attention, ignores_padding_attention)):
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, sdpa_mask)
    return LEAKY
