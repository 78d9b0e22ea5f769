"""The second checks behind the rows of the committed sweep that are not AS EXPECTED, and behind its packing
column (docs/audit-second-checks.md).

    python -m tools.audit_second_checks            # one line per row that is not AS EXPECTED
    python -m tools.audit_second_checks --packing  # and one line per class whose packed documents read each other

None of this goes through the auditor's Adapter or its tests; each check asks the library another way:

- LIBRARY ERROR: the row's one-line repro in a fresh interpreter (the library alone), and the exception it ends with;
- LEAK: the gradient of output 0 with respect to the later inputs' embeddings through the library's own
  ``inputs_embeds`` (no hooks), or, for a class without ``inputs_embeds``, output 0 against a change of the last token;
- OUTPUTS DIFFER: the library's own ``generate()``: the first step's logits for a left-padded prompt against the
  prompt unpadded (padding), or with and without the cache (cache);
- NOT APPLICABLE: the forward called with token ids alone, and the library's own refusal;
- COULD NOT AUDIT: the cause the row names, reproduced by hand (a missing package imported; a backward pass in
  eval mode);
- packing: the mask each attention layer receives in the packed call, recorded by a wrapper around the library's
  own attention function: does it block a document from the one before? A class whose documents read each other
  although every layer's mask blocks them carries state outside attention (a state-space or recurrent layer).
"""

from __future__ import annotations

import importlib
import json
import pathlib
import subprocess
import sys
import warnings

import torch

import attnlab
from attnlab import audit as A

warnings.simplefilter("ignore")


def _model(target: str, implementation: str = "eager"):
    import contextlib
    import io

    tf = A.require_transformers()
    cls = getattr(tf, target)
    model_class = cls if issubclass(cls, tf.PreTrainedModel) else None
    with contextlib.redirect_stdout(io.StringIO()):  # a config that prints itself (Bamba) stays quiet
        config, _ = A.as_decoder(A.small_config(cls.config_class if model_class else cls), model_class)
        return A.model_from_config(config, implementation, 0, model_class)


def _ids(model, T: int = 8) -> torch.Tensor:
    return torch.randint(1, A.vocab_of(model.config), (1, T), generator=torch.Generator().manual_seed(0))


def _first_step(model, ids, mask, use_cache: bool = True):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=1, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True, use_cache=use_cache)
    return out.logits[0][0]


def leak_check(model) -> str:
    import inspect

    ids = _ids(model)
    if "inputs_embeds" in inspect.signature(type(model).forward).parameters:
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        kwargs = A.no_cache(type(model))
        logits = A.output_of(model(inputs_embeds=embeds, **kwargs))
        (grad,) = torch.autograd.grad(logits[0, 0].sum(), embeds)
        norms = grad[0].norm(dim=-1)
        later = [s for s in range(1, ids.size(1)) if norms[s] > 0]
        return f"leak: d(output 0)/d(embedding s) > 0 for the later inputs s = {later} (largest {norms[1:].max():.1e})"
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] % (A.vocab_of(model.config) - 1)) + 1
    with torch.no_grad():
        a, b = (A.output_of(model(input_ids=x))[0, 0] for x in (ids, changed))
    return f"leak: |output 0 change| = {float((a - b).abs().max()):.1e} when only the last token changes"


def check(verdict) -> str:
    if verdict.kind == "library_error":
        code = verdict.repro.split('-c "', 1)[1].rstrip('"')
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd="/")
        last = (run.stderr.strip().splitlines() or ["(no error)"])[-1]
        return f"repro exit {run.returncode}: {last[:160]}"
    if verdict.kind == "not_applicable":
        tf = A.require_transformers()
        model = getattr(tf, verdict.target)
        try:
            built = _model(verdict.target)
        except Exception as error:  # noqa: BLE001 - the tiny config fails the class's own validation: read the source
            import inspect

            refusal = next((line.strip() for line in inspect.getsource(model.forward).splitlines()
                            if "raise" in line and "cannot be None" in line), "no refusal found")
            return f"not built ({A.one_line(error)[:60]}...); its forward's source: {refusal}"
        try:
            built(input_ids=torch.ones(1, 4, dtype=torch.long))
            return "forward with token ids alone: runs (not confirmed)"
        except Exception as error:  # noqa: BLE001 - the library's own refusal is the check
            return f"forward with token ids alone ({model.__name__}): {A.one_line(error)[:140]}"
    if verdict.kind == "could_not_audit":
        if A.MISSING_PACKAGE.match(verdict.message or ""):
            package = verdict.message.split(" requires the ", 1)[1].split()[0]
            try:
                importlib.import_module(package)
                return f"import {package}: works (not confirmed)"
            except ImportError as error:
                return f"import {package}: {A.one_line(error)}"
        model = _model(verdict.target)  # the Jacobian test's failure: a backward pass in eval mode
        embeds = model.get_input_embeddings()(_ids(model)).detach().requires_grad_(True)
        try:
            A.output_of(model(inputs_embeds=embeds)).sum().backward()
            return "backward in eval mode: runs (not confirmed)"
        except Exception as error:  # noqa: BLE001
            return f"backward in eval mode: {A.one_line(error)[:140]}"
    if verdict.kind == "leak":
        return leak_check(_model(verdict.target))
    model = _model(verdict.target)
    row = next(r for r in verdict.rows if not r.as_expected)
    ids = _ids(model)
    if row.padding_ok is False:
        padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
        mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)], dim=1)
        diff = float((_first_step(model, padded, mask) - _first_step(model, ids, torch.ones_like(ids))).abs().max())
        return f"padding: generate() first-step logits, left-padded vs unpadded, differ by {diff:.1e}"
    ids = torch.cat([ids, torch.randint(1, A.vocab_of(model.config), (1, 8), generator=torch.Generator().manual_seed(1))])
    result = A.generate_matches(model, ids, [8, 5] if row.padding == "left" else [8, 8], new_tokens=2)
    return (f"cache ({row.padding} padding): generate() with vs without the cache: tokens equal {result['tokens']}, "
            f"logits close {result['logits']}")


def _blocks_other_documents(mask, starts) -> bool | None:
    """Does ``mask`` (bool: True = may read; float: 0 = may read) block each document's first token from the
    token before it (the last of the previous document)? ``None``: no mask (the causal rule alone)."""
    if mask is None:
        return None
    may_read = mask if mask.dtype == torch.bool else mask == 0
    may_read = may_read.reshape(-1, *may_read.shape[-2:])[0]  # [T_q, T_kv]
    return all(not bool(may_read[s, s - 1]) for s in starts)


def packing_mask_check(target: str, implementation: str) -> str:
    """The mask each attention layer receives in the packed call with ``use_cache=False`` and no mask."""
    from attnlab.audit.packing import LENGTHS, packed_row

    model = _model(target, implementation)
    seen = []
    if implementation == "sdpa":
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        original = ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"]

        def recorder(module, query, key, value, attention_mask, *args, **kwargs):
            seen.append(attention_mask)
            return original(module, query, key, value, attention_mask, *args, **kwargs)

        ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"] = recorder
        restore = lambda: ALL_ATTENTION_FUNCTIONS._global_mapping.__setitem__("sdpa", original)  # noqa: E731
    else:
        module = sys.modules[type(model).__module__]
        original = getattr(module, "eager_attention_forward", None)
        if original is None:
            return "packing: the class has no eager_attention_forward to record (not checked)"

        def recorder(module_, query, key, value, attention_mask, *args, **kwargs):
            seen.append(attention_mask)
            return original(module_, query, key, value, attention_mask, *args, **kwargs)

        module.eager_attention_forward = recorder
        restore = lambda: setattr(module, "eager_attention_forward", original)  # noqa: E731
    try:
        _, ids, positions = packed_row(LENGTHS, A.vocab_of(model.config))
        with torch.no_grad():
            model(input_ids=ids, position_ids=positions, **A.no_cache(type(model)))
    finally:
        restore()
    starts = [sum(LENGTHS[:i]) for i in range(1, len(LENGTHS))]
    blocked = [_blocks_other_documents(m, starts) for m in seen]
    if not blocked:
        return "packing (use_cache=False): no attention call recorded"
    return (f"packing (use_cache=False, {implementation}): {sum(b is True for b in blocked)} of {len(blocked)} "
            f"attention calls get a mask that blocks the previous document")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    data = json.loads((pathlib.Path(attnlab.__file__).parent / "data" / "audit-transformers.json").read_text("utf-8"))
    for raw in data["verdicts"]:
        verdict = A.Verdict.from_dict(raw)
        lines = []
        if verdict.kind != "ok":
            try:
                lines.append(check(verdict))
            except Exception as error:  # noqa: BLE001 - a check that cannot run says so
                lines.append(f"check could not run: {A.one_line(error)[:160]}")
        packing = verdict.packing
        if "--packing" in argv and packing is not None and packing.kind == "leaks":
            impl = next((r.implementation for r in packing.rows if r.implementation == "sdpa"),
                        packing.rows[0].implementation)
            try:
                lines.append(packing_mask_check(verdict.target, impl) + (
                    "; use_cache=False keeps them apart" if any(r.isolated for r in packing.rows)
                    else "; documents read each other in every call that ran"))
            except Exception as error:  # noqa: BLE001
                lines.append(f"packing check could not run: {A.one_line(error)[:160]}")
        for line in lines:
            print(f"{verdict.target}\t{verdict.word('en')}\t{line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
