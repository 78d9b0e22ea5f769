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
import copy
import functools
import importlib
import inspect
import os
import re
import sys
from dataclasses import dataclass

import torch
from torch import nn

from .causality import cut_map, dependence_map, first_leak, jacobian_map
from .i18n import display_width as _width
from .i18n import get_language, set_language, tr
from .inputs import as_keep_mask, check_part, describe, whole_number

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
    if model_class is None and not _registered_config(config):
        raise ValueError(tr("audit.not_registered", config=type(config).__name__))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if model_class is None:
            model = tf.AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation,
                                                        dtype=torch.float32)
        else:
            model = model_class._from_config(config, attn_implementation=attn_implementation, dtype=torch.float32)
    return model.eval()


def _registered_config(config) -> bool:
    """Is ``type(config)`` registered with ``AutoModelForCausalLM`` (or BERT or T5, built by class)?"""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return type(config).__name__ in ("BertConfig", "T5Config") or type(config) in MODEL_FOR_CAUSAL_LM_MAPPING


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


def registered_as(model_class) -> str | None:
    """How ``transformers`` registers ``model_class`` (a class or its name): ``"causal"`` (a class of
    ``AutoModelForCausalLM``), ``"masked"`` (``AutoModelForMaskedLM``), ``"seq2seq"``
    (``AutoModelForSeq2SeqLM``), or ``None`` (a base model, or a class the auto mappings do not list).
    The expectation comes from this registration, never from the class's name."""
    tf = require_transformers()
    name = model_class if isinstance(model_class, str) else getattr(model_class, "__name__", "")
    for kind, mapping in _mappings(tf).items():
        if name in mapping:
            return kind
    return None


@functools.lru_cache(maxsize=None)
def _mapping_names(tf_version: str) -> dict:
    from transformers.models.auto import modeling_auto

    names = {}
    for kind, attr in (("causal", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"), ("masked", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
                       ("seq2seq", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES")):
        mapping = getattr(modeling_auto, attr, {})
        names[kind] = frozenset(n for value in mapping.values() for n in ((value,) if isinstance(value, str) else value))
    return names


def _mappings(tf) -> dict:
    return _mapping_names(tf.__version__)


def expected_causal(model, part: str | None = None) -> bool:
    """What a correct model of this kind must be, from the class's registration with the auto classes:
    a causal-LM class (and T5's or BART's decoder) causal, a masked-LM class and an encoder not; a base
    model (``LlamaModel``) causal when the config says it is a decoder or its layers are causal."""
    if is_encoder_decoder(model):
        return part == "decoder"
    kind = registered_as(type(model))
    if kind == "causal":
        return True
    if kind == "masked":
        return bool(getattr(model.config, "is_decoder", False))
    return bool(getattr(model.config, "is_decoder", False)) \
        or any(getattr(module, "is_causal", False) is True for module in model.modules())  # a base model (LlamaModel)


def as_decoder(config, model_class):
    """``config`` as the library intends it for ``model_class``: a causal-LM class of an encoder family
    (``RobertaForCausalLM``, ``BertLMHeadModel``) needs ``is_decoder=True``, else it runs as a bidirectional
    encoder (the library warns "add `is_decoder=True`"). Returns the config (a copy when changed) and what
    was set, ``{}`` when nothing was."""
    if model_class is None or registered_as(model_class) != "causal" or getattr(config, "is_encoder_decoder", False):
        return config, {}
    changed = {key: True for key in ("is_decoder", "causal")  # XLM: causal=False is its masked-LM setting
               if isinstance(getattr(config, key, None), bool) and not getattr(config, key)}
    if changed:
        config = copy.deepcopy(config)
        for key in changed:
            setattr(config, key, True)
    return config, changed


def vocab_of(config) -> int | None:
    """The vocabulary size of ``config``, or of its text config (a multimodal model's)."""
    size = getattr(config, "vocab_size", None)
    if size is None and hasattr(config, "get_text_config"):
        size = getattr(config.get_text_config(), "vocab_size", None)
    return size


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


IN_PLACE_EMBEDDINGS = ("CTRLLMHeadModel", "GitForCausalLM")  # models that change their embeddings' output in place


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
            off = {"use_cache": False} if "use_cache" in _parameters(type(self.model)) else {}
            return output_of(self.model(input_ids=full, attention_mask=mask, **positions, **off))[:, self._real(T)]
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
            return output_of(call(ids))
        pieces, past = [], None
        first = max(1, ids.size(1) // 2)
        for start, stop in [(0, first)] + [(t, t + 1) for t in range(first, ids.size(1))]:
            out = call(ids[:, start:stop], use_cache=True, **{cache_keyword(type(self.model)) or "cache": past})
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
    from .mask_builder import and_masks, batch_mask, document_mod, mask_mod, padding_mod

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
    padding_read: bool | None = None  # where padding_ok is False: does a real token read the padding? (False:
    # the padding is not read, only the absolute positions shifted, as in a model that takes no position_ids)
    tolerance: float = ATOL  # of the prefix and cut tests and the comparisons: ATOL relative to the logits' scale
    cache_diff: float | None = None  # max |cached - uncached| where the cache disagrees
    padding_diff: float | None = None  # max |padded - unpadded| where they differ

    @property
    def causal(self) -> bool:
        return all(leak is None for leak in self.leaks.values())

    @property
    def as_expected(self) -> bool:
        return self.causal == self.expected_causal and self.cache_ok is not False \
            and (self.padding_ok is not False or self.padding_read is False)

    @property
    def leaking(self) -> bool:
        """A decoder in which a test found an output that reads a later input."""
        return self.expected_causal and not self.causal


def test_maps(adapter: Adapter, ids: torch.Tensor, seed: int = 0) -> dict:
    """The three maps of chapter 5 for ``adapter`` on ``ids`` [1, T] (a list or a 1-D tensor [T] too)."""
    ids = as_ids(ids, vocab_of(adapter.config))
    T = ids.size(1)
    jacobian = jacobian_map(adapter, ids, adapter.get_input_embeddings(), seed)  # [T, P + T] when padded
    return {"prefix": dependence_map(adapter, ids, seed), "cut": cut_map(adapter, ids),
            "jacobian": jacobian[:, adapter.real_columns(T)]}  # the real tokens' columns (right padding: the first T)


def leaks_of(adapter: Adapter, ids: torch.Tensor, atol: float = ATOL, seed: int = 0) -> dict:
    """What each of chapter 5's tests finds: ``{"prefix": (t, s) or None, "cut": ..., "jacobian": ...}``
    (as :func:`attnlab.causality.find_leaks`, for an adapter, padded or not)."""
    return {test: first_leak(m, 0.0 if test == "jacobian" else atol) for test, m in test_maps(adapter, ids, seed).items()}


class Keyed(RuntimeError):
    """The auditor's own reason for a verdict, as a message key and its values: the JSON keeps both, so the
    page renders the reason in each reader's language (``str()`` of it is the English text)."""

    def __init__(self, key: str, **values):
        super().__init__(tr(key, lang="en", **values))
        self.key, self.values = key, values


class LibraryError(RuntimeError):
    """The library crashed on a valid input (a model it built, token ids in its vocabulary): a finding."""

    def __init__(self, message: str, repro: str):
        super().__init__(message)
        self.message, self.repro = message, repro


# transformers' message for an optional package that is not installed ("TimmWrapperModel requires the
# timm library but it was not found in your environment"): the environment lacks it, the library is fine
MISSING_PACKAGE = re.compile(r"ImportError: .* requires the \S+ library but it was not found")


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (no traceback). A first line
    that ends in a colon announces the next one ("... validator 'validate_architecture':"), so that one is
    joined to it."""
    text = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    if first.endswith(":") and len(text) > 1:
        first = f"{first} {text[1]}"
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def repro_line(config, model_class, padding: str, cached: bool) -> str:
    """A one-line Python command that builds the tiny model from the library alone and makes the call
    that failed (the non-default config values, the first half of 8 tokens, then one cached step)."""
    try:
        default = type(config)().to_dict()
    except Exception:
        default = {}
    diff = {k: v for k, v in config.to_dict().items()
            if k not in ("transformers_version", "architectures", "model_type", "dtype", "torch_dtype")
            and isinstance(v, (int, float, bool, str)) and default.get(k, object()) != v}
    call = "o = m(x[:, :4], use_cache=True); m(x[:, 4:5], use_cache=True, cache=o.cache)" if cached \
        else "m(x)"
    return (f"python -c \"import torch, transformers as t; m = t.{model_class.__name__}(t.{type(config).__name__}"
            f"(**{diff!r})).eval(); x = torch.ones(1, 8, dtype=torch.long); {call}\"")


def _generate_runs(model, ids) -> bool:
    """Does the library's own ``generate()`` run with the cache (the second method behind a LIBRARY ERROR)?"""
    try:
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=False,
                           use_cache=True, pad_token_id=0)
        return True
    except Exception:
        return False


def _generate_agrees(model, ids, atol: float) -> bool:
    """Do ``generate()``'s logits with and without the cache agree (the second method behind a cache
    difference the auditor's own cached pass found)? False also where ``generate()`` cannot run."""
    try:
        return all(generate_matches(model, ids, ids.size(1), new_tokens=2, atol=atol).values())
    except Exception:
        return False


def _subject(model_or_name):
    """(config, model class or None, label) for what audit() takes; a string that is not one of
    :data:`MODELS` is resolved as the command line resolves it (``LlamaForCausalLM``, ``module:Class``)."""
    tf = require_transformers()
    if isinstance(model_or_name, str) and model_or_name.lower() not in MODELS:
        model_or_name = resolve(model_or_name)
    if isinstance(model_or_name, str):
        return tiny_config(model_or_name), None, model_or_name
    if isinstance(model_or_name, type) and issubclass(model_or_name, tf.PreTrainedModel):
        return small_config(model_or_name.config_class), model_or_name, model_or_name.__name__
    if isinstance(model_or_name, type) and issubclass(model_or_name, tf.PreTrainedConfig):
        return small_config(model_or_name), None, model_or_name.__name__
    if isinstance(model_or_name, tf.PreTrainedModel):
        return model_or_name.config, type(model_or_name), type(model_or_name).__name__
    if isinstance(model_or_name, tf.PreTrainedConfig):
        return model_or_name, None, type(model_or_name).__name__
    raise TypeError(tr("audit.bad_subject", got=describe(model_or_name)))


def audit(model_or_name, implementations=IMPLEMENTATIONS, paddings=PADDINGS, T: int = 8, seed: int = 0,
          atol: float = ATOL, notes: list | None = None) -> list[AuditRow]:
    """Chapter 5's three tests on a model, for every attention implementation and padding; a padded
    row also compares the real tokens' logits with the unpadded ones (:func:`padding_matches`).

    ``model_or_name``: a name of :data:`MODELS`, a class of ``transformers`` or its name
    (``"LlamaForCausalLM"``, ``"module:Class"``), a config, or a model (rebuilt from its config, with its
    class, for each implementation; the weights are new random ones: causality is a property of the
    code, not of the weights). Encoder-decoders are audited part by part. A causal-LM class of an
    encoder family is built as a decoder (``is_decoder=True``); an implementation the class refuses is
    skipped. What was set or skipped is appended to ``notes`` (``(message key, values)`` pairs).
    Tolerances are ``atol`` relative to the logits' scale (:func:`tolerance`). A crash of a cached
    pass after the uncached one ran raises :class:`LibraryError`, with a one-line repro.
    """
    require_transformers()
    notes = [] if notes is None else notes
    if isinstance(implementations, str):  # one implementation
        implementations = (implementations,)
    if isinstance(paddings, str):
        paddings = (paddings,)
    for padding in paddings:
        if padding not in SIDES:
            raise ValueError(tr("audit.bad_padding", options=", ".join(SIDES), got=describe(padding)))
    implementations = [check_implementation(impl) for impl in implementations]
    if not implementations:
        raise ValueError(tr("audit.no_implementations"))
    config, model_class, label = _subject(model_or_name)
    if model_class is None and not _registered_config(config):
        raise ValueError(tr("audit.not_registered", config=type(config).__name__))
    if isinstance(model_or_name, (str, type)):  # built here from a class: what its family needed (FAMILIES)
        for key, value in family_settings(type(config)).items():
            for name, item in (value.items() if isinstance(value, dict) and key != "rope_parameters" else [(None, value)]):
                shown = item if not isinstance(item, dict) else "{" + ", ".join(f"{k}: ..." for k in item) + "}"
                notes.append(("audit.note_set", {"setting": f"{key}{'' if name is None else '.' + name}={shown}"}))
    config, changed = as_decoder(config, model_class)
    for key, value in changed.items():
        notes.append(("audit.note_set", {"setting": f"{key}={value}"}))
    longest = next((getattr(config, key) for key in ("max_position_embeddings", "n_positions")
                    if isinstance(getattr(config, key, None), int) and getattr(config, key) > 0), None)  # XLNet: -1
    T = whole_number("T", T, 2, None if longest is None else longest - PAD)  # the padded row must fit too
    vocab = vocab_of(config)
    ids = torch.randint(1, vocab, (1, T), generator=torch.Generator().manual_seed(seed))
    rows, built, refused = [], 0, None
    for impl in implementations:
        try:
            model = model_from_config(config, impl, seed, model_class)
        except (ValueError, ImportError, NotImplementedError) as error:  # the class refuses this implementation
            if len(implementations) == 1 or impl in LEAKY:
                raise
            notes.append(("audit.note_skipped", {"impl": impl, "message": one_line(error).split(". ")[0]}))
            refused = error
            continue
        built += 1
        if type(model).__name__ in IN_PLACE_EMBEDDINGS and not isinstance(model.get_input_embeddings(), CopiedEmbedding):
            model.set_input_embeddings(CopiedEmbedding(model.get_input_embeddings()))
        parts = ("encoder", "decoder") if is_encoder_decoder(model) else (None,)
        for part in parts:
            decoder = expected_causal(model, part)
            with torch.no_grad():
                unpadded = Adapter(model, "none", part=part, seed=seed)(ids)
            limit = tolerance(unpadded, atol)
            for padding in paddings:
                adapter = Adapter(model, padding, part=part, seed=seed)
                leaks = leaks_of(adapter, ids, limit, seed)
                cache_ok = cache_diff = padding_ok = padding_diff = padding_read = None
                with torch.no_grad():  # as cached_matches and padding_matches, each pass computed once
                    plain = unpadded if padding == "none" else adapter(ids)
                    if decoder:
                        try:
                            cached = Adapter(model, padding, cached=True, part=part, seed=seed)(ids)
                        except NoCache:  # a decoder without a cache: the column stays empty
                            cached = None
                        except Exception as error:  # the uncached pass ran: the cached one crashed
                            if part is None and not _generate_runs(model, ids):  # confirmed by the library's own path
                                raise LibraryError(one_line(error), repro_line(config, type(model), padding, True)) \
                                    from None
                            raise Keyed("audit.reason_cached_pass_failed", message=one_line(error)) from None
                        if cached is not None:
                            cache_diff = float((plain - cached).abs().max())
                            cache_ok = cache_diff <= limit
                            if not cache_ok and part is None and padding == "none" and _generate_agrees(model, ids, atol):
                                notes.append(("audit.note_generate_agrees", {"impl": impl, "diff": f"{cache_diff:.1e}"}))
                                cache_ok = True  # a second method: the library's generate() agrees with itself
                if padding != "none":
                    padding_diff = float((unpadded - plain).abs().max())
                    padding_ok = padding_diff <= limit
                    if not padding_ok:
                        padding_read = bool(padding_reads(model, ids, padding, part, atol))
                rows.append(AuditRow(label, impl, padding, part, decoder, leaks, cache_ok, padding_ok, padding_read,
                                     limit, None if cache_ok is not False else cache_diff,
                                     None if padding_ok is not False else padding_diff))
    if not built:
        raise refused
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
        padded = "-" if row.padding_ok is None else tr("audit.yes") if row.padding_ok \
            else tr("audit.positions_only") if row.padding_read is False else tr("audit.no")
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
    ``transformers.LlamaConfig``, ``package.module:Class``): returns the name or the class. A file path
    or a hub id (``meta-llama/Llama-3-8B``) is a clear error: the auditor builds classes, it reads no
    checkpoint; an import error inside a module is reported as such, not as an unknown model."""
    tf = require_transformers()
    if not isinstance(target, str) or not target.strip():
        raise ValueError(tr("audit.unknown_target", got=describe(target), options=", ".join(MODELS)))
    if target.lower() in MODELS:
        return target.lower()
    looks_like_path = os.sep in target or "/" in target or "\\" in target or os.path.exists(target) \
        or target.endswith((".json", ".py", ".bin", ".safetensors", ".pt", ".gguf"))
    if looks_like_path:
        key = "audit.target_path" if os.path.exists(target) or target.startswith((".", "~")) or \
            target.endswith((".json", ".py", ".bin", ".safetensors", ".pt", ".gguf")) else "audit.target_hub"
        raise ValueError(tr(key, got=target))
    module_name, _, attr = target.rpartition(":") if ":" in target else target.rpartition(".")
    if module_name and module_name != "transformers":
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and (module_name == error.name or module_name.startswith(error.name + ".")):
                raise ValueError(tr("audit.no_module", module=module_name)) from None
            raise ValueError(tr("audit.import_failed", module=module_name, message=one_line(error))) from None
        except Exception as error:  # an error inside the reader's module
            raise ValueError(tr("audit.import_failed", module=module_name, message=one_line(error))) from None
    else:
        module = tf
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ValueError(tr("audit.unknown_target", got=target, options=", ".join(MODELS))) from None
    except Exception as error:  # transformers imports a model's module lazily: its error, in one line
        raise ValueError(tr("audit.import_failed", module=attr, message=one_line(error))) from None
    if isinstance(obj, type) and issubclass(obj, (tf.PreTrainedConfig, tf.PreTrainedModel)):
        return obj
    raise ValueError(tr("audit.unknown_target", got=target, options=", ".join(MODELS)))


SIZES = dict(rotary_dim=8, vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=64, n_embd=32, n_layer=2, n_head=2,
             n_positions=64, d_model=32, d_kv=16, d_ff=64, d_inner=64, num_layers=2, num_heads=2, bos_token_id=0,
             eos_token_id=0, pad_token_id=0, decoder_start_token_id=0,
             # encoder-decoder families: unequal on purpose (a valid config; caches sized by the wrong one crash)
             encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=64, decoder_ffn_dim=64,
             # mixtures of experts: few, small experts
             num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
             n_shared_experts=1, shared_expert_intermediate_size=32, first_k_dense_replace=1,
             # state-space and hybrid layers: a small state
             state_size=8, ssm_state_size=8, mamba_d_state=8, mamba_n_heads=4, mamba_d_head=16, time_step_rank=4,
             conv_kernel=4, mamba_d_conv=4, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16,
             linear_value_head_dim=16, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
             v_head_dim=16,
             # hybrids: at least one attention layer among the two (a stack of only state-space layers is no
             # checkpoint's, and the library's cache code assumes one)
             attn_layer_period=2, attn_layer_offset=1, attn_layer_indices=[1], expert_layer_period=2,
             expert_layer_offset=1)


# Settings per family, on top of SIZES, that make a valid tiny config where the common sizes alone do not
# (the library's message without them is in the comment). Each is said in the audit's notes and on the page.
FAMILIES: dict[str, dict] = {
    # DBRX reads attn_config.rope_theta, which DbrxAttentionConfig does not declare, and clamps by clip_qkv
    "DbrxConfig": dict(attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0)),
    # rope parameters per layer type (KeyError: 'full_attention')
    "CohereCompassConfig": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # the state-space width matches its heads (4 heads of 16)
    "FalconH1Config": dict(mamba_d_ssm=64),
    # hybrids: one state-space or convolution layer and one attention layer
    "GraniteMoeHybridConfig": dict(layer_types=["mamba", "attention"]),
    "Lfm2MoeConfig": dict(layer_types=["conv", "full_attention"]),
    # two layers cannot share a KV cache across kinds ("The set of layer types producing a cache is different")
    "Gemma3nTextConfig": dict(num_kv_shared_layers=0),
    # Qwen's sparse-attention indexer: every one of its sizes, or none (NoneType // NoneType)
    "Qwen4ExpTextConfig": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=4,
                               indexer_compress_ratio=2),
    # X-MOD's adapters need a language ("Input language unknown")
    "XmodConfig": dict(default_language="en_XX"),
    # sizes the common fields miss (with them left at the defaults the model is full size and the time runs out)
    "Mamba2Config": dict(num_heads=4, head_dim=16, n_groups=1),  # 4 heads of 16 = expand 2 x hidden 32
    "GPTNeoConfig": dict(num_layers=2, attention_types=[[["global", "local"], 1]], window_size=4),
    "ProphetNetConfig": dict(num_encoder_layers=1, num_decoder_layers=2, num_encoder_attention_heads=2,
                             num_decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64),
    # Longformer's window: 4 tokens, not 512 ("size of tensor a (16) must match b (512)")
    "LEDConfig": dict(attention_window=4),
    # Zamba2's shared blocks at the layer that exists (its default ids start at layer 6: KeyError: 1)
    "Zamba2Config": dict(hybrid_layer_ids=[1]),
    # Reformer: axial positions whose shape multiplies to 64 and whose widths add to 32, local attention only
    "ReformerConfig": dict(axial_pos_shape=[8, 8], axial_pos_embds_dim=[16, 16], attn_layers=["local", "local"],
                           local_attn_chunk_length=4),
    # Dory: one layer per stage (input, recurrent, output); with the defaults 8 + 8 of 2 layers the recurrent
    # stage has -28 layers and the crash proves nothing
    "DoryConfig": dict(num_hidden_layers=3, n_input_layers=1, n_recurrent_layers=1, n_output_layers=1,
                       layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    # XLNet reads ahead unless told to be unidirectional (its own causal setting; the default "bi" is bidirectional)
    "XLNetConfig": dict(attn_type="uni"),
    # MusicGen as a text model: one codebook ("shape '[-1, 4, 8]' is invalid")
    "MusicgenDecoderConfig": dict(num_codebooks=1),
    "MusicgenMelodyDecoderConfig": dict(num_codebooks=1),
}


for _names, _settings in (
        # multi-head latent attention: the rotary part of a head is head_dim ("size of tensor a (4) must match b (8)")
        (("DeepseekV3Config", "AXK1Config", "LongcatFlashConfig", "YoutuConfig"), dict(head_dim=8)),
        # grouped expert routing: one group of the 4 experts ("shape '[-1, 8, 0]' is invalid")
        (("DeepseekV3Config", "AXK1Config", "DeepseekV32Config", "BailingHybridConfig"), dict(n_group=1, topk_group=1))):
    for _name in _names:
        FAMILIES.setdefault(_name, {}).update(_settings)


def family_settings(config_class) -> dict:
    """The settings :data:`FAMILIES` gives ``config_class`` (by its name), ``{}`` for most."""
    return dict(FAMILIES.get(getattr(config_class, "__name__", ""), {}))


def _has(config, key: str) -> bool:
    """``hasattr`` that also says no where the config refuses a global read (a per-layer attribute)."""
    try:
        getattr(config, key)
        return True
    except Exception:
        return False


def small_config(config_class, extra: dict | None = None):
    """``config_class`` with small sizes for whichever of the common size fields it has (:data:`SIZES`),
    a per-layer pattern (``layer_types``) cut to one layer of each kind it lists, small sub-configs
    (``text_config`` of a multimodal model), and the family's own settings (:data:`FAMILIES`, or ``extra``).
    Sizes the class rejects are left at their defaults."""
    defaults = config_class()
    family = family_settings(config_class) if extra is None else dict(extra)
    sizes = {k: v for k, v in SIZES.items() if _has(defaults, k)}
    if "encoder_layers" in sizes:
        sizes.pop("num_hidden_layers", None)  # an alias of encoder_layers in BART's family
    for pattern in ("layer_types", "block_types"):  # RecurrentGemma: block_types
        kinds = getattr(defaults, pattern, None)
        if pattern not in family and isinstance(kinds, (list, tuple)) and kinds and all(isinstance(k, str) for k in kinds):
            distinct = list(dict.fromkeys(kinds))
            sizes[pattern] = distinct if len(distinct) > 1 else distinct * 2
            sizes["num_hidden_layers"] = len(sizes[pattern])
    for key in ("text_config", "decoder_config", "vision_config", "audio_config", "speech_config"):
        sub = getattr(defaults, key, None)
        if isinstance(sub, transformers.PreTrainedConfig) and key not in family:
            try:
                sizes[key] = small_config(type(sub)).to_dict()
            except Exception:
                pass
    sizes.update(family)
    singles = tuple((k,) for k in sizes if k not in family)  # one size the class refuses (XLNet: a length bound)
    for drop in ((), ("layer_types",), *singles, tuple(k for k in sizes if k not in family and k not in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "max_position_embeddings", "n_embd", "n_layer", "n_head", "n_positions", "d_model", "num_layers"))):
        try:
            return config_class(**{k: v for k, v in sizes.items() if k not in drop})
        except Exception:
            continue
    return defaults


# --------------------------------------------------------------------------
# Verdicts: one per target


KINDS = ("ok", "leak", "differ", "library_error", "not_applicable", "could_not_audit")
EXIT_STATUS = {"ok": 0, "not_applicable": 0, "leak": 1, "differ": 1, "library_error": 1, "could_not_audit": 2}


@dataclass
class Verdict:
    """What the audit of one target found: ``kind`` (one of :data:`KINDS`), the rows, what was set or
    skipped (``notes``: ``(message key, values)``), the library's message in one line, a repro."""

    target: str
    kind: str
    rows: list
    notes: list
    message: str | None = None
    repro: str | None = None
    seconds: float | None = None
    reason_key: str | None = None  # the auditor's own reason (a time-out, its cached pass), rendered per language
    reason_values: dict | None = None

    @classmethod
    def keyed(cls, target: str, kind: str, key: str, notes=None, **values) -> "Verdict":
        """A verdict without rows whose reason is the auditor's own message ``key`` (with ``values``)."""
        return cls(target, kind, [], list(notes or []), tr(key, lang="en", **values), None, None, key, values)

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.kind]

    def word(self, lang: str | None = None) -> str:
        return tr(f"audit.kind_{self.kind}", lang=lang)

    def reason(self, lang: str | None = None) -> str:
        """Why, in one line of the reader's language (or ``lang``)."""
        if self.reason_key is not None:
            return tr(self.reason_key, lang=lang, **(self.reason_values or {}))
        if self.kind in ("library_error", "could_not_audit", "not_applicable"):
            key = f"audit.reason_{self.kind}"
            if self.kind == "could_not_audit" and MISSING_PACKAGE.match(self.message or ""):
                key = "audit.reason_missing_package"  # the sweep's environment, not the library
            return tr(key, lang=lang, message=self.message or "")
        if self.kind == "leak":
            row = next(r for r in self.rows if r.leaking)
            test = next(t for t in ("prefix", "cut", "jacobian") if row.leaks[t] is not None)
            t, s_ = row.leaks[test]
            return tr("audit.reason_leak", lang=lang, test=tr(f"ch5.test_{test}", lang=lang), t=t, s=s_,
                      impl=row.implementation, padding=tr(f"audit.padding_{row.padding}", lang=lang))
        if self.kind == "differ":
            row = next(r for r in self.rows if not r.as_expected)
            values = dict(impl=row.implementation, padding=tr(f"audit.padding_{row.padding}", lang=lang),
                          tol=f"{row.tolerance:.1e}")
            if row.causal != row.expected_causal:
                return tr("audit.reason_reads_no_future", lang=lang, **values)
            if row.cache_ok is False:
                return tr("audit.reason_cache", lang=lang, diff=f"{row.cache_diff:.1e}", **values)
            return tr("audit.reason_padding", lang=lang, diff=f"{row.padding_diff:.1e}", **values)
        decoders = [r.expected_causal for r in self.rows]
        shifted = any(r.padding_read is False for r in self.rows)
        key = "audit.reason_ok_causal" if all(decoders) else "audit.reason_ok_bidirectional" if not any(decoders) \
            else "audit.reason_ok_parts"
        text = tr(key, lang=lang, n=len(self.rows))
        return text + (tr("audit.reason_positions_only", lang=lang) if shifted else "")

    def note_lines(self, lang: str | None = None) -> list[str]:
        return [tr(key, lang=lang, **values) for key, values in self.notes]

    def to_dict(self) -> dict:
        rows = [dict(vars(row), leaks={k: None if v is None else list(v) for k, v in row.leaks.items()})
                for row in self.rows]
        return dict(target=self.target, kind=self.kind, rows=rows, notes=[[k, v] for k, v in self.notes],
                    message=self.message, reason=None if self.reason_key is None else [self.reason_key,
                                                                                       self.reason_values or {}],
                    repro=self.repro, seconds=self.seconds)

    @classmethod
    def from_dict(cls, data: dict) -> "Verdict":
        rows = [AuditRow(**dict(row, leaks={k: None if v is None else tuple(v) for k, v in row["leaks"].items()}))
                for row in data.get("rows", [])]
        key, values = data.get("reason") or (None, None)
        return cls(data["target"], data["kind"], rows, [tuple(n) for n in data.get("notes", [])],
                   data.get("message"), data.get("repro"), data.get("seconds"), key, values)


def _kind(rows: list[AuditRow]) -> str:
    if any(row.leaking for row in rows):
        return "leak"
    return "ok" if all(row.as_expected for row in rows) else "differ"


def audit_target(target, implementations=IMPLEMENTATIONS, paddings=PADDINGS, T: int = 8, seed: int = 0,
                 atol: float = ATOL) -> Verdict:
    """:func:`audit` of one target, as a :class:`Verdict`: what the library does with it is a finding,
    never a traceback. Bad arguments (an unknown name, an implementation that does not exist here, a
    bad length) still raise, as :func:`audit` does: they are the caller's, not the library's."""
    import time
    import warnings

    tf = require_transformers()
    start = time.perf_counter()
    if isinstance(implementations, str):
        implementations = (implementations,)
    implementations = [check_implementation(impl) for impl in implementations]
    if not implementations:
        raise ValueError(tr("audit.no_implementations"))
    subject = resolve(target) if isinstance(target, str) else target
    label = subject if isinstance(subject, str) else subject.__name__ if isinstance(subject, type) \
        else type(subject).__name__
    whole_number("T", T, 2)
    notes, rows = [], []
    model_class = subject if isinstance(subject, type) and issubclass(subject, tf.PreTrainedModel) else None
    try:
        if model_class is not None and "input_ids" not in _parameters(model_class):
            verdict = Verdict.keyed(label, "not_applicable", "audit.no_input_ids", notes, name=label)
            verdict.seconds = time.perf_counter() - start
            return verdict
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = audit(subject, implementations, paddings, T, seed, atol, notes=notes)
        kind, message, repro = _kind(rows), None, None
    except LibraryError as error:
        kind, message, repro = "library_error", error.message, error.repro
    except Keyed as error:  # the auditor's own reason (its cached pass failed where generate() runs)
        verdict = Verdict.keyed(label, "could_not_audit", error.key, notes, **error.values)
        verdict.seconds = time.perf_counter() - start
        return verdict
    except Exception as error:  # the library refused to build or run it: its message, in one line
        kind, message, repro = "could_not_audit", one_line(error), None
    return Verdict(label, kind, rows, notes, message, repro, time.perf_counter() - start)


def verdict_line(verdict: Verdict) -> str:
    """The last line of an audit: the verdict's word and its reason."""
    sep = "" if tr("audit.colon").endswith("：") else " "
    return f"{verdict.word()}{tr('audit.colon')}{sep}{verdict.reason()}"


# --------------------------------------------------------------------------
# Every causal language model of transformers, one command


ENCODERS = ("BertForMaskedLM", "RobertaForMaskedLM", "XLMRobertaForMaskedLM", "DistilBertForMaskedLM",
            "ElectraForMaskedLM", "AlbertForMaskedLM", "DebertaV2ForMaskedLM", "ModernBertForMaskedLM",
            "RoFormerForMaskedLM")
ENCODER_DECODERS = ("T5ForConditionalGeneration", "MT5ForConditionalGeneration", "BartForConditionalGeneration",
                    "PegasusForConditionalGeneration", "MarianMTModel", "MBartForConditionalGeneration",
                    "BlenderbotForConditionalGeneration", "LEDForConditionalGeneration")
CONFIGS = ("LlamaConfig", "MistralConfig", "MixtralConfig", "Qwen2Config", "Qwen3Config", "GPT2Config", "GemmaConfig",
           "Gemma2Config", "Gemma3TextConfig", "PhiConfig", "Phi3Config", "GPTNeoXConfig", "OPTConfig", "FalconConfig")


def sweep_targets() -> list[str]:
    """Every class ``transformers`` registers for causal language modelling, then a few configs,
    encoders (masked LMs) and encoder-decoders: the targets of ``--all``, sorted within each group."""
    tf = require_transformers()
    causal = sorted(_mappings(tf)["causal"])
    extra = [name for name in CONFIGS + ENCODERS + ENCODER_DECODERS if hasattr(tf, name)]
    return [name for name in causal if hasattr(tf, name)] + extra


MEMORY = 6 * 2**30  # bytes of address space a target of the sweep may take (a tiny model needs far less)


def _child(connection, target, implementations, paddings, T):
    torch.set_num_threads(1)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    except (ImportError, ValueError, OSError):  # not on this system: no cap
        pass
    try:
        verdict = audit_target(target, implementations, paddings, T)
    except BaseException as error:  # noqa: BLE001 - a bad target is a row of the sweep, not a crash of it
        verdict = Verdict(str(target), "could_not_audit", [], [], one_line(error))
    connection.send(verdict.to_dict())
    connection.close()


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def sweep(targets=None, implementations=IMPLEMENTATIONS, paddings=PADDINGS, T: int = 8, workers: int = 2,
          limit: float = 120.0, progress=None, done=None) -> list[Verdict]:
    """:func:`audit_target` for every target (default :func:`sweep_targets`), each in its own process
    with a time limit of ``limit`` seconds (then: could not audit), ``workers`` at a time. ``progress``:
    a stream for a progress bar (``sys.stderr`` from the command line), or ``None``."""
    import multiprocessing
    import time

    targets = list(sweep_targets() if targets is None else targets)
    workers = whole_number("workers", workers, 1)
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit <= 0:
        raise ValueError(tr("audit.bad_limit", got=describe(limit)))
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    results, waiting, running = {}, list(enumerate(targets)), {}
    while waiting or running:
        while waiting and len(running) < workers:
            index, target = waiting.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(send, target, tuple(implementations), tuple(paddings), T),
                                      daemon=True)
            process.start()
            send.close()
            running[index] = (target, process, receive, time.monotonic())
        for index, (target, process, receive, started) in list(running.items()):
            elapsed = time.monotonic() - started
            verdict = None
            if elapsed > limit:  # first: a verdict seen only after the limit came too late (on a loaded
                # machine this loop's 0.05 s sleep can take seconds, and a short audit ends meanwhile)
                process.kill()
                verdict = Verdict.keyed(target, "could_not_audit", "audit.reason_timeout", seconds=f"{limit:g}")
            elif receive.poll():
                try:
                    verdict = Verdict.from_dict(receive.recv())
                except EOFError:
                    verdict = Verdict.keyed(target, "could_not_audit", "audit.reason_died", code=process.exitcode)
            elif not process.is_alive():
                verdict = Verdict.keyed(target, "could_not_audit", "audit.reason_died", code=process.exitcode)
            if verdict is not None:
                process.join(5)
                receive.close()
                if verdict.seconds is None:
                    verdict.seconds = elapsed
                results[index] = verdict
                del running[index]
                if done is not None:  # e.g. write what is known so far
                    done([results[i] for i in sorted(results)])
                if progress is not None:
                    print(f"\r{_bar(len(results), len(targets))} {target[:40]:<40}", end="", file=progress, flush=True)
        time.sleep(0.05)
    if progress is not None:
        print(file=progress)
    return [results[i] for i in range(len(targets))]


def sweep_table(verdicts: list[Verdict], lang: str | None = None) -> str:
    """One line per target: the class, the verdict, the reason."""
    lines = [[tr("audit.col_target", lang=lang), tr("audit.col_verdict", lang=lang), tr("audit.col_reason", lang=lang)]]
    lines += [[v.target, v.word(lang), v.reason(lang)] for v in verdicts]
    widths = [max(_width(line[i]) for line in lines) + 2 for i in range(2)]
    return "\n".join("".join(cell + " " * (w - _width(cell)) for w, cell in zip(widths, line[:2])) + line[2]
                     for line in lines)


def sweep_summary(verdicts: list[Verdict], lang: str | None = None) -> str:
    counts = {kind: sum(v.kind == kind for v in verdicts) for kind in KINDS}
    parts = [f"{tr(f'audit.kind_{kind}', lang=lang)} {counts[kind]}" for kind in KINDS if counts[kind]]
    return tr("audit.sweep_summary", lang=lang, n=len(verdicts), counts=tr("audit_page.list_sep", lang=lang).join(parts))


def sweep_json(verdicts: list[Verdict], **settings) -> dict:
    """What ``--all --json`` writes: the versions, the settings of the sweep, every verdict."""
    tf = require_transformers()
    return {"transformers": tf.__version__, "torch": torch.__version__.split("+")[0], **settings,
            "verdicts": [v.to_dict() for v in verdicts]}


# --------------------------------------------------------------------------
# The command line


def _colon() -> str:
    """The label colon of the reader's language: ``": "``, or ``"："`` with no space after it (Chinese)."""
    colon = tr("audit.colon")
    return colon if colon.endswith("：") else colon + " "


class _Formatter(argparse.HelpFormatter):
    def add_usage(self, usage, actions, groups, prefix=None):
        prefix = tr("audit.cli_usage")  # "usage:", "用法：" (no space after a full-width colon)
        super().add_usage(usage, actions, groups, prefix if prefix.endswith("：") else prefix + " ")

    def start_section(self, heading):
        super().start_section(None if heading is None else heading + "\x00")  # argparse adds ":" after it


class _Parser(argparse.ArgumentParser):
    """argparse with the course's messages: usage, headings, help and errors in the reader's language
    (a Chinese heading ends in a full-width colon, with no space after it), a bad argument one localized
    line and exit status 2."""

    def __init__(self, **kwargs):
        super().__init__(formatter_class=_Formatter, add_help=False, allow_abbrev=False, **kwargs)
        self._positionals.title, self._optionals.title = tr("audit.cli_positionals"), tr("audit.cli_options")
        self.add_argument("-h", "--help", action="help", help=tr("audit.cli_help"))

    def format_help(self):
        return super().format_help().replace("\x00:", tr("audit.colon").rstrip())

    def error(self, message):
        import re

        expects = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
        if expects:
            message = tr("audit.cli_expects_value", option=expects.group(1))
        elif message.startswith("unrecognized arguments: "):
            message = tr("audit.cli_unknown", got=message.split(": ", 1)[1])
        self.exit(2, tr("audit.cli_error", usage=self.format_usage().strip(), message=message) + "\n")


def main(argv=None) -> int:
    """The command line; ``--lang`` holds for this call only (a notebook keeps its language)."""
    before = get_language()
    try:
        return _main(argv)
    finally:
        set_language(before)


def _number(text, name, kind=int):
    try:
        return kind(text)
    except (TypeError, ValueError):
        return None


def _main(argv=None) -> int:
    import json

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
    parser.add_argument("--all", action="store_true", help=tr("audit.cli_all"))
    parser.add_argument("--workers", default="2", help=tr("audit.cli_workers"))
    parser.add_argument("--limit", default="120", help=tr("audit.cli_limit"))
    parser.add_argument("--json", default=None, help=tr("audit.cli_json"))
    parser.add_argument("--lang", help=tr("audit.cli_lang"))
    args, unknown = parser.parse_known_args(argv)
    if unknown or (args.target is None) == (not args.all):
        parser.error(tr("audit.cli_unknown", got=" ".join(unknown)) if unknown
                     else tr("audit.cli_target_and_all") if args.all
                     else tr("audit.cli_no_target", options=", ".join(MODELS)))
    length = _number(args.length, "--length")
    if length is None:
        print(tr("audit.cli_bad_length", got=describe(args.length)), file=sys.stderr)
        return 2
    implementations = tuple(impl.strip() for impl in args.implementations.split(",") if impl.strip())
    try:
        if not implementations:
            raise ValueError(tr("audit.no_implementations"))
        for impl in implementations:
            check_implementation(impl)
        whole_number("T", length, 2)
        if args.all:
            workers, limit = _number(args.workers, "--workers"), _number(args.limit, "--limit", float)
            if workers is None or workers < 1:
                raise ValueError(tr("audit.cli_bad_workers", got=describe(args.workers)))
            if limit is None or limit <= 0:
                raise ValueError(tr("audit.bad_limit", got=describe(args.limit)))
            def write(verdicts):
                if args.json:  # whole or not at all: a reader never sees half a file
                    with open(args.json + ".part", "w", encoding="utf-8") as out:
                        json.dump(sweep_json(verdicts, limit=limit, workers=workers,
                                             implementations=list(implementations), length=length),
                                  out, indent=1, ensure_ascii=False)
                        out.write("\n")
                    os.replace(args.json + ".part", args.json)

            verdicts = sweep(None, implementations, PADDINGS, length, workers, limit, progress=sys.stderr, done=write)
            write(verdicts)
            print(sweep_table(verdicts))
            print(sweep_summary(verdicts))
            return max((v.exit_status for v in verdicts if v.exit_status == 1), default=0)
        verdict = audit_target(args.target, implementations, PADDINGS, length)
    except (ValueError, TypeError, ImportError) as error:
        print(error, file=sys.stderr)
        return 2
    for line in verdict.note_lines():
        print(line)
    if verdict.rows:
        print(audit_table(verdict.rows))
    if verdict.kind == "ok":
        print(tr("audit.summary_ok", n=len(verdict.rows)))
    else:
        if verdict.kind in ("leak", "differ"):
            print(tr("audit.summary_wrong", n=sum(not row.as_expected for row in verdict.rows)))
        print(verdict_line(verdict), file=sys.stdout)
        if verdict.repro:
            print(tr("audit.repro", repro=verdict.repro))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(verdict.to_dict(), out, indent=1, ensure_ascii=False)
    return verdict.exit_status


if __name__ == "__main__":
    sys.exit(main())
