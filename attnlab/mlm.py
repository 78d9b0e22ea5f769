"""Masked language modelling (BERT): pick 15% of the tokens, corrupt them, predict them.

BERT's rule (Devlin et al. 2019, section 3.1): each token is chosen with
probability 15%. A chosen token is replaced by ``[MASK]`` 80% of the time, by a
random token 10% of the time, and left unchanged 10% of the time; the loss is
computed on the chosen positions only. (The random and unchanged cases keep
the model from learning that only ``[MASK]`` positions matter, because
``[MASK]`` never appears when the model is used.)
"""

from __future__ import annotations

import numbers

import torch

from .i18n import tr
from .inputs import describe, whole_number

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
    ids, vocab_size, mask_id, special_ids = check_mlm_inputs(ids, mask_id, vocab_size, rate, generator,
                                                             special_ids)
    device, ids = ids.device, ids.cpu()  # the generator draws on the CPU; results go back to ids' device
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
    return inputs.to(device), labels.to(device), what.to(device)


def check_mlm_inputs(ids, mask_id, vocab_size, rate, generator, special_ids):
    """What ``mlm_corrupt`` needs, checked with messages in the reader's language.

    A list of ids or another integer dtype is read as token ids (torch.long);
    one special id may be passed as an int.
    """
    if isinstance(ids, (list, tuple)):
        try:
            ids = torch.tensor(ids)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(tr("error.token_ids", got=describe(ids))) from None
    if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(tr("error.token_ids", got=describe(ids) if not isinstance(ids, torch.Tensor)
                           else f"{describe(ids)} {ids.dtype}"))
    ids = ids.long()
    vocab_size = whole_number("vocab_size", vocab_size, low=2)
    mask_id = whole_number("mask_id", mask_id, 0, vocab_size - 1)
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(tr("error.token_range", high=vocab_size - 1, low_got=int(ids.min()),
                            high_got=int(ids.max())))
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0.0 <= rate <= 1.0:
        raise ValueError(tr("error.rate", got=describe(rate)))
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(tr("error.generator", got=describe(generator)))
    if isinstance(special_ids, numbers.Integral) or isinstance(special_ids, torch.Tensor):
        special_ids = [special_ids] if isinstance(special_ids, numbers.Integral) else special_ids.flatten().tolist()
    special_ids = tuple(whole_number("special_ids", special, 0, vocab_size - 1) for special in special_ids)
    return ids, vocab_size, mask_id, special_ids
