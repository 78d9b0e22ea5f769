"""Two runs of a model that must agree: padded and unpadded, cached and uncached, ``generate()`` both ways.

:func:`padding_matches` compares the real tokens' logits with and without padding, and
:func:`padding_reads` finds which real positions read which padding positions; :func:`cached_matches`
compares the logits through the KV cache with one uncached pass; :func:`generate_matches` runs the
library's own ``generate()`` with and without the cache on left-padded prompts.
"""

from __future__ import annotations

import torch

from ..i18n import tr
from ..inputs import describe, whole_number
from .adapter import ATOL, PAD, Adapter, as_ids, tolerance
from .models import vocab_of

def padding_matches(model, ids: torch.Tensor, side: str = "left", part: str | None = None, atol: float = ATOL,
                    pad: int = PAD) -> bool:
    """Are the logits of the real tokens with ``pad`` padding tokens on ``side`` (masked by the
    ``attention_mask``) equal within ``atol`` to those without padding? A model that lets its real
    tokens read the padding fails."""
    with torch.no_grad():
        plain = Adapter(model, "none", part=part)(ids)
        padded = Adapter(model, side, part=part, pad=pad)(ids)
    return torch.allclose(plain, padded, atol=tolerance(plain, atol), rtol=0)


def padding_reads(model, ids: torch.Tensor, side: str = "left", part: str | None = None, atol: float = ATOL,
                  pad: int = PAD) -> dict:
    """Which real positions read which padding positions: ``{t: [p, ...]}`` for every real position ``t``
    (counted in the unpadded sequence) whose output moves by more than ``atol`` when the padding token at
    position ``p`` of the padded row changes. ``{}``: the padding is not read (the mask works)."""
    adapter = Adapter(model, side, part=part, pad=pad)
    ids = as_ids(ids, vocab_of(adapter.config))
    first = ids.size(1) if side == "right" else 0  # where the padding starts in the padded row
    with torch.no_grad():
        base = adapter(ids)  # [1, T, V]
        limit = tolerance(base, atol)
        reads = {}
        for p in range(adapter.pad):
            adapter.pad_ids = torch.zeros(adapter.pad, dtype=torch.long)
            adapter.pad_ids[p] = 1  # another padding token in slot p
            moved = (adapter(ids) - base).abs().amax(dim=-1)[0] > limit  # [T]
            for t in moved.nonzero().flatten().tolist():
                reads.setdefault(t, []).append(first + p)
    return dict(sorted(reads.items()))


def cached_matches(model, ids: torch.Tensor, padding: str = "none", part: str | None = None,
                   atol: float = ATOL) -> bool:
    """Do the logits through the KV cache equal those of one uncached forward pass (within ``atol``)?"""
    ids = as_ids(ids, vocab_of(model.config))
    with torch.no_grad():
        plain = Adapter(model, padding, cached=False, part=part)(ids)
        cached = Adapter(model, padding, cached=True, part=part)(ids)
    return torch.allclose(plain, cached, atol=tolerance(plain, atol), rtol=0)


def generate_matches(model, prompts: torch.Tensor, lengths, new_tokens: int = 4, atol: float = ATOL) -> dict:
    """``generate()`` (greedy) with and without the cache on left-padded ``prompts`` [B, T]
    (row b has ``lengths[b]`` real tokens at its end): are the tokens equal, the logits close?"""
    prompts = as_ids(prompts, vocab_of(model.config), "prompts")
    B, T = prompts.shape
    if isinstance(lengths, (int, torch.Tensor)) and not isinstance(lengths, bool):
        lengths = [lengths] * B if isinstance(lengths, int) else lengths.tolist()
    if not isinstance(lengths, (list, tuple)) or len(lengths) != B:
        raise ValueError(tr("audit.bad_lengths", B=B, got=describe(lengths)))
    lengths = [whole_number("lengths", n, 1, T) for n in lengths]  # 0 real tokens: nothing to continue
    mask = (torch.arange(T)[None, :] >= T - torch.as_tensor(lengths)[:, None]).long()  # [B, T], left padding
    runs = {}
    for use_cache in (True, False):
        out = model.generate(input_ids=prompts * mask, attention_mask=mask, max_new_tokens=new_tokens,
                             do_sample=False, use_cache=use_cache, pad_token_id=0, output_logits=True,
                             return_dict_in_generate=True)
        runs[use_cache] = out
    cached, uncached = runs[True], runs[False]
    return {"tokens": torch.equal(cached.sequences, uncached.sequences),
            "logits": all(torch.allclose(a, b, atol=tolerance(b, atol), rtol=0)
                      for a, b in zip(cached.logits, uncached.logits))}
