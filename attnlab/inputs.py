"""What a learner passes to the figure and widget helpers: sentences split into
tokens, and checks that answer bad input with a clear message.

A wrong shape, a wrong count or an unknown option raises ``ValueError`` or
``TypeError`` with a message from the catalog (keys ``error.*``) in the
reader's language, saying what was expected and what came, instead of an
error from deep inside numpy or matplotlib.
"""

from __future__ import annotations

import logging
import numbers
import re
from typing import Sequence

import numpy as np
import torch

from .i18n import tr

CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_PUNCTUATION = "\u3000-\u303f\uff00-\uffef"  # 。，「」 and full-width forms
_HAS_CJK = re.compile(f"[{CJK}]")
# one CJK character or punctuation mark, or a run of anything else but spaces
_CHARACTER_TOKEN = re.compile(f"[{CJK}{CJK_PUNCTUATION}]|[^\\s{CJK}{CJK_PUNCTUATION}]+")


def split_sentence(sentence: str) -> list[str]:
    """Tokens of a sentence: words separated by spaces.

    A Chinese sentence without any space is split into words with jieba when
    it is installed (it is not a dependency of attnlab), else into characters;
    Latin words inside it stay whole. Spaces the writer put in are kept as
    the token boundaries.
    """
    if not isinstance(sentence, str):
        raise TypeError(tr("error.sentence_type", got=describe(sentence)))
    words = sentence.split()
    if len(words) != 1 or not _HAS_CJK.search(sentence):
        return words
    try:
        import jieba
    except ImportError:
        return _CHARACTER_TOKEN.findall(sentence)
    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict" on stderr (a notebook treats it as an error)
    return [word for word in jieba.lcut(sentence.strip()) if word.strip()]


def describe(value) -> str:
    """A short description of what came: the shape of a tensor, else its repr."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def whole_number(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in [low, high]; a bool, float or string is a TypeError."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(tr("error.whole_number", name=name, got=describe(value)))
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            raise ValueError(tr("error.at_least", name=name, low=low, got=value))
        raise ValueError(tr("error.between", name=name, low=low, high=high, got=value))
    return value


def positive_number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(tr("error.positive", name=name, got=describe(value)))
    return float(value)


def as_tokens(tokens, name: str = "tokens") -> list[str]:
    """A list of token strings; a sentence (one string) is split with :func:`split_sentence`."""
    if isinstance(tokens, str):
        return split_sentence(tokens)
    if isinstance(tokens, (torch.Tensor, np.ndarray)):
        tokens = tokens.tolist()
    if not isinstance(tokens, Sequence) or isinstance(tokens, bytes) or any(
            isinstance(token, (list, tuple, dict)) for token in tokens):
        raise TypeError(tr("error.tokens_type", name=name, got=describe(tokens)))
    return [str(token) for token in tokens]


def as_float_array(name: str, value) -> np.ndarray:
    """``value`` (tensor, array, nested lists) as float64 numpy."""
    if isinstance(value, torch.Tensor):
        value = value.detach().to("cpu", torch.float64).numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(tr("error.numbers", name=name, got=describe(value))) from None
    return array


def as_matrix(name: str, value) -> np.ndarray:
    """``value`` as a non-empty 2-D float64 table [queries, keys]."""
    array = as_float_array(name, value)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(tr("error.matrix_2d", name=name, shape=tuple(array.shape)))
    return array


def as_float_tensor(name: str, value) -> torch.Tensor:
    """``value`` as a float tensor on the CPU (a learner may pass numpy or ints)."""
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(as_float_array(name, value))
    value = value.detach().cpu()
    return value if value.is_floating_point() else value.float()


def drop_leading_ones(value: torch.Tensor, dims: int) -> torch.Tensor:
    """``[1, 1, T, d]`` -> ``[T, d]``: a batch (or head) of one is read as one item."""
    while value.dim() > dims and value.shape[0] == 1:
        value = value[0]
    return value


def check_bool_mask(name: str, mask: torch.Tensor) -> None:
    """A boolean mask (True = may read) passes; a 0/1 float or an additive 0/-inf mask, the other
    convention, is refused with a message that names it (``~mask`` and SDPA would misread it)."""
    if mask.dtype != torch.bool:
        dtype = str(mask.dtype).removeprefix("torch.")
        values = mask.detach()
        if values.is_floating_point() and bool((values < 0).any()) and bool(((values == 0) | (values <= -1e4)).all()):
            raise TypeError(tr("error.mask_additive", name=name, dtype=dtype))
        raise TypeError(tr("error.mask_dtype", name=name, dtype=dtype))


def as_allowed_mask(name: str, mask, T_q: int, T_kv: int, batch: int = 1, heads: int = 1) -> torch.Tensor:
    """``mask`` if it is a boolean mask (True = may read) of shape [T_q, T_kv] or [B, 1, T_q, T_kv].

    B may be 1 or ``batch``, the head axis 1 or ``heads``. A float mask is refused with a
    message that names the convention: SDPA adds a float ``attn_mask`` to the scores, so
    ``allowed.float()`` (0/1) or an additive 0/-inf mask would run, with wrong numbers.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(tr("error.mask_type", name=name, T_q=T_q, T_kv=T_kv, got=describe(mask)))
    check_bool_mask(name, mask)
    shape = tuple(mask.shape)
    if not (shape == (T_q, T_kv) or (len(shape) == 4 and shape[2:] == (T_q, T_kv)
                                     and shape[0] in (1, batch) and shape[1] in (1, heads))):
        raise ValueError(tr("error.mask_shape", name=name, T_q=T_q, T_kv=T_kv, B=batch, shape=shape))
    return mask


def as_keep_mask(name: str, mask) -> torch.Tensor:
    """A padding mask in Hugging Face's convention (1 = real token, 0 = padding; bool, int or a 0/1 float),
    as a tensor. An additive float mask (0 = may read, -inf or the dtype's minimum = blocked) is refused
    with a message that names it: ``.bool()`` of it reads every real token as padding and back."""
    mask = torch.as_tensor(mask)
    if mask.dtype == torch.bool:
        return mask
    values = mask.detach()
    if values.is_floating_point() and (bool((values < 0).any()) or not bool((values != 0).any())):  # all 0: additive too
        raise ValueError(tr("error.keep_additive", name=name, dtype=str(mask.dtype).removeprefix("torch.")))
    if not bool(((values == 0) | (values == 1)).all()):
        raise ValueError(tr("error.keep_values", name=name, values=values.unique()[:6].tolist()))
    return mask


def check_part(part, encoder_decoder: bool, model: str) -> None:
    """``part`` of a model tested by :class:`attnlab.audit.Adapter`: "encoder" or "decoder" for an
    encoder-decoder (T5), ``None`` for every other model (checked when the adapter is built, not
    when it first runs)."""
    if encoder_decoder and part not in ("encoder", "decoder"):
        raise ValueError(tr("audit.bad_part", got=describe(part)))
    if not encoder_decoder and part is not None:
        raise ValueError(tr("error.part_whole_model", model=model, got=describe(part)))
