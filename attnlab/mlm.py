"""Masked language modelling (BERT): pick 15% of the tokens, corrupt them, predict them.

BERT's rule (Devlin et al. 2019, section 3.1): each token is chosen with
probability 15%. A chosen token is replaced by ``[MASK]`` 80% of the time, by a
random token 10% of the time, and left unchanged 10% of the time; the loss is
computed on the chosen positions only. (The random and unchanged cases keep
the model from learning that only ``[MASK]`` positions matter, because
``[MASK]`` never appears when the model is used.)
"""

from __future__ import annotations

import torch

NOT_CHOSEN, MASKED, RANDOM, KEPT = 0, 1, 2, 3  # what happened to each position
IGNORE = -100  # label of a position without loss (F.cross_entropy's ignore_index)


def mlm_corrupt(ids: torch.Tensor, mask_id: int, vocab_size: int, rate: float = 0.15,
                generator: torch.Generator | None = None, special_ids: tuple[int, ...] = ()
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 corruption of ``ids`` [B, T] (or [T]).

    Returns ``inputs`` (the corrupted ids), ``labels`` (the original id where a
    position was chosen, ``IGNORE`` elsewhere) and ``what`` (NOT_CHOSEN,
    MASKED, RANDOM or KEPT per position), all shaped like ``ids``.
    Tokens in ``special_ids`` are never chosen.
    """
    if ids.dtype != torch.long:
        raise TypeError(f"ids must be token ids (torch.long), not {ids.dtype}")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate}")
    u = torch.rand(ids.shape, generator=generator)  # [B, T]: is the position chosen?
    chosen = u < rate
    for special in special_ids:
        chosen &= ids != special
    action = torch.rand(ids.shape, generator=generator)  # [B, T]: 80 / 10 / 10
    masked = chosen & (action < 0.8)
    randomized = chosen & (action >= 0.8) & (action < 0.9)
    kept = chosen & (action >= 0.9)
    random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator)
    inputs = torch.where(masked, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(randomized, random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    what = torch.full_like(ids, NOT_CHOSEN)
    what[masked], what[randomized], what[kept] = MASKED, RANDOM, KEPT
    return inputs, labels, what
