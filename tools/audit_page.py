"""The book page "Causality of transformers <version>", written from the committed sweep.

    python -m tools.audit_page            # chapters/src/transformers-causality.md from the JSON
    python -m tools.audit_page --sweep    # first rerun the sweep (python -m attnlab.audit --all), minutes

The JSON (attnlab/data/audit-transformers.json) is what ``python -m attnlab.audit --all --json``
writes; the page source is a ``kind: page`` source (docs/authoring.md), rendered into
chapters/{en,de,zh}/transformers-causality.md by tools/notebooks/. ``make audit-page`` runs both.
Every text of the page is in attnlab/messages.toml (``audit_page.*``, and the verdicts' ``audit.*``
reasons), in three languages, rendered through ``attnlab.i18n.tr``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "attnlab" / "data" / "audit-transformers.json"
SOURCE = ROOT / "chapters" / "src" / "transformers-causality.md"
LANGS = ("en", "de", "zh")
BART_FAMILY = ("BartForCausalLM", "BigBirdPegasusForCausalLM", "BlenderbotForCausalLM", "BlenderbotSmallForCausalLM",
               "MarianForCausalLM", "MBartForCausalLM", "MvpForCausalLM", "PegasusForCausalLM", "PLBartForCausalLM")
REPRO = ('python -c "import torch, transformers as t; t.BartForCausalLM(t.BartConfig(encoder_layers=1, '
         'decoder_layers=2, d_model=16, vocab_size=64))(torch.ones(1, 4, dtype=torch.long), use_cache=True)"')

SECOND_CHECKS = "https://github.com/attnlab/causal-attention/blob/main/docs/audit-second-checks.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _built(verdict, lang: str, tr) -> str:
    """What was set or refused for this target, joined as the reader's language joins a list. A "refusal"
    whose message is the verdict's own (an import error under every implementation) is the failure, not a
    refusal: the reason column says it."""
    parts = []
    for key, values in verdict.notes:
        if key == "audit.note_set":
            parts.append(f"`{values['setting']}`")
        elif key == "audit.note_skipped" and not (verdict.message or "").startswith(values.get("message") or "\0"):
            parts.append(tr("audit_page.refused", lang=lang, impl=f"`{values['impl']}`"))
    return tr("audit_page.list_sep", lang=lang).join(parts)


def page_source(data: dict) -> str:
    """The ``kind: page`` source of the page, from the sweep's JSON; every text is an ``audit_page.*`` or
    ``audit.*`` message of attnlab/messages.toml, rendered in each language."""
    from attnlab.audit import KINDS, Verdict
    from attnlab.i18n import tr

    verdicts = [Verdict.from_dict(v) for v in data["verdicts"]]
    values = dict(version=data["transformers"], torch=data["torch"], n=len(verdicts), limit=f"{data.get('limit', 120):g}")
    order = {kind: i for i, kind in enumerate(("leak", "differ", "library_error", "could_not_audit", "not_applicable",
                                                "ok"))}
    bart = [f"`{v.target}`" for v in verdicts if v.target in BART_FAMILY and v.kind == "library_error"]

    def text(key: str, lang: str, **more) -> str:
        return tr(f"audit_page.{key}", lang=lang, **more)

    def section(lang: str) -> str:
        parts = [text("title", lang, **values), text("intro", lang, **values)]
        lines = [text("counts", lang), "", f"| {text('col_verdict', lang)} | {text('col_count', lang)} |", "|---|---|"]
        for kind in KINDS:
            n = sum(v.kind == kind for v in verdicts)
            if n:
                lines.append(f"| {tr(f'audit.kind_{kind}', lang=lang)} | {n} |")
        parts += ["\n".join(lines), text("kinds", lang)]
        parts += [text("bug_title", lang),
                  text("bug", lang, classes=text("list_sep", lang).join(bart) or "-", repro=REPRO)]
        parts += [text("second_title", lang), text("second", lang, url=SECOND_CHECKS)]
        parts += [text("history_title", lang), text("history", lang), text("blind_title", lang), text("blind", lang)]
        lines = [text("all_title", lang), "",
                 f"| {text('col_class', lang)} | {text('col_verdict', lang)} | {text('col_reason', lang)} | "
                 f"{text('col_built', lang)} |", "|---|---|---|---|"]
        for v in sorted(verdicts, key=lambda v: (order[v.kind], v.target)):
            lines.append(f"| `{v.target}` | {v.word(lang)} | {_cell(v.reason(lang))} | {_built(v, lang, tr)} |")
        parts += ["\n".join(lines), text("footer", lang)]
        return "\n\n".join(parts)

    header = "---\nkind: page\n---\n\n"
    return header + "\n\n".join(f"::::{{lang}} {lang}\n{section(lang)}\n::::" for lang in LANGS) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--sweep" in argv:
        subprocess.run([sys.executable, "-m", "attnlab.audit", "--all", "--workers", "2", "--limit", "120",
                        "--json", str(DATA)], check=False, cwd=ROOT)
    data = json.loads(DATA.read_text("utf-8"))
    SOURCE.write_text(page_source(data), "utf-8")
    subprocess.run([sys.executable, "-m", "tools.notebooks", "build", str(SOURCE.relative_to(ROOT))], check=True,
                   cwd=ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
