"""Verdicts: what the audit of one target found, in one word and one reason.

:func:`audit_target` runs :func:`~attnlab.audit.model_audit.audit` on one target and returns a
:class:`Verdict` (one of :data:`KINDS`: as expected, a leak, a difference, a library error, not
applicable, could not audit) instead of a traceback: what the library does with a target is a finding.
A verdict renders its reason in each reader's language and travels as JSON (:meth:`Verdict.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..i18n import tr
from ..inputs import whole_number
from .adapter import ATOL, _parameters
from .errors import MISSING_PACKAGE, Keyed, LibraryError, one_line, render
from .library import require_transformers
from .model_audit import IMPLEMENTATIONS, PADDINGS, AuditRow, audit
from .models import check_implementation
from .packing import Packing, check_packing, not_applicable
from .targets import resolve

KINDS = ("ok", "leak", "differ", "library_error", "not_applicable", "could_not_audit")
# keywords of a forward that reads another model's states: a drafting assistant (Gemma 4's) takes the main
# model's embeddings and KV states, never token ids alone, so chapter 5's tests do not apply
ANOTHER_MODELS_STATES = ("shared_kv_states",)
# recurrent models whose forward takes attention_mask and ignores it by design (transformers 5.24.0,
# modeling_rwkv.py: "`attention_mask` was passed, but it is unused in this model"): the family's name
IGNORES_MASK_BY_DESIGN = {"RwkvForCausalLM": "RWKV"}
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
    after: list | None = None  # [key, values]: what crashed after a test had found a leak (the leak stays the verdict)
    packing: Packing | None = None  # the fourth check: documents packed into one row (None: not run)
    cpu_seconds: float | None = None  # the CPU time of the sweep's process for this target (seconds: its wall time)

    @classmethod
    def keyed(cls, target: str, kind: str, key: str, notes=None, **values) -> "Verdict":
        """A verdict without rows whose reason is the auditor's own message ``key`` (with ``values``)."""
        return cls(target, kind, [], list(notes or []), render(key, values, "en"), None, None, key, values)

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.kind]

    def word(self, lang: str | None = None) -> str:
        return tr(f"audit.kind_{self.kind}", lang=lang)

    def reason(self, lang: str | None = None) -> str:
        """Why, in one line of the reader's language (or ``lang``)."""
        if self.reason_key is not None and self.kind != "leak":
            return render(self.reason_key, self.reason_values, lang)
        if self.kind in ("library_error", "could_not_audit", "not_applicable"):
            key = f"audit.reason_{self.kind}"
            if self.kind == "could_not_audit" and MISSING_PACKAGE.match(self.message or ""):
                key = "audit.reason_missing_package"  # the sweep's environment, not the library
            return tr(key, lang=lang, message=self.message or "")
        if self.kind == "leak":
            row = next(r for r in self.rows if r.leaking)
            test = next(t for t in ("prefix", "cut", "jacobian") if row.leaks[t] is not None)
            t, s_ = row.leaks[test]
            text = tr("audit.reason_leak", lang=lang, test=tr(f"ch5.test_{test}", lang=lang), t=t, s=s_,
                      impl=row.implementation, padding=tr(f"audit.padding_{row.padding}", lang=lang))
            if self.after:  # a second line: what crashed after the leak was found
                text += "\n" + tr("audit.reason_then", lang=lang, what=render(self.after[0], self.after[1], lang))
            return text
        if self.kind == "differ":
            row = next(r for r in self.rows if not r.as_expected)
            values = dict(impl=row.implementation, padding=tr(f"audit.padding_{row.padding}", lang=lang),
                          tol=f"{row.tolerance:.1e}")
            if row.causal != row.expected_causal:  # an encoder that reads no later input (a decoder's is a leak)
                return tr("audit.reason_reads_no_future", lang=lang, **values)
            if row.cache_ok is False:
                return tr("audit.reason_cache", lang=lang, diff=f"{row.cache_diff:.1e}", **values)
            text = tr("audit.reason_padding", lang=lang, diff=f"{row.padding_diff:.1e}", **values)
            if self.target in IGNORES_MASK_BY_DESIGN:
                text += tr("audit.reason_recurrent_ignores_mask", lang=lang, name=IGNORES_MASK_BY_DESIGN[self.target])
            return text
        decoders = [r.expected_causal for r in self.rows]
        shifted = any(r.padding_read is False for r in self.rows)
        padded = any(r.padding_ok for r in self.rows)
        key = "audit.reason_ok_causal" if all(decoders) else "audit.reason_ok_bidirectional" if not any(decoders) \
            else "audit.reason_ok_parts"
        text = tr(key, lang=lang, n=len(self.rows))
        if shifted:  # the logits differ, only because the absolute positions shift: never "agree"
            return text + tr("audit.reason_positions_only", lang=lang)
        return text + (tr("audit.reason_padding_agrees", lang=lang) if padded and any(decoders) else "")

    def note_lines(self, lang: str | None = None) -> list[str]:
        return [tr(key, lang=lang, **values) for key, values in self.notes]

    def to_dict(self) -> dict:
        rows = [dict(vars(row), leaks={k: None if v is None else list(v) for k, v in row.leaks.items()})
                for row in self.rows]
        return dict(target=self.target, kind=self.kind, rows=rows, notes=[[k, v] for k, v in self.notes],
                    message=self.message, reason=None if self.reason_key is None else [self.reason_key,
                                                                                       self.reason_values or {}],
                    repro=self.repro, seconds=self.seconds, cpu_seconds=self.cpu_seconds, after=self.after,
                    packing=None if self.packing is None else self.packing.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> "Verdict":
        rows = [AuditRow(**dict(row, leaks={k: None if v is None else tuple(v) for k, v in row["leaks"].items()}))
                for row in data.get("rows", [])]
        key, values = data.get("reason") or (None, None)
        return cls(data["target"], data["kind"], rows, [tuple(n) for n in data.get("notes", [])],
                   data.get("message"), data.get("repro"), data.get("seconds"), key, values, data.get("after"),
                   Packing.from_dict(data.get("packing")), data.get("cpu_seconds"))


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
    notes, models = [], {}
    model_class = subject if isinstance(subject, type) and issubclass(subject, tf.PreTrainedModel) else None
    takes = _parameters(model_class) if model_class is not None else frozenset()
    if model_class is not None and ("input_ids" not in takes or takes & set(ANOTHER_MODELS_STATES)):
        key = "audit.no_input_ids" if "input_ids" not in takes else "audit.needs_another_model"
        verdict = Verdict.keyed(label, "not_applicable", key, notes, name=label)
        verdict.packing = not_applicable(key, name=label)
        verdict.seconds = time.perf_counter() - start
        return verdict
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = audit(subject, implementations, paddings, T, seed, atol, notes=notes, models=models)
        verdict = Verdict(label, _kind(rows), rows, notes)
    except Exception as error:  # noqa: BLE001 - what the library does with a target is a finding
        verdict = _failed(label, error, notes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refused = {values["impl"] for key, values in notes if key == "audit.note_skipped"}  # not tried again
        verdict.packing = check_packing(subject, [impl for impl in implementations if impl not in refused] or
                                        implementations, seed=seed, atol=atol, models=models)
    verdict.seconds = time.perf_counter() - start
    return verdict


def _failed(label: str, error: Exception, notes: list) -> Verdict:
    """The verdict of an audit that raised ``error``: a library error (with its repro), the auditor's own
    reason, or the library's message; but a leak that a test found before the crash stays the verdict, with
    what crashed as its second line."""
    if isinstance(error, LibraryError):
        after, message, repro = ["audit.reason_library_error", {"message": error.message}], error.message, error.repro
    elif isinstance(error, Keyed):
        after, message, repro = [error.key, error.values], str(error), None
    else:
        message, repro = one_line(error), None
        after = ["audit.reason_could_not_audit", {"message": message}]
    rows = getattr(error, "rows", None) or []
    if any(row.leaking for row in rows):
        return Verdict(label, "leak", rows, notes, message, repro, after=after)
    if isinstance(error, LibraryError):
        return Verdict(label, "library_error", [], notes, message, repro)
    if isinstance(error, Keyed):
        return Verdict.keyed(label, "could_not_audit", error.key, notes, **error.values)
    return Verdict(label, "could_not_audit", [], notes, message)


def verdict_line(verdict: Verdict) -> str:
    """The last line of an audit: the verdict's word and its reason."""
    sep = "" if tr("audit.colon").endswith("：") else " "
    return f"{verdict.word()}{tr('audit.colon')}{sep}{verdict.reason()}"
