"""Chapter 5's causality tests applied to a model: :func:`audit`, its rows and its table.

:func:`audit` builds the model (or its class, with new random weights) under each attention
implementation, runs the prefix, cut and Jacobian tests (attnlab.causality) through an
:class:`~attnlab.audit.adapter.Adapter`, padded and not, compares padded with unpadded and cached with
uncached logits, and returns one :class:`AuditRow` per combination; :func:`audit_table` prints them
in the reader's language.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..causality import cut_map, dependence_map, first_leak, jacobian_map
from ..i18n import display_width as _width
from ..i18n import tr
from ..inputs import describe, whole_number
from .adapter import ATOL, IN_PLACE_EMBEDDINGS, PAD, SIDES, Adapter, CopiedEmbedding, NoCache, as_ids, tolerance
from .comparisons import generate_matches, padding_reads
from .errors import Keyed, LibraryError, one_line, repro_line
from .leaky import LEAKY
from .library import _registered_config, require_transformers
from .models import (MODELS, as_decoder, check_implementation, expected_causal, is_encoder_decoder,
                     model_from_config, tiny_config, vocab_of)
from .targets import family_settings, resolve, small_config

IMPLEMENTATIONS = ("eager", "sdpa")
PADDINGS = ("none", "left")  # what audit() runs by default


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
    """The three maps of chapter 5 for ``adapter`` on ``ids`` [1, T] (a list or a 1-D tensor [T] too). An error
    inside one test carries the test's name (``error.test``), so a verdict can say which test failed."""
    ids = as_ids(ids, vocab_of(adapter.config))
    T = ids.size(1)
    maps = {}
    for test, make in (("prefix", lambda: dependence_map(adapter, ids, seed)), ("cut", lambda: cut_map(adapter, ids)),
                       ("jacobian", lambda: jacobian_map(adapter, ids, adapter.get_input_embeddings(), seed)[
                           :, adapter.real_columns(T)])):  # [T, P + T] when padded: the real tokens' columns
        try:
            maps[test] = make()
            if tuple(maps[test].shape) != (T, T):  # an embedding whose output is not [1, T, D] (XLNet: [T, 1, D])
                raise Keyed("audit.map_shape", test_key=f"ch5.test_{test}", T=T, got=str(tuple(maps[test].shape)))
        except Exception as error:
            error.test = test
            raise
    return maps


def leaks_of(adapter: Adapter, ids: torch.Tensor, atol: float = ATOL, seed: int = 0) -> dict:
    """What each of chapter 5's tests finds: ``{"prefix": (t, s) or None, "cut": ..., "jacobian": ...}``
    (as :func:`attnlab.causality.find_leaks`, for an adapter, padded or not)."""
    return {test: first_leak(m, 0.0 if test == "jacobian" else atol) for test, m in test_maps(adapter, ids, seed).items()}


def _checked_leaks(adapter: Adapter, ids: torch.Tensor, limit: float, seed: int, config, model, padding: str) -> dict:
    """:func:`leaks_of`, where a test that crashes is told apart: the library crashes on a batch of two rows
    (the prefix test runs the T variants of a sequence at once), given the one row runs, is a
    :class:`LibraryError` with its repro (XLNet with an ``attention_mask``); anything else is the auditor's
    own test failing on a model that runs (:class:`Keyed`)."""
    try:
        return leaks_of(adapter, ids, limit, seed)
    except Exception as error:
        test = getattr(error, "test", None)
        try:
            with torch.no_grad():
                adapter(ids.expand(2, -1).contiguous())  # [2, T]: the library's own batched call
        except Exception as batched:
            raise LibraryError(one_line(batched), repro_line(config, type(model), padding, False, batch=2)) from None
        message = {"message_key": [error.key, error.values]} if isinstance(error, Keyed) else {"message": one_line(error)}
        raise Keyed("audit.reason_test_failed", test_key=f"ch5.test_{test or 'prefix'}", **message) from None


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
          atol: float = ATOL, notes: list | None = None, models: dict | None = None) -> list[AuditRow]:
    """Chapter 5's three tests on a model, for every attention implementation and padding; a padded
    row also compares the real tokens' logits with the unpadded ones (:func:`padding_matches`).

    ``model_or_name``: a name of :data:`MODELS`, a class of ``transformers`` or its name
    (``"LlamaForCausalLM"``, ``"module:Class"``), a config, or a model (rebuilt from its config, with its
    class, for each implementation; the weights are new random ones: causality is a property of the
    code, not of the weights). Encoder-decoders are audited part by part. A causal-LM class of an
    encoder family is built as a decoder (``is_decoder=True``); an implementation the class refuses is
    skipped. What was set or skipped is appended to ``notes`` (``(message key, values)`` pairs).
    Tolerances are ``atol`` relative to the logits' scale (:func:`tolerance`). A crash of a cached
    pass after the uncached one ran raises :class:`LibraryError`, with a one-line repro; any error raised
    carries the rows found before it (``error.rows``: a leak found first stays a leak). ``models``: a dict
    that receives each built model by implementation (the packing check reuses them).
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
            whole = key == "rope_parameters" or (isinstance(value, dict) and "hidden_size" in value)  # one note
            # (rope parameters by their layer types; a sub-config's sizes by its first: Blt's four parts)
            for name, item in (value.items() if isinstance(value, dict) and not whole else [(None, value)]):
                notes.append(("audit.note_set", {"setting": f"{key}{'' if name is None else '.' + name}={_shown(item)}"}))
    config, changed = as_decoder(config, model_class)
    for key, value in changed.items():
        notes.append(("audit.note_set", {"setting": f"{key}={value}"}))
    T = _length(T, config)
    vocab = vocab_of(config)
    ids = torch.randint(1, vocab, (1, T), generator=torch.Generator().manual_seed(seed))
    rows, built, refused = [], 0, None
    try:
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
            if type(model).__name__ in IN_PLACE_EMBEDDINGS and not isinstance(model.get_input_embeddings(),
                                                                              CopiedEmbedding):
                model.set_input_embeddings(CopiedEmbedding(model.get_input_embeddings()))
            if models is not None:
                models[impl] = model
            for part in ("encoder", "decoder") if is_encoder_decoder(model) else (None,):
                _audit_part(model, config, label, impl, part, paddings, ids, seed, atol, notes, rows)
    except Exception as error:  # what was found before the crash travels with it: a leak stays a leak
        error.rows = rows
        raise
    if not built:
        raise refused
    return rows


def _shown(setting) -> str:
    """A setting as a note shows it: a value as it is, rope parameters by their keys (``{full_attention: ...}``),
    a sub-config by its first size (``{hidden_size: 32, ...}``)."""
    if not isinstance(setting, dict):
        return str(setting)
    if all(isinstance(v, dict) for v in setting.values()):
        return "{" + ", ".join(f"{k}: ..." for k in setting) + "}"
    key, value = next(iter(setting.items()))
    return f"{{{key}: {value}, ...}}"


def _length(T, config) -> int:
    """``T`` checked against what the model holds: at least 2 tokens (the tests change a later one), and
    the padded row (:data:`PAD` padding tokens, then T) within the model's positions, saying why."""
    longest = next((getattr(config, key) for key in ("max_position_embeddings", "n_positions")
                    if isinstance(getattr(config, key, None), int) and getattr(config, key) > 0), None)  # XLNet: -1
    T = whole_number("T", T, None)  # a whole number first: a float or a string is a TypeError
    if T < 2 or (longest is not None and T > longest - PAD):
        if longest is None:
            raise ValueError(tr("audit.bad_T_short", got=T))
        raise ValueError(tr("audit.bad_T", high=longest - PAD, longest=longest, pad=PAD, got=T))
    return T


def _audit_part(model, config, label, impl, part, paddings, ids, seed, atol, notes, rows) -> None:
    """The rows of one part (``None``: the whole model) of one built model, one per padding, appended to
    ``rows``; a row whose leaks were found is appended before its cached pass may crash."""
    decoder = expected_causal(model, part)
    with torch.no_grad():
        unpadded = Adapter(model, "none", part=part, seed=seed)(ids)
    limit = tolerance(unpadded, atol)
    for padding in paddings:
        adapter = Adapter(model, padding, part=part, seed=seed)
        leaks = _checked_leaks(adapter, ids, limit, seed, config, model, padding)
        row = AuditRow(label, impl, padding, part, decoder, leaks, None, tolerance=limit)
        rows.append(row)
        with torch.no_grad():  # as cached_matches and padding_matches, each pass computed once
            plain = unpadded if padding == "none" else adapter(ids)
            if decoder:
                try:
                    cached = Adapter(model, padding, cached=True, part=part, seed=seed)(ids)
                except NoCache:  # a decoder without a cache: the column stays empty
                    cached = None
                except Exception as error:  # the uncached pass ran: the cached one crashed
                    if part is None and not _generate_runs(model, ids):  # confirmed by the library's own path
                        raise LibraryError(one_line(error), repro_line(config, type(model), padding, True)) from None
                    raise Keyed("audit.reason_cached_pass_failed", message=one_line(error)) from None
                if cached is not None:
                    cache_diff = float((plain - cached).abs().max())
                    row.cache_ok = cache_diff <= limit
                    if not row.cache_ok and part is None and padding == "none" and _generate_agrees(model, ids, atol):
                        notes.append(("audit.note_generate_agrees", {"impl": impl, "diff": f"{cache_diff:.1e}"}))
                        row.cache_ok = True  # a second method: the library's generate() agrees with itself
                    if row.cache_ok is False:
                        row.cache_diff = cache_diff
        if padding != "none":
            padding_diff = float((unpadded - plain).abs().max())
            row.padding_ok = padding_diff <= limit
            if not row.padding_ok:
                row.padding_diff = padding_diff
                row.padding_read = bool(padding_reads(model, ids, padding, part, atol))


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
        word = "audit.ok" if row.as_expected else "audit.wrong" if row.leaking else "audit.mismatch"
        verdict += ("" if verdict.endswith("：") else " ") + tr(word)  # no space after a full-width colon
        lines.append([name, row.implementation, tr(f"audit.padding_{row.padding}")]
                     + [str(row.leaks[test] or "-") for test in ("prefix", "cut", "jacobian")] + [cache, padded, verdict])
    widths = [max(_width(line[i]) for line in lines) + 2 for i in range(len(header))]
    return "\n".join("".join(cell + " " * (w - _width(cell)) for w, cell in zip(widths, line)).rstrip()
                     for line in lines)
