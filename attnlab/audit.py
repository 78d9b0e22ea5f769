"""Auditing a Hugging Face ``transformers`` model with chapter 5's tests (chapter 10).

Needs the optional extra ``attnlab[audit]`` (``transformers``, pinned in
requirements/lock.txt). Nothing is downloaded: every model is built from a small
config with random, seeded float32 weights (:func:`tiny_model`).

- :class:`Adapter` turns a model into what chapter 5's tests take, a function
  from token ids [B, T] to logits [B, T, V]: with or without left padding
  (an ``attention_mask``), through the KV cache or not, and for T5 its encoder or
  its decoder (which reads a fixed encoder output).
- :func:`audit` runs the prefix, cut and Jacobian tests (attnlab.causality) over
  a model's attention implementations, padded and not, compares cached with
  uncached logits, and returns one :class:`AuditRow` per combination;
  :func:`audit_table` prints them in the reader's language.
- :func:`register_leaky_attention` registers two broken attention functions
  through the library's own ``AttentionInterface``, to see what the audit finds.
- ``python -m attnlab.audit MODEL_CLASS_OR_CONFIG`` runs the audit from a shell.

What it can prove: at the inputs it tried, whether any output moved when the
future changed. What it cannot: inputs it did not try (other lengths, other
padding, a longer cache), code paths it did not take (flash kernels, compiled
graphs, a GPU), and leaks smaller than the tolerance of the prefix and cut
tests (the Jacobian test has none, but sees only differentiable paths).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import sys
from dataclasses import dataclass

import torch
from torch import nn

from .causality import cut_map, dependence_map, first_leak, jacobian_map
from .i18n import display_width as _width
from .i18n import get_language, set_language, tr
from .inputs import describe, whole_number

try:
    import transformers
except ImportError:  # pragma: no cover - the message says how to install the extra
    transformers = None

IMPLEMENTATIONS = ("eager", "sdpa")
PADDINGS = ("none", "left")  # what audit() runs by default
SIDES = ("none", "left", "right")  # what an Adapter takes
ATOL = 1e-5
PAD = 3  # padding slots in a padded run
LEAKY = ("audit_drops_mask", "audit_own_mask", "audit_ignores_padding")


def require_transformers():
    """The ``transformers`` module, or a clear error saying how to install it."""
    if transformers is None:
        raise ImportError(tr("audit.no_transformers"))
    transformers.logging.set_verbosity_error()  # no warnings on stderr (a notebook would fail)
    return transformers


def tiny_config(name: str):
    """A small config (hidden 32, 2 layers, vocab 128) of one of the model families of chapter 10."""
    tf = require_transformers()
    small = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 max_position_embeddings=64)
    configs = {
        "gpt2": lambda: tf.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                      bos_token_id=0, eos_token_id=0),
        "llama": lambda: tf.LlamaConfig(**small, num_attention_heads=4, num_key_value_heads=2),  # GQA: 2 heads per KV head
        "mistral": lambda: tf.MistralConfig(**small, num_attention_heads=4, num_key_value_heads=2, sliding_window=4),
        "gemma3": lambda: tf.Gemma3TextConfig(**small, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                              sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
        "bert": lambda: tf.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64),
        "t5": lambda: tf.T5Config(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                  decoder_start_token_id=0),
    }
    key = name.lower() if isinstance(name, str) else name
    if key not in configs:
        raise ValueError(tr("audit.bad_model", options=", ".join(MODELS), got=describe(name)))
    return configs[key]()


MODELS = ("gpt2", "llama", "mistral", "gemma3", "bert", "t5")
MODEL_CLASS = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
               "gemma3": "Gemma3ForCausalLM", "bert": "BertForMaskedLM", "t5": "T5ForConditionalGeneration"}


def model_from_config(config, attn_implementation: str = "sdpa", seed: int = 0, model_class=None) -> nn.Module:
    """A model with random weights (seeded, float32, eval mode) from ``config``; nothing downloaded."""
    tf = require_transformers()
    attn_implementation = check_implementation(attn_implementation)
    if model_class is None:
        name = type(config).__name__.removesuffix("Config")
        bert = tf.BertLMHeadModel if getattr(config, "is_decoder", False) else tf.BertForMaskedLM  # BERT as a decoder
        model_class = {"Bert": bert, "T5": tf.T5ForConditionalGeneration}.get(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if model_class is None:
            model = tf.AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation,
                                                        dtype=torch.float32)
        else:
            model = model_class._from_config(config, attn_implementation=attn_implementation, dtype=torch.float32)
    return model.eval()


def check_implementation(name) -> str:
    """``name`` if it runs here on a CPU: ``eager``, ``sdpa``, one of :data:`LEAKY` or a function a reader
    registered with ``AttentionInterface``; else a clear error (``flex_attention``: why it is left out)."""
    require_transformers()
    from transformers import AttentionInterface

    if name in LEAKY:
        register_leaky_attention()
    if name == "flex_attention":
        raise ValueError(tr("audit.no_flex"))
    library = ("flash_", "paged|", "flex_")  # the library's other kernels: a GPU, a paged cache, or compiled
    runs = ["eager", "sdpa", *(key for key in AttentionInterface().keys()
                               if key not in ("eager", "sdpa") and not key.startswith(library))]
    if not isinstance(name, str) or name not in runs:
        raise ValueError(tr("audit.bad_implementation", options=", ".join(runs), got=describe(name)))
    return name


def tiny_model(name: str, attn_implementation: str = "sdpa", seed: int = 0) -> nn.Module:
    """``name`` (one of :data:`MODELS`) built from :func:`tiny_config`, random weights, eval mode."""
    return model_from_config(tiny_config(name), attn_implementation, seed)


def is_encoder_decoder(model) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


def expected_causal(model, part: str | None = None) -> bool:
    """What a correct model of this kind must be: decoders causal, BERT and T5's encoder not."""
    if is_encoder_decoder(model):
        return part == "decoder"
    return bool(getattr(model.config, "is_decoder", False)) or type(model).__name__.endswith("ForCausalLM") \
        or type(model).__name__ in ("GPT2LMHeadModel", "GPT2Model") \
        or any(getattr(module, "is_causal", False) is True for module in model.modules())  # a base model (LlamaModel)


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
        raise NoCache(tr("audit.no_cache", name=type(model).__name__))
    return cache


@functools.lru_cache(maxsize=None)
def _takes_positions(model_class) -> bool:
    """Does ``model_class.forward`` take ``position_ids``? (Once per class: a signature costs a millisecond.)"""
    try:
        return "position_ids" in inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return False


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
        if is_encoder_decoder(model) and part not in ("encoder", "decoder"):
            raise ValueError(tr("audit.bad_part", got=describe(part)))
        self.model, self.padding, self.cached, self.part = model, padding, cached, part
        self.pad = 0 if padding == "none" else whole_number("pad", pad, 0)  # 0: padded, with no padding
        self.pad_ids = torch.zeros(self.pad, dtype=torch.long)  # token 0 in the padding slots
        self.takes_positions = part is None and _takes_positions(type(model))
        self.config = model.config
        self.train(model.training)  # the adapter's mode is the model's (chapter 5's tests restore it afterwards)
        if encoder_ids is None:  # the fixed sequence a decoder reads (T5)
            encoder_ids = torch.randint(1, model.config.vocab_size, (1, 7), generator=torch.Generator().manual_seed(seed))
        self.encoder_ids = as_ids(encoder_ids, model.config.vocab_size, "encoder_ids")

    def get_input_embeddings(self) -> nn.Module:
        """The token embedding the tested ids go through (T5: its encoder's or its decoder's)."""
        if self.part == "encoder":
            return self.model.get_encoder().get_input_embeddings()
        if self.part == "decoder":
            return self.model.get_decoder().get_input_embeddings()
        return self.model.get_input_embeddings()

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
        ids = as_ids(ids, self.config.vocab_size)
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
        if not self.cached:
            return output_of(self.model(input_ids=full, attention_mask=mask, **positions))[:, self._real(T)]
        pieces, past = [], None
        first = (self.pad if self.padding == "left" else 0) + max(1, T // 2)  # prefill: the first half (and left padding)
        for start, stop in [(0, first)] + [(t, t + 1) for t in range(first, full.size(1))]:
            step = {key: value[:, start:stop] for key, value in positions.items()}
            out = self.model(input_ids=full[:, start:stop], attention_mask=None if mask is None else mask[:, :stop],
                             cache=past, use_cache=True, **step)
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
            return output_of(call(ids))
        pieces, past = [], None
        first = max(1, ids.size(1) // 2)
        for start, stop in [(0, first)] + [(t, t + 1) for t in range(first, ids.size(1))]:
            out = call(ids[:, start:stop], cache=past, use_cache=True)
            pieces.append(output_of(out))
            past = _cache_of(out, self.model)
        return torch.cat(pieces, dim=1)


def padding_matches(model, ids: torch.Tensor, side: str = "left", part: str | None = None, atol: float = ATOL,
                    pad: int = PAD) -> bool:
    """Are the logits of the real tokens with ``pad`` padding tokens on ``side`` (masked by the
    ``attention_mask``) equal within ``atol`` to those without padding? A model that lets its real
    tokens read the padding fails."""
    with torch.no_grad():
        plain = Adapter(model, "none", part=part)(ids)
        padded = Adapter(model, side, part=part, pad=pad)(ids)
    return torch.allclose(plain, padded, atol=atol, rtol=0)


def padding_reads(model, ids: torch.Tensor, side: str = "left", part: str | None = None, atol: float = ATOL,
                  pad: int = PAD) -> dict:
    """Which real positions read which padding positions: ``{t: [p, ...]}`` for every real position ``t``
    (counted in the unpadded sequence) whose output moves by more than ``atol`` when the padding token at
    position ``p`` of the padded row changes. ``{}``: the padding is not read (the mask works)."""
    adapter = Adapter(model, side, part=part, pad=pad)
    ids = as_ids(ids, adapter.config.vocab_size)
    first = ids.size(1) if side == "right" else 0  # where the padding starts in the padded row
    with torch.no_grad():
        base = adapter(ids)  # [1, T, V]
        reads = {}
        for p in range(adapter.pad):
            adapter.pad_ids = torch.zeros(adapter.pad, dtype=torch.long)
            adapter.pad_ids[p] = 1  # another padding token in slot p
            moved = (adapter(ids) - base).abs().amax(dim=-1)[0] > atol  # [T]
            for t in moved.nonzero().flatten().tolist():
                reads.setdefault(t, []).append(first + p)
    return dict(sorted(reads.items()))


def cached_matches(model, ids: torch.Tensor, padding: str = "none", part: str | None = None,
                   atol: float = ATOL) -> bool:
    """Do the logits through the KV cache equal those of one uncached forward pass (within ``atol``)?"""
    ids = as_ids(ids, model.config.vocab_size)
    with torch.no_grad():
        plain = Adapter(model, padding, cached=False, part=part)(ids)
        cached = Adapter(model, padding, cached=True, part=part)(ids)
    return torch.allclose(plain, cached, atol=atol, rtol=0)


def generate_matches(model, prompts: torch.Tensor, lengths, new_tokens: int = 4, atol: float = ATOL) -> dict:
    """``generate()`` (greedy) with and without the cache on left-padded ``prompts`` [B, T]
    (row b has ``lengths[b]`` real tokens at its end): are the tokens equal, the logits close?"""
    prompts = as_ids(prompts, model.config.vocab_size, "prompts")
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
            "logits": all(torch.allclose(a, b, atol=atol, rtol=0) for a, b in zip(cached.logits, uncached.logits))}


def library_mask(model, T: int, attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                 past: int = 0, window: bool = False) -> torch.Tensor | None:
    """The mask ``transformers`` builds for ``model``'s attention implementation: bool
    [B, 1, T_q, T_kv] (True = may read) or ``None`` (SDPA's fast path: ``is_causal`` instead).

    ``T`` new tokens; ``attention_mask`` [B, past + T] (1 = real token); ``position_ids``
    [B, T] that restart at 0 mark packed sequences; ``past`` tokens already in a KV cache;
    ``window``: the mask of a sliding-window layer (``create_sliding_window_causal_mask``).
    """
    require_transformers()
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    config = model.config
    T, past = whole_number("T", T, 1), whole_number("past", past, 0)
    if attention_mask is not None:
        attention_mask = torch.as_tensor(attention_mask)
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
    and the padding of ``keep`` [B, T_kv], and the documents that restarting ``position_ids`` mark."""
    from .mask_builder import and_masks, batch_mask, document_mod, mask_mod, padding_mod

    rules = [mask_mod("causal") if window is None else mask_mod("sliding_window", window=window)]
    keep = None if keep is None else torch.as_tensor(keep)
    position_ids = None if position_ids is None else torch.as_tensor(position_ids)
    if keep is not None:
        rules.append(padding_mod(keep.bool()))
        B = keep.size(0)
    if position_ids is not None:
        rules.append(document_mod((position_ids == 0).cumsum(dim=-1) - 1))  # a new document at every 0
        B = position_ids.size(0)
    return batch_mask(and_masks(*rules), B, T_q, T_kv)


@dataclass
class AuditRow:
    """One line of the audit: which model, implementation, padding and part, what each test found."""

    model: str
    implementation: str
    padding: str
    part: str | None
    expected_causal: bool
    leaks: dict  # test -> first (t, s) above the diagonal, or None
    cache_ok: bool | None  # cached logits equal to uncached (None: no cache, an encoder)
    padding_ok: bool | None = None  # real tokens' logits padded equal to unpadded (None: not padded)

    @property
    def causal(self) -> bool:
        return all(leak is None for leak in self.leaks.values())

    @property
    def as_expected(self) -> bool:
        return self.causal == self.expected_causal and self.cache_ok is not False and self.padding_ok is not False


def test_maps(adapter: Adapter, ids: torch.Tensor, seed: int = 0) -> dict:
    """The three maps of chapter 5 for ``adapter`` on ``ids`` [1, T] (a list or a 1-D tensor [T] too)."""
    ids = as_ids(ids, getattr(adapter.config, "vocab_size", None))
    T = ids.size(1)
    jacobian = jacobian_map(adapter, ids, adapter.get_input_embeddings(), seed)  # [T, P + T] when padded
    return {"prefix": dependence_map(adapter, ids, seed), "cut": cut_map(adapter, ids),
            "jacobian": jacobian[:, adapter.real_columns(T)]}  # the real tokens' columns (right padding: the first T)


def leaks_of(adapter: Adapter, ids: torch.Tensor, atol: float = ATOL, seed: int = 0) -> dict:
    """What each of chapter 5's tests finds: ``{"prefix": (t, s) or None, "cut": ..., "jacobian": ...}``
    (as :func:`attnlab.causality.find_leaks`, for an adapter, padded or not)."""
    return {test: first_leak(m, 0.0 if test == "jacobian" else atol) for test, m in test_maps(adapter, ids, seed).items()}


def audit(model_or_name, implementations=IMPLEMENTATIONS, paddings=PADDINGS, T: int = 8, seed: int = 0,
          atol: float = ATOL) -> list[AuditRow]:
    """Chapter 5's three tests on a model, for every attention implementation and padding; a padded
    row also compares the real tokens' logits with the unpadded ones (:func:`padding_matches`).

    ``model_or_name``: a name of :data:`MODELS`, a ``transformers`` config, or a
    model (rebuilt from its config, with its class, for each implementation; the
    weights are new random ones: causality is a property of the code, not of
    the weights). Encoder-decoders are audited part by part.
    """
    require_transformers()
    if isinstance(implementations, str):  # one implementation
        implementations = (implementations,)
    if isinstance(paddings, str):
        paddings = (paddings,)
    for padding in paddings:
        if padding not in SIDES:
            raise ValueError(tr("audit.bad_padding", options=", ".join(SIDES), got=describe(padding)))
    if isinstance(model_or_name, str):
        config, model_class = tiny_config(model_or_name), None
        label = model_or_name
    elif isinstance(model_or_name, transformers.PreTrainedModel):
        config, model_class = model_or_name.config, type(model_or_name)
        label = type(model_or_name).__name__
    elif isinstance(model_or_name, transformers.PreTrainedConfig):
        config, model_class, label = model_or_name, None, type(model_or_name).__name__
    else:
        raise TypeError(tr("audit.bad_subject", got=describe(model_or_name)))
    longest = next((getattr(config, key) for key in ("max_position_embeddings", "n_positions")
                    if isinstance(getattr(config, key, None), int)), None)
    T = whole_number("T", T, 2, None if longest is None else longest - PAD)  # the padded row must fit too
    implementations = [check_implementation(impl) for impl in implementations]
    ids = torch.randint(1, config.vocab_size, (1, T), generator=torch.Generator().manual_seed(seed))
    rows = []
    for impl in implementations:
        model = model_from_config(config, impl, seed, model_class)
        parts = ("encoder", "decoder") if is_encoder_decoder(model) else (None,)
        for part in parts:
            decoder = expected_causal(model, part)
            with torch.no_grad():
                unpadded = Adapter(model, "none", part=part, seed=seed)(ids)
            for padding in paddings:
                adapter = Adapter(model, padding, part=part, seed=seed)
                leaks = leaks_of(adapter, ids, atol, seed)
                with torch.no_grad():  # as cached_matches and padding_matches, each pass computed once
                    plain = unpadded if padding == "none" else adapter(ids)
                    try:
                        cache_ok = torch.allclose(plain, Adapter(model, padding, cached=True, part=part, seed=seed)(ids),
                                                  atol=atol, rtol=0) if decoder else None
                    except NoCache:  # a decoder without a cache: the column stays empty
                        cache_ok = None
                padding_ok = None if padding == "none" else torch.allclose(unpadded, plain, atol=atol, rtol=0)
                rows.append(AuditRow(label, impl, padding, part, decoder, leaks, cache_ok, padding_ok))
    return rows


def audit_table(rows: list[AuditRow]) -> str:
    """The audit as a text table in the reader's language: one line per row, '-' = no leak found."""
    header = [tr("audit.col_model"), tr("audit.col_impl"), tr("audit.col_padding")] \
        + [tr(f"ch5.test_{test}") for test in ("prefix", "cut", "jacobian")] \
        + [tr("audit.col_cache"), tr("audit.col_padded"), tr("audit.col_verdict")]
    lines = [header]
    for row in rows:
        name = row.model if row.part is None else tr("audit.model_part", m=row.model, p=tr("audit.part_" + row.part))
        cache = "-" if row.cache_ok is None else tr("audit.yes" if row.cache_ok else "audit.no")
        padded = "-" if row.padding_ok is None else tr("audit.yes" if row.padding_ok else "audit.no")
        verdict = tr("audit.expected_causal" if row.expected_causal else "audit.expected_bidirectional")
        # a leak only where a test found one; a cache or padding that disagrees is named as such
        word = "audit.ok" if row.as_expected else "audit.wrong" if row.causal != row.expected_causal \
            else "audit.mismatch"
        verdict += ("" if verdict.endswith("：") else " ") + tr(word)  # no space after a full-width colon
        lines.append([name, row.implementation, tr(f"audit.padding_{row.padding}")]
                     + [str(row.leaks[test] or "-") for test in ("prefix", "cut", "jacobian")] + [cache, padded, verdict])
    widths = [max(_width(line[i]) for line in lines) + 2 for i in range(len(header))]
    return "\n".join("".join(cell + " " * (w - _width(cell)) for w, cell in zip(widths, line)).rstrip()
                     for line in lines)


# --------------------------------------------------------------------------
# Two broken attention functions, registered through the library's interface


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


# --------------------------------------------------------------------------
# Command line


def resolve(target: str):
    """A name of :data:`MODELS`, or a class of ``transformers`` (``LlamaForCausalLM``, ``LlamaConfig``,
    ``transformers.LlamaConfig``, ``package.module:Class``): a model class gets its tiny config."""
    tf = require_transformers()
    if target in MODELS:
        return target
    module_name, _, attr = target.rpartition(":") if ":" in target else target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name) if module_name else tf, attr)
    except (ImportError, AttributeError):
        raise ValueError(tr("audit.unknown_target", got=target, options=", ".join(MODELS))) from None
    if isinstance(obj, type) and issubclass(obj, tf.PreTrainedConfig):
        return small_config(obj)
    if isinstance(obj, type) and issubclass(obj, tf.PreTrainedModel):
        return model_from_config(small_config(obj.config_class), "eager", 0, obj)
    raise ValueError(tr("audit.unknown_target", got=target, options=", ".join(MODELS)))


def small_config(config_class):
    """``config_class`` with small sizes for whichever of the common size fields it has."""
    sizes = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=64, n_embd=32, n_layer=2, n_head=2,
                 n_positions=64, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, bos_token_id=0,
                 eos_token_id=0, pad_token_id=0, decoder_start_token_id=0)
    defaults = config_class()
    return config_class(**{k: v for k, v in sizes.items() if hasattr(defaults, k)})


class _Formatter(argparse.HelpFormatter):
    def add_usage(self, usage, actions, groups, prefix=None):
        super().add_usage(usage, actions, groups, tr("audit.cli_usage") + " ")


class _Parser(argparse.ArgumentParser):
    """argparse with the course's messages: headings and help in the reader's language, a bad
    option one localized line and exit status 2."""

    def __init__(self, **kwargs):
        super().__init__(formatter_class=_Formatter, add_help=False, **kwargs)
        self._positionals.title, self._optionals.title = tr("audit.cli_positionals"), tr("audit.cli_options")
        self.add_argument("-h", "--help", action="help", help=tr("audit.cli_help"))

    def error(self, message):
        self.exit(2, tr("audit.cli_error", usage=self.format_usage().strip(), message=message) + "\n")


def main(argv=None) -> int:
    """The command line; ``--lang`` holds for this call only (a notebook keeps its language)."""
    before = get_language()
    try:
        return _main(argv)
    finally:
        set_language(before)


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    lang = os.environ.get("ATTNLAB_LANG")
    for i, arg in enumerate(argv):  # the language first, so that every later message is in it
        value = arg.split("=", 1)[1] if arg.startswith("--lang=") else argv[i + 1] if arg == "--lang" and \
            i + 1 < len(argv) else None
        if value is not None:
            lang = value
    if lang is not None and lang not in ("en", "de", "zh"):
        print(tr("audit.cli_bad_lang", got=describe(lang)), file=sys.stderr)
        return 2
    if lang:  # else the current language (a notebook's)
        set_language(lang)
    parser = _Parser(prog="python -m attnlab.audit", description=tr("audit.cli_description"))
    parser.add_argument("target", nargs="?", help=tr("audit.cli_target", options=", ".join(MODELS)))
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS), help=tr("audit.cli_implementations"))
    parser.add_argument("--length", default="8", help=tr("audit.cli_length"))
    parser.add_argument("--lang", help=tr("audit.cli_lang"))
    args, unknown = parser.parse_known_args(argv)
    if unknown or args.target is None:
        parser.error(tr("audit.cli_unknown", got=" ".join(unknown)) if unknown
                     else tr("audit.cli_no_target", options=", ".join(MODELS)))
    try:
        length = int(args.length)
    except ValueError:
        print(tr("audit.cli_bad_length", got=describe(args.length)), file=sys.stderr)
        return 2
    try:
        implementations = tuple(impl.strip() for impl in args.implementations.split(",") if impl.strip())
        rows = audit(resolve(args.target), implementations=implementations, T=length)
    except (ValueError, TypeError, ImportError) as error:
        print(error, file=sys.stderr)
        return 2
    print(audit_table(rows))
    wrong = [row for row in rows if not row.as_expected]
    print(tr("audit.summary_wrong", n=len(wrong)) if wrong else tr("audit.summary_ok", n=len(rows)))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
