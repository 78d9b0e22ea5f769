"""Tiny ``transformers`` models built from configs, and what a correct model of each kind must be.

Nothing is downloaded: :func:`tiny_model` builds one of the model families of chapter 10 (:data:`MODELS`)
from a small config (:func:`tiny_config`), and :func:`model_from_config` any registered config, with
random, seeded float32 weights under one attention implementation (:func:`check_implementation`: those
that run here on a CPU). :func:`expected_causal` says whether the model must be causal (a decoder) or
may read the whole sequence (an encoder); :func:`as_decoder` sets what a causal-LM class of an encoder
family needs to run as a decoder.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..i18n import tr
from ..inputs import describe
from .leaky import LEAKY, register_leaky_attention
from .library import _registered_config, registered_as, require_transformers

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
    config = copy.deepcopy(config)  # each model its own: a class that refuses an implementation may have set it on
    # the config it was given, under a model built before from the same config (Gemma 2: eager, then sdpa)
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
