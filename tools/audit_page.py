"""The book page "Causality of transformers <version>", written from the committed sweep.

    python -m tools.audit_page            # chapters/src/transformers-causality.md from the JSON
    python -m tools.audit_page --sweep    # first rerun the sweep (python -m attnlab.audit --all), minutes

The JSON (attnlab/data/audit-transformers.json) is what ``python -m attnlab.audit --all --json``
writes; the page source is a ``kind: page`` source (docs/authoring.md), rendered into
chapters/{en,de,zh}/transformers-causality.md by tools/notebooks/. ``make audit-page`` runs both.
Every text of the page is in attnlab/messages.toml (``audit_page.*``, and the verdicts' ``audit.*``
reasons), in three languages, rendered through ``attnlab.i18n.tr``. The reports for the library's
maintainers (docs/findings/*.md) are linked from the rows they explain: a report names its classes in a
``<!-- classes: ... -->`` comment, a packing report its pattern in ``<!-- packing: ... -->``.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "attnlab" / "data" / "audit-transformers.json"
SOURCE = ROOT / "chapters" / "src" / "transformers-causality.md"
FINDINGS = ROOT / "docs" / "findings"
LANGS = ("en", "de", "zh")
BART_FAMILY = ("BartForCausalLM", "BigBirdPegasusForCausalLM", "BlenderbotForCausalLM", "BlenderbotSmallForCausalLM",
               "MarianForCausalLM", "MBartForCausalLM", "MvpForCausalLM", "PegasusForCausalLM", "PLBartForCausalLM")
REPRO = ('python -c "import torch, transformers as t; t.BartForCausalLM(t.BartConfig(encoder_layers=1, '
         'decoder_layers=2, d_model=16, vocab_size=64))(torch.ones(1, 4, dtype=torch.long), use_cache=True)"')
ORDER = ("leak", "differ", "library_error", "could_not_audit", "not_applicable", "ok")


def blob_url(path: str) -> str:
    """The address of a file of the repository on its host, from _config.yml's repository (set there once)."""
    config = (ROOT / "_config.yml").read_text("utf-8")
    url = re.search(r"^repository:\s*\n(?:\s+.*\n)*?\s+url:\s*(\S+)", config, re.M).group(1)
    branch = re.search(r"^repository:\s*\n(?:\s+.*\n)*?\s+branch:\s*(\S+)", config, re.M)
    return f"{url.rstrip('/')}/blob/{branch.group(1) if branch else 'main'}/{path}"


@dataclass
class Finding:
    """One report of docs/findings/: its file, title, the classes it explains, its packing pattern."""

    path: pathlib.Path
    title: str
    classes: tuple
    packing: str | None

    @property
    def url(self) -> str:
        return blob_url(self.path.relative_to(ROOT).as_posix())


def findings() -> list[Finding]:
    found = []
    for path in sorted(FINDINGS.glob("*.md")):
        if path.name == "README.md":
            continue
        text = path.read_text("utf-8")
        title = re.search(r"^# (.+)$", text, re.M).group(1)
        classes = re.search(r"<!-- classes: (.*?) -->", text)
        packing = re.search(r"<!-- packing: (.*?) -->", text)
        found.append(Finding(path, title, tuple(c.strip() for c in classes.group(1).split(",")) if classes else (),
                             packing.group(1) if packing else None))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


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


def _pattern(packing) -> tuple:
    """What the calls do, without the implementations: the key that groups classes in the packing table."""
    if packing is None:
        return ("none",)
    if not packing.rows:
        return (packing.kind, packing.reason_key)
    return (packing.kind,) + tuple(sorted({(row.call, "apart" if row.isolated else "crash" if row.isolated is None
                                            else "reads" if row.reads else "positions") for row in packing.rows}))


def page_source(data: dict) -> str:
    """The ``kind: page`` source of the page, from the sweep's JSON; every text is an ``audit_page.*`` or
    ``audit.*`` message of attnlab/messages.toml, rendered in each language."""
    from attnlab.audit import KINDS, PACKING_KINDS, Verdict
    from attnlab.i18n import tr

    verdicts = [Verdict.from_dict(v) for v in data["verdicts"]]
    reports = findings()
    report_of = {name: f for f in reports if not f.packing for name in f.classes}  # a verdict's own report
    values = dict(version=data["transformers"], torch=data["torch"], n=len(verdicts), limit=f"{data.get('limit', 120):g}")
    bart = [f"`{v.target}`" for v in verdicts if v.target in BART_FAMILY and v.kind == "library_error"]
    groups: dict[tuple, list] = {}
    for v in verdicts:
        groups.setdefault(_pattern(v.packing), []).append(v)

    def text(key: str, lang: str, **more) -> str:
        return tr(f"audit_page.{key}", lang=lang, **more)

    def link(finding, lang) -> str:
        return f"[{text('report', lang)}]({finding.url})"

    def counts(lang: str) -> str:
        lines = [text("counts", lang), "", f"| {text('col_verdict', lang)} | {text('col_count', lang)} |", "|---|---|"]
        lines += [f"| {tr(f'audit.kind_{kind}', lang=lang)} | {sum(v.kind == kind for v in verdicts)} |" for kind in KINDS]
        lines += ["", f"| {text('col_packing', lang)} | {text('col_count', lang)} |", "|---|---|"]
        lines += [f"| {tr(f'audit.packing_{kind}', lang=lang)} | "
                  f"{sum(v.packing is not None and v.packing.kind == kind for v in verdicts)} |" for kind in PACKING_KINDS]
        return "\n".join(lines)

    def packing_table(lang: str) -> str:
        lines = [f"| {text('col_packing', lang)} | {text('col_calls', lang)} | {text('col_classes', lang)} |",
                 "|---|---|---|"]
        sep = text("list_sep", lang)
        for key, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            first = members[0].packing
            if first is None:
                continue
            if first.rows:  # the calls, without the implementations (a class refusing sdpa joins its pattern)
                describe = first.reason(lang, implementations=False)
            elif first.kind == "could_not_check":
                describe = sep.join(f"`{v.target}`: {v.packing.reason(lang)}" for v in members)
            else:
                describe = text(f"packing_group_{(first.reason_key or '').rsplit('.', 1)[-1]}", lang)
            linked = [f for f in reports if f.packing and (
                set(f.classes) & {v.target for v in members} or
                (not f.classes and first.kind == "leaks" and any(r.isolated for r in first.rows)))]
            if linked:
                describe += " (" + sep.join(f"[{f.title}]({f.url})" for f in linked) + ")"
            names = sep.join(f"`{v.target}`" for v in sorted(members, key=lambda v: v.target))
            lines.append(f"| {first.word(lang)} ({len(members)}) | {_cell(describe)} | {names} |")
        return "\n".join(lines)

    def section(lang: str) -> str:
        parts = [text("title", lang, **values), text("intro", lang, **values), counts(lang), text("kinds", lang)]
        parts += [text("packing_title", lang), text("packing", lang), text("packing_kinds", lang), packing_table(lang)]
        parts += [text("findings_title", lang), text("findings", lang, url=blob_url("docs/findings/README.md")),
                  "\n".join(f"- [{f.title}]({f.url})" for f in reports)]
        parts += [text("bug_title", lang),
                  text("bug", lang, classes=text("list_sep", lang).join(bart) or "-", repro=REPRO)]
        parts += [text("second_title", lang), text("second", lang, url=blob_url("docs/audit-second-checks.md"))]
        parts += [text("history_title", lang), text("history", lang), text("blind_title", lang), text("blind", lang)]
        lines = [text("all_title", lang), "",
                 f"| {text('col_class', lang)} | {text('col_verdict', lang)} | {text('col_packing', lang)} | "
                 f"{text('col_reason', lang)} | {text('col_built', lang)} |", "|---|---|---|---|---|"]
        for v in sorted(verdicts, key=lambda v: (ORDER.index(v.kind), v.target)):
            reason = v.reason(lang)
            if v.target in report_of and v.kind != "ok":
                reason += f" ({link(report_of[v.target], lang)})"
            packing = "-" if v.packing is None else v.packing.word(lang)
            lines.append(f"| `{v.target}` | {v.word(lang)} | {packing} | {_cell(reason)} | {_built(v, lang, tr)} |")
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
