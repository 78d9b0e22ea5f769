"""The fourth check, packing: several documents in one row, as a training loop calls ``model(...)``.

A packed row holds documents one after another, with ``position_ids`` that restart at 0 for each
([0, 1, 2, 0, 1, 2, 0, 1] for 3 + 3 + 2 tokens). ``transformers`` builds the block-diagonal mask
(each document reads only itself) from those ``position_ids``, but only when the mask builder sees no
cache object and no ``attention_mask``. :func:`packing_rows` runs one model in the calls a training loop
makes (:data:`CALLS`: the default call, ``use_cache=False``, ``use_cache=False`` with an all-ones 2-D
``attention_mask``) and compares each document's logits with those of the document alone, with the
tolerance of the other checks (``1e-5`` times the largest absolute logit, at least ``1e-5``). Where they
differ, it asks a second question: do the document's logits move when only the *other* documents'
tokens change (it reads them), or not (only its positions differ)? :func:`check_packing` does this for
every attention implementation a class accepts and returns a :class:`Packing` with one verdict
(:data:`PACKING_KINDS`), worded so that a reader knows what to pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..i18n import tr
from ..inputs import describe, whole_number
from .adapter import ATOL, _takes_positions, no_cache, output_of, tolerance
from .errors import one_line, render
from .models import as_decoder, expected_causal, is_encoder_decoder, model_from_config, vocab_of

CALLS = ("default", "no_cache", "no_cache_ones")  # how a training loop calls model(...) on a packed batch
LENGTHS = (3, 3, 2)  # three documents in one row of 8 tokens, as the other checks' 8 tokens
PACKING_KINDS = ("isolated", "leaks", "positions", "crashes", "not_applicable", "could_not_check")


@dataclass
class PackingRow:
    """One call of one implementation on a packed row: does each document see only itself?"""

    implementation: str
    call: str  # one of CALLS
    isolated: bool | None  # every document's logits equal the document alone (None: the call crashed)
    reads: bool | None = None  # where not isolated: does a document read another one (else: only positions)?
    diff: float | None = None  # max |packed - alone| over the documents
    tolerance: float = ATOL
    message: str | None = None  # the crash, in one line


@dataclass
class Packing:
    """The packing check of one target: ``kind`` (one of :data:`PACKING_KINDS`), its rows, and the reason
    where it does not apply (a message key and its values)."""

    kind: str
    rows: list = field(default_factory=list)
    reason_key: str | None = None
    reason_values: dict | None = None

    def word(self, lang: str | None = None) -> str:
        return tr(f"audit.packing_{self.kind}", lang=lang)

    def calls(self, test, lang: str | None = None, implementations: bool = True) -> str:
        """The calls whose rows pass ``test``, each with its implementations (unless ``implementations`` is
        False), as the reader's language lists them: ``"default call (eager, sdpa); use_cache=False with an
        all-ones attention_mask (eager, sdpa)"``."""
        found = {}
        for row in self.rows:
            if test(row):
                found.setdefault(row.call, []).append(row.implementation)
        sep = tr("audit_page.list_sep", lang=lang)
        names = [tr(f"audit.call_{call}", lang=lang) if not implementations else
                 tr("audit.call_impls", lang=lang, c=tr(f"audit.call_{call}", lang=lang), i=sep.join(impls))
                 for call, impls in found.items()]
        return tr("audit.call_sep", lang=lang).join(names)

    def reason(self, lang: str | None = None, implementations: bool = True) -> str:
        """Which calls keep the documents apart (what a reader must pass), in one line of the reader's language;
        ``implementations=False``: without naming the implementations (the page's groups of classes)."""
        if self.reason_key is not None:
            return render(self.reason_key, self.reason_values, lang)
        ok = self.calls(lambda r: r.isolated, lang, implementations)
        reads = self.calls(lambda r: r.isolated is False and r.reads, lang, implementations)
        crashed = [row for row in self.rows if row.isolated is None]
        if self.kind == "isolated":
            text = tr("audit.packing_reason_isolated", lang=lang, ok=ok)
        elif self.kind == "leaks":
            text = tr("audit.packing_reason_leaks" if ok else "audit.packing_reason_leaks_all", lang=lang, reads=reads,
                      ok=ok)
        elif self.kind == "positions":
            text = tr("audit.packing_reason_positions", lang=lang,
                      shifted=self.calls(lambda r: r.isolated is False and not r.reads, lang, implementations))
        else:  # crashes: every call
            return tr("audit.packing_reason_crashes", lang=lang, message=crashed[0].message)
        if crashed:
            text += tr("audit.packing_also_crashed", lang=lang,
                       calls=self.calls(lambda r: r.isolated is None, lang, implementations), message=crashed[0].message)
        return text

    def to_dict(self) -> dict:
        return dict(kind=self.kind, rows=[vars(row) for row in self.rows],
                    reason=None if self.reason_key is None else [self.reason_key, self.reason_values or {}])

    @classmethod
    def from_dict(cls, data: dict | None) -> "Packing | None":
        if data is None:
            return None
        key, values = data.get("reason") or (None, None)
        return cls(data["kind"], [PackingRow(**row) for row in data.get("rows", [])], key, values)


def applies(model) -> str | None:
    """``None`` where the packing check applies to ``model``, else the message key of why not: an
    encoder-decoder or an encoder (no causal decoder of its own tokens alone), a class whose forward
    takes no ``position_ids`` (a packed row cannot restart its positions)."""
    if is_encoder_decoder(model):
        return "audit.packing_na_encoder_decoder"
    if not expected_causal(model):
        return "audit.packing_na_encoder"
    if not _takes_positions(type(model)):
        return "audit.packing_na_no_positions"
    return None


def _lengths(lengths) -> list[int]:
    """The documents' lengths, whole numbers of at least 1 token, at least two documents (a clear error)."""
    if isinstance(lengths, int) or not hasattr(lengths, "__len__"):
        raise TypeError(tr("audit.packing_two_documents", got=describe(lengths)))
    lengths = [whole_number("lengths", n, 1) for n in lengths]
    if len(lengths) < 2:
        raise ValueError(tr("audit.packing_two_documents", got=len(lengths)))
    return lengths


def packed_row(lengths, vocab: int, seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Documents of ``lengths`` tokens (random ids 1 .. vocab - 1), their packed row [1, sum] and its
    ``position_ids`` [1, sum], restarting at 0 for each document."""
    generator = torch.Generator().manual_seed(seed)
    documents = [torch.randint(1, vocab, (1, n), generator=generator) for n in lengths]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    return documents, torch.cat(documents, dim=1), positions


def _call(model, ids, positions, call: str) -> torch.Tensor:
    """``model(...)`` on a packed row as a training loop makes the call ``call``."""
    kwargs = {"input_ids": ids, "position_ids": positions}
    if call != "default":
        kwargs.update(no_cache(type(model)))
    if call == "no_cache_ones":
        kwargs["attention_mask"] = torch.ones_like(ids)
    return output_of(model(**kwargs))


def calls_of(model) -> tuple[str, ...]:
    """The calls :func:`packing_rows` makes: all of :data:`CALLS`, or, for a forward that takes no ``use_cache``
    (by name or through ``**kwargs``), the default call and the one with an all-ones mask."""
    return CALLS if no_cache(type(model)) else ("default", "no_cache_ones")


def packing_rows(model, implementation: str | None = None, lengths=LENGTHS, seed: int = 0,
                 atol: float = ATOL) -> list[PackingRow]:
    """One :class:`PackingRow` per call of :func:`calls_of` for ``model`` (as built, eval mode): each
    document's logits in the packed row against the document alone (``use_cache=False``, no mask, the same
    ``position_ids`` 0 .. n - 1: a model that counts from elsewhere by default, RoBERTa from 2, is compared
    at the positions the packed row gives it)."""
    lengths = _lengths(lengths)
    implementation = implementation or getattr(model.config, "_attn_implementation", None) or "?"
    documents, ids, positions = packed_row(lengths, vocab_of(model.config), seed)
    bounds = torch.tensor([0, *lengths]).cumsum(0).tolist()
    spans = [slice(a, b) for a, b in zip(bounds, bounds[1:])]
    off = no_cache(type(model))
    was_training = model.training
    model.eval()
    rows = []
    try:
        with torch.no_grad():
            alone = [output_of(model(input_ids=doc, position_ids=torch.arange(doc.size(1))[None], **off))
                     for doc in documents]  # [1, n, V] each: the same positions as in the packed row
            limit = tolerance(torch.cat(alone, dim=1), atol)
            others = torch.randint(1, vocab_of(model.config), ids.shape, generator=torch.Generator().manual_seed(seed + 1))
            for call in calls_of(model):
                try:
                    packed = _call(model, ids, positions, call)
                except Exception as error:  # the library crashed on this call: a finding of its own
                    rows.append(PackingRow(implementation, call, None, message=one_line(error), tolerance=limit))
                    continue
                diff = max(float((packed[:, span] - a).abs().max()) for span, a in zip(spans, alone))
                reads = None
                if diff > limit:  # a second question: does a document move when only the others change?
                    reads = False
                    for span in spans:
                        changed = others.clone()
                        changed[:, span] = ids[:, span]  # this document kept, every other token changed
                        moved = (_call(model, changed, positions, call)[:, span] - packed[:, span]).abs().max()
                        reads = reads or float(moved) > limit
                rows.append(PackingRow(implementation, call, diff <= limit, reads, diff, limit))
    finally:
        model.train(was_training)
    return rows


def packing_kind(rows: list[PackingRow]) -> str:
    """One word for the rows of a target: a call in which a document reads another one leaks; else a call
    whose logits differ only by position; else a crash; else every document isolated."""
    if any(row.isolated is False and row.reads for row in rows):
        return "leaks"
    if any(row.isolated is False for row in rows):
        return "positions"
    if rows and all(row.isolated is None for row in rows):
        return "crashes"
    return "isolated"


def packing_of(rows: list[PackingRow]) -> Packing:
    return Packing(packing_kind(rows), rows)


def _could_not_check(error) -> Packing:
    """The packing check could not run: the library's message in one line (or: no implementation was accepted)."""
    message = one_line(error) if error is not None else tr("audit.packing_no_model", lang="en")
    return Packing("could_not_check", [], "audit.packing_reason_could_not_check", {"message": message})


def not_applicable(key: str, **values) -> Packing:
    return Packing("not_applicable", [], key, values)


def check_packing(model_or_name, implementations=("eager", "sdpa"), lengths=LENGTHS, seed: int = 0, atol: float = ATOL,
                  models: dict | None = None) -> Packing:
    """The packing check of one model or class, as a :class:`Packing` (``.word()``, ``.reason()``, ``.rows``).

    ``model_or_name``: a model (checked as it is, weights and attention implementation included: the
    model a training loop would call), or what :func:`~attnlab.audit.audit` takes (a name of
    :data:`~attnlab.audit.MODELS`, a class, its name, a config), built with random seeded weights under
    each implementation of ``implementations`` that the class accepts. ``lengths``: the documents'
    lengths (at least two documents). ``models``: models already built, by implementation (the sweep's).
    """
    from torch import nn

    from .model_audit import _subject
    from .models import check_implementation

    if isinstance(implementations, str):
        implementations = (implementations,)
    implementations = [check_implementation(impl) for impl in implementations]
    lengths = _lengths(lengths)
    refused = None
    if isinstance(model_or_name, nn.Module):
        models = {getattr(model_or_name.config, "_attn_implementation", None) or "?": model_or_name}
    else:
        models = dict(models or {})
        try:
            config, model_class, _ = _subject(model_or_name)
            config, _ = as_decoder(config, model_class)
        except Exception as error:  # noqa: BLE001 - the library could not build it: said, not raised
            return _could_not_check(error)
        for impl in implementations:
            if impl not in models:
                try:
                    models[impl] = model_from_config(config, impl, seed, model_class)
                except (ValueError, ImportError, NotImplementedError) as error:  # the class refuses it
                    refused = error
    if not models:
        return _could_not_check(refused)
    why = applies(next(iter(models.values())))
    if why is not None:
        return not_applicable(why, name=type(next(iter(models.values()))).__name__)
    rows = []
    for impl, model in models.items():
        try:
            rows += packing_rows(model, impl, lengths, seed, atol)
        except Exception as error:  # noqa: BLE001 - the document alone does not run under this implementation
            refused = error
    if not rows:
        return _could_not_check(refused)
    return packing_of(rows)
