"""A ``transformers`` model as the function chapter 5's tests take: token ids [B, T] -> logits [B, T, V].

:class:`Adapter` runs the model with or without padding (an ``attention_mask``, left or right), through
the KV cache or not, and for an encoder-decoder (T5) its encoder or its decoder (which reads a fixed
encoder output). Beside it: the checks on token ids (:func:`as_ids`), what the tests compare
(:func:`output_of`), how a model takes its cache (:func:`cache_keyword`, :func:`step_mask`), and the
tolerance relative to the logits' scale (:func:`tolerance`).
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import nn

from ..i18n import tr
from ..inputs import check_part, describe, whole_number
from .models import is_encoder_decoder, vocab_of

SIDES = ("none", "left", "right")  # what an Adapter takes
ATOL = 1e-5
PAD = 3  # padding slots in a padded run


def as_ids(ids, vocab_size: int | None = None, name: str = "ids") -> torch.Tensor:
    """Token ids as a long tensor [B, T]: a list (of lists) or a 1-D tensor [T] is accepted as one reading
    (a batch of one); floats, an empty sequence or ids outside the vocabulary are a clear error."""
    if not isinstance(ids, torch.Tensor):
        try:
            ids = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(tr("audit.bad_ids", name=name, got=describe(ids))) from None
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.numel() == 0 or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(tr("audit.bad_ids", name=name, got=f"{tuple(ids.shape)}, {ids.dtype}"))
    ids = ids.long()
    if vocab_size is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(tr("audit.ids_range", name=name, last=vocab_size - 1, low=int(ids.min()), high=int(ids.max())))
    return ids


def output_of(out, name: str = "model") -> torch.Tensor:
    """What chapter 5's tests compare: ``.logits``, else ``.last_hidden_state`` (a base model such as
    ``LlamaModel`` has no language-model head), else the tensor itself or the first of a tuple."""
    for attr in ("logits", "last_hidden_state"):
        if getattr(out, attr, None) is not None:
            return getattr(out, attr)
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]
    if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dim() == 3:
        return out
    raise TypeError(tr("audit.no_logits", name=name, got=type(out).__name__))


class NoCache(ValueError):
    """The model returns no KV cache (an encoder, or a head without one): nothing to compare."""


def _cache_of(out, model):
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)  # earlier transformers versions: the older name
    if cache is None:
        raise NoCache(tr("audit.no_cache", name=type(model).__name__))
    return cache


@functools.lru_cache(maxsize=None)
def _parameters(model_class) -> frozenset:
    """The keyword arguments ``model_class.forward`` takes (once per class: a signature costs a millisecond)."""
    try:
        return frozenset(inspect.signature(model_class.forward).parameters)
    except (TypeError, ValueError):
        return frozenset()


def _takes_positions(model_class) -> bool:
    """Does ``model_class.forward`` take ``position_ids``?"""
    return "position_ids" in _parameters(model_class)


@functools.lru_cache(maxsize=None)
def no_cache(model_class) -> dict:
    """``{"use_cache": False}`` where ``model_class.forward`` takes it, by name or through ``**kwargs``
    (GraniteMoe: left to the config, its "uncached" pass would build a cache), else ``{}``."""
    try:
        parameters = inspect.signature(model_class.forward).parameters.values()
    except (TypeError, ValueError):
        return {}
    takes = any(p.name == "use_cache" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    return {"use_cache": False} if takes else {}


def cache_keyword(model_class) -> str | None:
    """The keyword through which ``model_class.forward`` takes a KV cache: ``cache`` (recent transformers),
    ``past_key_values`` (earlier versions), or ``None`` (it takes none: the cache check cannot run)."""
    params = _parameters(model_class)
    return next((key for key in ("cache", "past_key_values") if key in params), None)


def tolerance(reference: torch.Tensor, atol: float = ATOL) -> float:
    """``atol`` relative to the scale of the logits: ``atol * max(1, max |reference|)``. float32 keeps
    about 7 digits, so logits near 25 carry rounding noise near 1e-6 * 25; a fixed 1e-5 would call that
    noise a difference (and its verdict would flip with the thread count)."""
    return atol * max(1.0, float(reference.detach().abs().max())) if reference.numel() else atol


def step_mask(model, ids: torch.Tensor, mask: torch.Tensor | None, start: int, stop: int, past):
    """The ``attention_mask`` the library passes at a cached step covering ``start:stop`` (as ``generate()``
    does, through ``prepare_inputs_for_generation``): the mask over the cache and the step for an attention
    model, ``None`` where a recurrent model (Mamba) takes none after the first step. Falls back on the mask
    over cache and step where the model's ``prepare_inputs_for_generation`` cannot be called this way."""
    if mask is None:
        return None
    full = mask[:, :stop]
    prepare = getattr(model, "prepare_inputs_for_generation", None)
    if prepare is None or start == 0:
        return full
    try:
        inputs = prepare(ids[:, :stop], next_sequence_length=stop - start, attention_mask=full, use_cache=True,
                         is_first_iteration=False, **{cache_keyword(type(model)) or "cache": past})
    except Exception:  # another signature (another transformers version, a model's own override)
        return full
    if "attention_mask" not in inputs:
        return full
    given = inputs["attention_mask"]
    return given if given is None or (isinstance(given, torch.Tensor) and given.dim() == 2) else full


class CopiedEmbedding(nn.Module):
    """A token embedding whose output is a copy. CTRL scales its embeddings in place and GIT adds its
    positions in place; the Jacobian test's hook makes the embedding return the tensor it differentiates
    by, a leaf, which PyTorch does not let a model change in place. The copy has the same values and
    gradients; the hook goes on :attr:`inner` (:meth:`Adapter.get_input_embeddings`)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    @property
    def weight(self):
        return self.inner.weight

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs).clone()


# models that change their embeddings' output in place (Blt adds its hash embeddings: `embeddings += ...`)
IN_PLACE_EMBEDDINGS = ("CTRLLMHeadModel", "GitForCausalLM", "BltForCausalLM")


class Adapter(nn.Module):
    """``model`` as a function of token ids [B, T] -> logits [B, T, V], the form chapter 5's tests take.

    ``padding="left"`` (or ``"right"``): ``pad`` padding tokens (:attr:`pad_ids`, token 0) go before (after)
    the sequence, with an ``attention_mask`` that blocks them and, where the model takes them, ``position_ids``
    that count only the real tokens (as ``generate()`` passes them); the logits of the real tokens come back.
    ``cached=True``: the logits come from the KV cache, one token after another
    (after a prefill of the first half). ``part``: for an encoder-decoder (T5),
    ``"encoder"`` (its last hidden states stand in for the logits) or ``"decoder"``
    (decoder input ids; the encoder reads a fixed sequence once, ``encoder_ids`` [1, S] or a random one).
    """

    def __init__(self, model, padding: str = "none", cached: bool = False, part: str | None = None, seed: int = 0,
                 encoder_ids: torch.Tensor | None = None, pad: int = PAD):
        super().__init__()
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise TypeError(tr("audit.bad_subject", got=describe(model)))
        if padding not in SIDES:
            raise ValueError(tr("audit.bad_padding", options=", ".join(SIDES), got=describe(padding)))
        check_part(part, is_encoder_decoder(model), type(model).__name__)
        self.model, self.padding, self.cached, self.part = model, padding, cached, part
        self.pad = 0 if padding == "none" else whole_number("pad", pad, 0)  # 0: padded, with no padding
        self.pad_ids = torch.zeros(self.pad, dtype=torch.long)  # token 0 in the padding slots
        self.takes_positions = part is None and _takes_positions(type(model))
        self.config = model.config
        self.vocab_size = vocab_of(model.config)  # the token ids' (a multimodal model: its text vocabulary)
        self.train(model.training)  # the adapter's mode is the model's (chapter 5's tests restore it afterwards)
        if encoder_ids is None:  # the fixed sequence a decoder reads (T5)
            encoder_ids = torch.randint(1, vocab_of(model.config), (1, 7), generator=torch.Generator().manual_seed(seed))
        self.encoder_ids = as_ids(encoder_ids, vocab_of(model.config), "encoder_ids")

    def get_input_embeddings(self) -> nn.Module:
        """The token embedding the tested ids go through (T5: its encoder's or its decoder's)."""
        if self.part == "encoder":
            return self.model.get_encoder().get_input_embeddings()
        if self.part == "decoder":
            return self.model.get_decoder().get_input_embeddings()
        embedding = self.model.get_input_embeddings()
        if isinstance(embedding, nn.ModuleList) and len(embedding) == 1:  # MusicGen: one table per codebook
            return embedding[0]
        return embedding.inner if isinstance(embedding, CopiedEmbedding) else embedding

    def _padded(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.padding == "none":
            return ids, None
        B = ids.size(0)
        pads = self.pad_ids.to(ids.dtype).expand(B, -1)  # [B, pad]
        zeros, ones = torch.zeros(B, self.pad, dtype=torch.long), torch.ones_like(ids)
        if self.padding == "left":
            return torch.cat([pads, ids], dim=1), torch.cat([zeros, ones], dim=1)
        return torch.cat([ids, pads], dim=1), torch.cat([ones, zeros], dim=1)

    def _real(self, T: int) -> slice:
        """Where the real tokens are in a padded row of T real tokens."""
        return slice(self.pad, self.pad + T) if self.padding == "left" else slice(0, T)

    def real_columns(self, T: int) -> slice:
        """Where the vectors of the T real tokens are among those the tested embedding returns (the
        columns of chapter 5's Jacobian map): after the padding on the left, before it on the right;
        a decoder (T5) is not padded."""
        return slice(0, T) if self.part == "decoder" else self._real(T)

    def _positions(self, mask):
        """``position_ids`` [B, pad + T] that count only the real tokens, if the model takes them."""
        if mask is None or not self.takes_positions:
            return {}
        return {"position_ids": (mask.cumsum(dim=-1) - 1).clamp(min=0)}

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = as_ids(ids, vocab_of(self.config))
        T = ids.size(1)
        if self.part == "encoder":
            full, mask = self._padded(ids)
            hidden = self.model.get_encoder()(input_ids=full, attention_mask=mask).last_hidden_state
            return hidden[:, self._real(T)]  # the real tokens' outputs
        if self.part == "decoder":
            encoder_out, enc_mask = self._encoded()
            B = ids.size(0)
            run = dict(encoder_outputs=(encoder_out.expand(B, -1, -1),),
                       attention_mask=None if enc_mask is None else enc_mask.expand(B, -1))
            return self._decode(ids, lambda x, **kw: self.model(decoder_input_ids=x, **run, **kw))
        full, mask = self._padded(ids)
        positions = self._positions(mask)
        if not self.cached:  # no cache built either (a cache layer that crashes is the cached run's finding)
            return output_of(self.model(input_ids=full, attention_mask=mask, **positions, **no_cache(type(self.model))))[
                :, self._real(T)]
        pieces, past = [], None
        keyword = cache_keyword(type(self.model))
        if keyword is None:
            raise NoCache(tr("audit.no_cache_keyword", name=type(self.model).__name__))
        first = (self.pad if self.padding == "left" else 0) + max(1, T // 2)  # prefill: the first half (and left padding)
        for start, stop in [(0, first)] + [(t, t + 1) for t in range(first, full.size(1))]:
            step = {key: value[:, start:stop] for key, value in positions.items()}
            out = self.model(input_ids=full[:, start:stop], attention_mask=step_mask(self.model, full, mask, start, stop, past),
                             use_cache=True, **{keyword: past}, **step)
            pieces.append(output_of(out))
            past = _cache_of(out, self.model)
        return torch.cat(pieces, dim=1)[:, self._real(T)]

    def _encoded(self):
        """The encoder's output for the fixed encoder sequence, computed once (so the shared
        token embedding is called only by the decoder, as the Jacobian test needs)."""
        if getattr(self, "_encoder_cache", None) is None:
            enc_ids, enc_mask = self._padded(self.encoder_ids)
            with torch.no_grad():
                hidden = self.model.get_encoder()(input_ids=enc_ids, attention_mask=enc_mask).last_hidden_state
            self._encoder_cache = (hidden, enc_mask)
        return self._encoder_cache

    def _decode(self, ids, call):
        if not self.cached:
            return output_of(call(ids, **no_cache(type(self.model))))
        pieces, past = [], None
        first = max(1, ids.size(1) // 2)
        for start, stop in [(0, first)] + [(t, t + 1) for t in range(first, ids.size(1))]:
            out = call(ids[:, start:stop], use_cache=True, **{cache_keyword(type(self.model)) or "cache": past})
            pieces.append(output_of(out))
            past = _cache_of(out, self.model)
        return torch.cat(pieces, dim=1)
