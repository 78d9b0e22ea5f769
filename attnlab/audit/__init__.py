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
- :func:`check_packing` packs two or three documents into one row with restarting ``position_ids`` and
  compares each document's logits with the document alone, in the calls a training loop makes.
- :func:`register_leaky_attention` registers two broken attention functions
  through the library's own ``AttentionInterface``, to see what the audit finds.
- ``python -m attnlab.audit MODEL_CLASS_OR_CONFIG`` runs the audit from a shell.

What it can prove: at the inputs it tried, whether any output moved when the
future changed. What it cannot: inputs it did not try (other lengths, other
padding, a longer cache), code paths it did not take (flash kernels, compiled
graphs, a GPU), and leaks smaller than the tolerance of the prefix and cut
tests (the Jacobian test has none, but sees only differentiable paths).

The modules, one idea each (every name is imported from here, ``from attnlab.audit import audit``):

- ``library``: the optional ``transformers`` module, and how it registers its classes;
- ``models``: tiny models built from configs, and what a correct model of each kind must be;
- ``leaky``: the attention functions broken on purpose (``audit_drops_mask`` and the others);
- ``adapter``: a model as chapter 5's function of token ids, padded, cached, or one part of T5;
- ``comparisons``: padded against unpadded, cached against uncached, ``generate()`` both ways;
- ``masks``: the mask the library builds against the course's (``library_mask``, ``course_mask``);
- ``model_audit``: chapter 5's tests applied to a model, its rows and table (``audit``, ``audit_table``);
- ``packing``: the fourth check, documents packed into one row as a training loop calls the model (``check_packing``);
- ``errors``: the auditor's own reasons, a library crash with its repro, an error in one line;
- ``targets``: a name or class resolved, and a small valid config for any class (``FAMILIES``);
- ``verdicts``: one verdict per target (``audit_target``, ``Verdict``);
- ``model_sweep``: every causal-LM class of the library, audited one process each (``sweep``);
- ``command_line``: ``python -m attnlab.audit`` (``main``; ``__main__`` runs it).
"""

from __future__ import annotations

from .adapter import (ATOL, IN_PLACE_EMBEDDINGS, PAD, SIDES, Adapter, CopiedEmbedding, NoCache, as_ids, cache_keyword,
                      no_cache, output_of, step_mask, tolerance)
from .command_line import main
from .comparisons import cached_matches, generate_matches, padding_matches, padding_reads
from .errors import MISSING_PACKAGE, Keyed, LibraryError, one_line, repro_line
from .leaky import LEAKY, drops_mask_attention, ignores_padding_attention, own_mask_attention, register_leaky_attention
from .library import registered_as, require_transformers
from .masks import course_mask, library_mask
from .model_audit import IMPLEMENTATIONS, PADDINGS, AuditRow, audit, audit_table, leaks_of, test_maps
from .packing import CALLS, PACKING_KINDS, Packing, PackingRow, check_packing, packing_rows
from .model_sweep import (CONFIGS, ENCODER_DECODERS, ENCODERS, MEMORY, sweep, sweep_json, sweep_summary, sweep_table,
                          sweep_targets)
from .models import (MODEL_CLASS, MODELS, as_decoder, check_implementation, expected_causal, is_encoder_decoder,
                      model_from_config, tiny_config, tiny_model, vocab_of)
from .targets import FAMILIES, SIZES, family_settings, resolve, small_config
from .verdicts import EXIT_STATUS, KINDS, Verdict, audit_target, verdict_line

__all__ = [
    # adapter
    "ATOL", "IN_PLACE_EMBEDDINGS", "PAD", "SIDES", "Adapter", "CopiedEmbedding", "NoCache", "as_ids", "cache_keyword",
    "no_cache", "output_of", "step_mask", "tolerance",
    # command_line
    "main",
    # comparisons
    "cached_matches", "generate_matches", "padding_matches", "padding_reads",
    # errors
    "MISSING_PACKAGE", "Keyed", "LibraryError", "one_line", "repro_line",
    # leaky
    "LEAKY", "drops_mask_attention", "ignores_padding_attention", "own_mask_attention", "register_leaky_attention",
    # library
    "registered_as", "require_transformers",
    # masks
    "course_mask", "library_mask",
    # model_audit
    "IMPLEMENTATIONS", "PADDINGS", "AuditRow", "audit", "audit_table", "leaks_of", "test_maps",
    # packing
    "CALLS", "PACKING_KINDS", "Packing", "PackingRow", "check_packing", "packing_rows",
    # model_sweep
    "CONFIGS", "ENCODER_DECODERS", "ENCODERS", "MEMORY", "sweep", "sweep_json", "sweep_summary", "sweep_table",
    "sweep_targets",
    # models
    "MODEL_CLASS", "MODELS", "as_decoder", "check_implementation", "expected_causal", "is_encoder_decoder",
    "model_from_config", "tiny_config", "tiny_model", "vocab_of",
    # targets
    "FAMILIES", "SIZES", "family_settings", "resolve", "small_config",
    # verdicts
    "EXIT_STATUS", "KINDS", "Verdict", "audit_target", "verdict_line",
]
