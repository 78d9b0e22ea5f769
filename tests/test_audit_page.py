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
    assert all(v.get("packing") for v in DATA["verdicts"])  # the fourth check ran for every target


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
    assert verdict.packing.reason("en") == again.packing.reason("en")  # the packing column too


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
    assert "„Gebaut mit“" in de and "| Gebaut mit |" in de and "„Aufbau“" not in de and "unter 5.17.0 voraus" in de
    assert "KV cache" not in zh.replace("KV 缓存（键值缓存，KV cache）", "") and "padding token" not in zh


def test_the_verdict_table_shows_every_kind_even_at_zero_and_the_packing_column_says_what_to_pass():
    from attnlab.audit import KINDS, PACKING_KINDS
    from attnlab.i18n import tr

    source = audit_page.page_source(DATA)
    for lang in ("en", "de", "zh"):
        text = source.split(f"::::{{lang}} {lang}\n", 1)[1].split("\n::::", 1)[0]
        for kind in KINDS:  # LEAK 0 and NOT APPLICABLE 0 are the headline where they are 0
            assert f"| {tr(f'audit.kind_{kind}', lang=lang)} | {sum(v['kind'] == kind for v in DATA['verdicts'])} |" in text
        for kind in PACKING_KINDS:
            assert f"| {tr(f'audit.packing_{kind}', lang=lang)} | " in text
        assert f"| {tr('audit_page.col_packing', lang=lang)} |" in text and tr("audit.call_no_cache", lang=lang) in text
    en = source.split("::::{lang} en\n", 1)[1]
    assert "| `LlamaForCausalLM` | AS EXPECTED | PACKING LEAKS |" in en  # the default call and an all-ones mask leak
    assert "with left padding the logits differ only because the absolute positions shift" in en
    assert "RWKV is recurrent and ignores attention_mask by design" in en
    assert "10^{-5} \\cdot \\max(1, \\max|\\text{logit}|)" in en
