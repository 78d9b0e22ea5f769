"""The page "Causality of transformers" (chapters/src/transformers-causality.md, tools/audit_page.py):
written from the committed sweep, and the sweep still what the auditor finds (the fastest rows of each kind)."""

import json

import pytest

from tools import audit_page, notebooks

transformers = pytest.importorskip("transformers")

DATA = json.loads(audit_page.DATA.read_text("utf-8"))


def test_the_page_source_is_what_the_generator_writes_from_the_committed_json():
    assert audit_page.SOURCE.read_text("utf-8") == audit_page.page_source(DATA), "run `make audit-page`"
    assert notebooks.parse_source(audit_page.SOURCE).meta["kind"] == "page"
    toc = (notebooks.ROOT / "_toc.yml").read_text("utf-8")
    assert "chapters/en/transformers-causality" in toc
    for lang in ("en", "de", "zh"):
        page = (notebooks.ROOT / "chapters" / lang / "transformers-causality.md").read_text("utf-8")
        assert DATA["transformers"] in page and "BartForCausalLM" in page and "#48745" in page
    assert len(DATA["verdicts"]) >= 200 and {v["kind"] for v in DATA["verdicts"]} >= {"ok", "library_error"}


def fastest(kind: str, n: int) -> list[dict]:
    rows = sorted((v for v in DATA["verdicts"] if v["kind"] == kind), key=lambda v: v["seconds"] or 0)
    return rows[:n]


PICKS = [v for kind, n in [("ok", 2), ("leak", 1), ("differ", 1), ("library_error", 1), ("not_applicable", 1),
                           ("could_not_audit", 1)] for v in fastest(kind, n)
         if not (v["message"] or "").startswith(("no verdict within", "the process ended"))]


@pytest.mark.skipif(transformers.__version__ != DATA["transformers"], reason="the sweep is of another version")
@pytest.mark.parametrize("stored", PICKS, ids=[v["target"] for v in PICKS])
def test_a_fast_row_of_each_verdict_kind_is_still_what_the_auditor_finds(stored):
    from attnlab.audit import Verdict, audit_target

    verdict = audit_target(stored["target"], DATA["implementations"], T=DATA["length"])
    again = Verdict.from_dict(stored)
    assert (verdict.kind, verdict.reason("en")) == (again.kind, again.reason("en"))


def test_every_text_of_the_page_is_a_message_in_three_languages_and_reads_as_each_language_writes():
    from attnlab.i18n import catalog

    keys = [key for key in catalog() if key.startswith("audit_page.")]
    assert len(keys) >= 20 and all(set(catalog()[key]) >= {"en", "de", "zh"} for key in keys)
    source = audit_page.page_source(DATA)
    en, de, zh = (source.split(f"::::{{lang}} {lang}\n", 1)[1].split("\n::::", 1)[0] for lang in ("en", "de", "zh"))
    assert "| n |" not in source and "| Anzahl |" in de and "| 数量 |" in zh
    assert "**WIE ERWARTET**" in de and "**AS EXPECTED**" in en and "**符合预期**" in zh
    assert "`BartForCausalLM`、`" in zh and "`, `" not in zh  # a Chinese list joins with 、
    for text in (de, zh):  # the auditor's own reasons (time-outs, its cached pass) in the page's language
        assert "no verdict within" not in text and "the auditor's cached pass" not in text
    assert "Cache und Padding stimmen überein" not in de and "modul:Klasse" not in catalog()["audit.cli_target"]["de"]
