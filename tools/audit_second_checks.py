"""The second checks behind the flagged rows of the committed sweep (docs/audit-second-checks.md).

    python -m tools.audit_second_checks      # prints one line per LIBRARY ERROR, LEAK and OUTPUTS DIFFER row

For a LIBRARY ERROR row it runs the row's one-line repro (the library alone, in a fresh interpreter) and
prints the exception it ends with. For a padding difference it asks the library's own ``generate()``:
the first generated step's logits for a prompt with three padding tokens on the left (masked) against
the same prompt unpadded. For a cache difference: ``generate()`` with and without the cache. For a leak:
the logits at position 0 with and without a changed token 1, one plain forward pass each. None of this
goes through the auditor's Adapter.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import warnings

import torch

import attnlab
from attnlab import audit as A

warnings.simplefilter("ignore")


def _model(target: str):
    tf = A.require_transformers()
    cls = getattr(tf, target)
    config, _ = A.as_decoder(A.small_config(cls.config_class), cls)
    return A.model_from_config(config, "eager", 0, cls)


def _first_step(model, ids, mask):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=1, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    return out.logits[0][0]


def check(verdict) -> str:
    if verdict.kind == "library_error":
        code = verdict.repro.split('-c "', 1)[1].rstrip('"')
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        last = (run.stderr.strip().splitlines() or ["(no error)"])[-1]
        return f"repro exit {run.returncode}: {last[:160]}"
    model = _model(verdict.target)
    row = next(r for r in verdict.rows if not r.as_expected)
    ids = torch.randint(1, A.vocab_of(model.config), (1, 8), generator=torch.Generator().manual_seed(0))
    if row.leaking:
        changed = ids.clone()
        changed[0, 1] = (changed[0, 1] % (A.vocab_of(model.config) - 1)) + 1
        with torch.no_grad():
            a, b = (A.output_of(model(input_ids=x))[0, 0] for x in (ids, changed))
        return f"leak: |logits[0] change| = {float((a - b).abs().max()):.1e} when token 1 changes"
    if row.padding_ok is False:
        padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
        mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)], dim=1)
        diff = float((_first_step(model, padded, mask) - _first_step(model, ids, torch.ones_like(ids))).abs().max())
        return f"padding: generate() first-step logits, left-padded vs unpadded, differ by {diff:.1e}"
    if row.padding == "left":  # two prompts, the second left-padded by 3 (generate() pads them this way)
        ids = torch.cat([ids, torch.randint(1, A.vocab_of(model.config), (1, 8), generator=torch.Generator().manual_seed(1))])
        lengths = [8, 5]
    else:
        lengths = [8]
    result = A.generate_matches(model, ids, lengths, new_tokens=2)
    return (f"cache ({row.padding} padding): generate() with vs without the cache: tokens equal {result['tokens']}, "
            f"logits close {result['logits']}")


def main() -> int:
    data = json.loads((pathlib.Path(attnlab.__file__).parent / "data" / "audit-transformers.json").read_text("utf-8"))
    for raw in data["verdicts"]:
        verdict = A.Verdict.from_dict(raw)
        if verdict.kind in ("library_error", "leak", "differ"):
            try:
                line = check(verdict)
            except Exception as error:  # noqa: BLE001 - a check that cannot run says so
                line = f"check could not run: {A.one_line(error)[:160]}"
            print(f"{verdict.target}\t{verdict.word('en')}\t{line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
