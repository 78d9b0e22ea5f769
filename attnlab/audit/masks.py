"""The library's masks against the course's: what ``transformers`` builds, and the same from chapter 8.

:func:`library_mask` asks ``transformers`` for the mask it builds for a model's attention implementation
(causal or sliding window, with padding, packed sequences and a KV cache), as bool [B, 1, T_q, T_kv], or
``None`` where SDPA's fast path uses ``is_causal`` instead; :func:`course_mask` builds the same mask with
the course's mask builder (attnlab.mask_builder), so chapter 10 compares them entry by entry.
"""

from __future__ import annotations

import torch

from ..i18n import tr
from ..inputs import as_keep_mask, whole_number
from .library import require_transformers

def library_mask(model, T: int, attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                 past: int = 0, window: bool = False) -> torch.Tensor | None:
    """The mask ``transformers`` builds for ``model``'s attention implementation: bool
    [B, 1, T_q, T_kv] (True = may read) or ``None`` (SDPA's fast path: ``is_causal`` instead).

    ``T`` new tokens; ``attention_mask`` [B, past + T] (1 = real token; an additive float mask is
    refused); ``position_ids`` [B, T] mark packed sequences (a new one wherever the step is not +1); ``past`` tokens already in a KV cache;
    ``window``: the mask of a sliding-window layer (``create_sliding_window_causal_mask``).
    """
    require_transformers()
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    config = model.config
    T, past = whole_number("T", T, 1), whole_number("past", past, 0)
    if attention_mask is not None:
        attention_mask = as_keep_mask("attention_mask", attention_mask)  # 1 = real token; an additive mask is refused
        if attention_mask.dim() != 2 or attention_mask.size(1) != past + T:
            raise ValueError(tr("audit.bad_attention_mask", n=past + T, got=tuple(attention_mask.shape)))
    if position_ids is not None:
        position_ids = torch.as_tensor(position_ids)
    B = next((x.size(0) for x in (attention_mask, position_ids) if x is not None), 1)
    cache = None
    if past:
        with torch.no_grad():
            cache = model(input_ids=torch.ones(B, past, dtype=torch.long), use_cache=True,
                          attention_mask=None if attention_mask is None else attention_mask[:, :past]).cache
    embeds = torch.zeros(B, T, config.hidden_size)  # only its shape and dtype are read
    make = create_sliding_window_causal_mask if window else create_causal_mask
    mask = make(config=config, inputs_embeds=embeds, attention_mask=attention_mask, cache=cache,
                position_ids=position_ids)
    if mask is None or mask.dtype == torch.bool:
        return mask
    return mask == 0  # eager: an additive mask, 0 = may read, the dtype's minimum = blocked


def course_mask(T_q: int, T_kv: int | None = None, keep: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, window: int | None = None, B: int = 1) -> torch.Tensor:
    """The same mask from chapters 7 and 8 (attnlab.mask_builder): causal or sliding window,
    and the padding of ``keep`` [B, T_kv], and the documents that ``position_ids`` mark: a new one
    wherever a position is not the one before it plus 1 (``find_packed_sequence_indices`` of transformers)."""
    from ..mask_builder import and_masks, batch_mask, document_mod, mask_mod, padding_mod

    rules = [mask_mod("causal") if window is None else mask_mod("sliding_window", window=window)]
    keep = None if keep is None else as_keep_mask("keep", keep)  # 1 = real token; an additive mask is refused
    position_ids = None if position_ids is None else torch.as_tensor(position_ids)
    if keep is not None:
        rules.append(padding_mod(keep.bool()))
        B = keep.size(0)
    if position_ids is not None:
        step = torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1)
        rules.append(document_mod((step != 1).cumsum(dim=-1)))  # a new document wherever the step is not +1, as transformers
        B = position_ids.size(0)
    return batch_mask(and_masks(*rules), B, T_q, T_kv)
