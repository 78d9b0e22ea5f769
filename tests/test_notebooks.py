"""The generator: one source -> three notebooks, fresh, complete, no drift."""

import json
import pathlib
import re
import shutil
import uuid

import nbformat
import pytest
import torch

from tools import notebooks

SOURCES = notebooks.find_sources()
NOTEBOOKS = sorted(p for s in SOURCES if s.meta.get("kind") != "page"
                   for p in (s.output_path(lang) for lang in notebooks.LANGUAGES))


def test_committed_notebooks_are_fresh_complete_and_code_identical():
    assert notebooks.check() == []


def test_there_is_a_chapter_and_every_language_has_it():
    assert len(SOURCES) >= 2 and len(NOTEBOOKS) >= 3
    for path in NOTEBOOKS:
        assert path.exists(), path


def test_rendering_is_deterministic(tmp_path):
    for n in (1, 2):
        for source in SOURCES:
            notebooks.render(source, tmp_path / str(n))
    first = sorted(p.relative_to(tmp_path / "1") for p in (tmp_path / "1").rglob("*.*"))
    assert first
    for rel in first:
        assert (tmp_path / "1" / rel).read_bytes() == (tmp_path / "2" / rel).read_bytes(), rel


def write_source(tmp_path, body):
    path = tmp_path / "chapters" / "src" / "99-test.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\nkind: notebook\n---\n\n" + body, "utf-8")
    return path


def test_a_prose_block_without_all_languages_is_rejected(tmp_path):
    path = write_source(tmp_path, "::::{lang} en\nHello\n::::\n\n::::{lang} de\nHallo\n::::\n")
    with pytest.raises(notebooks.SourceError, match="lacks zh"):
        notebooks.parse_source(path)


def test_text_outside_a_language_block_is_rejected(tmp_path):
    path = write_source(tmp_path, "Just English.\n")
    with pytest.raises(notebooks.SourceError, match="outside"):
        notebooks.parse_source(path)


def test_a_backtick_directive_with_code_in_its_title_is_rejected(tmp_path):
    # CommonMark: a backtick fence's info string holds no backtick, so this line is a paragraph and its
    # closing ``` opens a code block (chapter 1's "Explore it yourself" was drawn as code that way)
    blocks = "".join(f"::::{{lang}} {lang}\n```{{dropdown}} Why `x`?\nBecause.\n```\n::::\n" for lang in ("en", "de", "zh"))
    with pytest.raises(notebooks.SourceError, match=r"99-test.md:6: a backtick in the title"):
        notebooks.parse_source(write_source(tmp_path, blocks))
    fixed = blocks.replace("```{dropdown}", ":::{dropdown}").replace("\n```\n", "\n:::\n")
    assert len(notebooks.parse_source(write_source(tmp_path, fixed)).cells) == 1


def test_a_link_in_a_dropdown_title_is_rejected(tmp_path):
    blocks = "".join(f"::::{{lang}} {lang}\n:::{{dropdown}} Why? See [x](x.ipynb)\nBecause.\n:::\n::::\n"
                     for lang in ("en", "de", "zh"))
    with pytest.raises(notebooks.SourceError, match=r"99-test.md:6: a link in a dropdown's title"):
        notebooks.parse_source(write_source(tmp_path, blocks))
    fixed = blocks.replace(" See [x](x.ipynb)\nBecause.", "\nBecause, see [x](x.ipynb).")
    assert len(notebooks.parse_source(write_source(tmp_path, fixed)).cells) == 1


def test_a_valid_source_gives_one_markdown_cell_per_language_and_shared_code(tmp_path):
    path = write_source(tmp_path, "::::{lang} en\nHi\n::::\n::::{lang} de\nHallo\n::::\n::::{lang} zh\n你好\n::::\n\n"
                                  "```{code-cell}\n:tags: [hide-input]\nx = 1\n```\n")
    source = notebooks.parse_source(path)
    de = notebooks.render_notebook(source, "de")
    zh = notebooks.render_notebook(source, "zh")
    assert [c.id for c in de.cells] == ["md-001", "colab", "setup", "code-002"]
    assert de.cells[0].source == "Hallo" and zh.cells[0].source == "你好"
    assert de.cells[3].source == zh.cells[3].source == "x = 1"
    assert de.cells[3].metadata["tags"] == ["hide-input"]
    assert 'attnlab.setup("de")' in de.cells[2].source


def copy_of_repository(tmp_path):
    for section in notebooks.SOURCE_DIRS:
        for lang in notebooks.LANGUAGES:
            shutil.copytree(notebooks.ROOT / section / lang, tmp_path / section / lang)
    return tmp_path


def test_code_drift_between_languages_is_detected(tmp_path):
    root = copy_of_repository(tmp_path)
    path = root / "chapters" / "de" / NOTEBOOKS[0].name
    nb = nbformat.read(path, as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code" and c.id not in ("colab", "setup"))
    code.source += "\n# changed only in German"
    notebooks.write_notebook(nb, path)
    problems = notebooks.check(root)
    assert any("code differs" in p for p in problems)
    assert any("stale" in p and "/de/" in p for p in problems)


def test_stale_prose_and_orphans_are_detected(tmp_path):
    root = copy_of_repository(tmp_path)
    path = root / "chapters" / "zh" / NOTEBOOKS[0].name
    nb = nbformat.read(path, as_version=4)
    next(c for c in nb.cells if c.cell_type == "markdown").source += " 旧"
    notebooks.write_notebook(nb, path)
    (root / "chapters" / "en" / "77-orphan.ipynb").write_text("{}")
    problems = notebooks.check(root)
    assert any("stale" in p and "/zh/" in p for p in problems)
    assert any("77-orphan" in p for p in problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_outputs_have_no_errors_warnings_or_random_ids(path):
    nb = json.loads(path.read_text("utf-8"))
    assert nb["metadata"]["attnlab"]["language"] == path.parent.name
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", cell["id"]
            assert output.get("name") != "stderr", (cell["id"], output.get("text"))
            assert "Glyph" not in json.dumps(output), cell["id"]
    figures = [o for c in nb["cells"] for o in c.get("outputs", [])
               if o.get("data", {}).get("text/plain", "").startswith("<Figure")]
    assert all("image/png" in o["data"] for o in figures), "a figure without its picture"
    state = nb["metadata"].get("widgets", {}).get(notebooks.WIDGET_STATE, {}).get("state", {})
    views = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for c in nb["cells"] for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert all(view in state for view in views)
    expected = {uuid.uuid5(uuid.NAMESPACE_URL, f"attnlab:{path.relative_to(notebooks.ROOT).as_posix()}:{n}").hex
                for n in range(len(state))}
    assert set(state) == expected


def cell_defining(nb, name):
    return next(c.source for c in nb.cells if c.cell_type == "code" and re.search(rf"^(def|class) {name}\b", c.source, re.M))


def test_the_mask_code_taught_in_chapter_1_agrees_with_the_package():
    from attnlab import attention, masks

    nb = nbformat.read(notebooks.ROOT / "chapters" / "en" / "01-causal-mask.ipynb", as_version=4)
    namespace = {}
    exec(next(c.source for c in nb.cells if c.cell_type == "code" and c.id not in ("colab", "setup")), namespace)  # imports
    for name in ("causal_attention_masked_fill", "causal_bias", "NanoGPTMask"):
        exec(cell_defining(nb, name), namespace)
    q, k, v = torch.randn(3, 2, 3, 9, 4).unbind(0)
    expected = attention.causal_attention(q, k, v)
    assert torch.allclose(namespace["causal_attention_masked_fill"](q, k, v), expected, atol=1e-6)
    assert torch.equal(namespace["causal_bias"](9), masks.additive_mask(masks.causal_allowed(9)))
    assert torch.allclose(namespace["NanoGPTMask"](16)(q, k, v), expected, atol=1e-6)


def test_comments_are_localized_and_code_stays_identical(tmp_path):
    code = ("x = 1  # en: one | de: eins | zh: 一\n"
            "if x:\n"
            "    # en: a whole line\n"
            "    # de: eine ganze Zeile\n"
            "    # zh: 整行\n"
            "    y = '# en: not a comment'  # plain comment stays\n"
            "    # en: one line | de: eine Zeile | zh: 一行\n")
    assert notebooks.localize_code(code, "de") == (
        "x = 1  # eins\nif x:\n    # eine ganze Zeile\n    y = '# en: not a comment'  # plain comment stays\n"
        "    # eine Zeile\n")
    assert notebooks.localize_code(code, "zh").splitlines()[0] == "x = 1  # 一"
    stripped = {notebooks.strip_comments(notebooks.localize_code(code, lang)) for lang in notebooks.LANGUAGES}
    assert len(stripped) == 1


def test_a_comment_with_a_lead_in_before_en_keeps_the_lead_in_and_one_language():
    code = "real = left.any(-1)  # [B, H, T]: en: queries with something to read | de: Queries, die etwas lesen | zh: 有东西可读的查询"
    assert notebooks.localize_code(code, "de") == "real = left.any(-1)  # [B, H, T]: Queries, die etwas lesen"
    assert notebooks.localize_code(code, "zh").endswith("# [B, H, T]：有东西可读的查询")  # full-width, no space
    assert notebooks.localize_code('print("#")  # [T]: en: a | de: b | zh: c', "de") == 'print("#")  # [T]: b'


GENERATED = sorted(p for section in (*notebooks.SOURCE_DIRS, *notebooks.GENERATED_DIRS) for lang in notebooks.LANGUAGES
                   for p in (notebooks.ROOT / section / lang).glob("*.*") if p.suffix in (".ipynb", ".md"))


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.relative_to(notebooks.ROOT).as_posix())
def test_no_generated_file_shows_the_other_languages_of_a_comment(path):
    nb = json.loads(path.read_text("utf-8")) if path.suffix == ".ipynb" else {"cells": [{"source": path.read_text("utf-8")}]}
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        assert "| de:" not in source and "| zh:" not in source, (cell.get("id"), source[:200])


def test_a_comment_in_one_language_only_is_rejected(tmp_path):
    path = write_source(tmp_path, "```{code-cell}\n# en: only English\nx = 1\n```\n")
    with pytest.raises(notebooks.SourceError, match=r"99-test.md:\d+: .*needs '# de"):
        notebooks.parse_source(path)


FIGURE_CELL = ("```{code-cell}\n"
               ":tags: [hide-input]\n"
               ":alt: en: A heatmap of the mask | de: Eine Heatmap der Maske | zh: 掩码的热力图\n"
               ":caption: en: The causal mask | de: Die kausale Maske | zh: 因果掩码\n"
               "show()\n"
               "```\n")


def test_alt_text_and_caption_go_into_myst_nb_cell_metadata_in_each_language(tmp_path):
    source = notebooks.parse_source(write_source(tmp_path, FIGURE_CELL))
    expected = {"en": ("A heatmap of the mask", "The causal mask"), "de": ("Eine Heatmap der Maske", "Die kausale Maske"),
                "zh": ("掩码的热力图", "因果掩码")}
    for lang, (alt, caption) in expected.items():
        cell = notebooks.render_notebook(source, lang).cells[2]  # after the generated colab and setup cells
        assert cell.source == "show()" and cell.metadata["tags"] == ["hide-input"]
        assert cell.metadata["mystnb"] == {"image": {"alt": alt}, "figure": {"caption": caption}}
        assert alt in notebooks.reader_text(source, lang) and caption in notebooks.reader_text(source, lang)


@pytest.mark.parametrize("option, missing", [
    (":alt: en: A heatmap | de: Eine Heatmap", "zh"),
    (":caption: en: The mask | zh: 掩码", "de"),
    (":alt: en: A heatmap | de: Eine Heatmap | zh:", "zh"),
    (":alt: A heatmap", "en, de, zh"),
])
def test_an_alt_text_or_caption_without_all_languages_is_rejected_with_file_and_line(tmp_path, option, missing):
    path = write_source(tmp_path, f"```{{code-cell}}\n:tags: [hide-input]\n{option}\nshow()\n```\n")
    with pytest.raises(notebooks.SourceError, match=rf"99-test.md:7: :(alt|caption): lacks {missing}:"):
        notebooks.parse_source(path)


def test_an_unknown_or_repeated_cell_option_is_rejected(tmp_path):
    with pytest.raises(notebooks.SourceError, match=r"99-test.md:6: unknown cell option :atl:"):
        notebooks.parse_source(write_source(tmp_path / "a", "```{code-cell}\n:atl: en: x | de: x | zh: x\nx = 1\n```\n"))
    with pytest.raises(notebooks.SourceError, match=r"99-test.md:7: second :alt:"):
        notebooks.parse_source(write_source(tmp_path / "b", "```{code-cell}\n:alt: en: a | de: a | zh: a\n"
                                                             ":alt: en: b | de: b | zh: b\nx = 1\n```\n"))


def test_a_figure_without_alt_text_is_found(tmp_path):
    nb = notebooks.render_notebook(notebooks.parse_source(write_source(tmp_path, FIGURE_CELL)), "en")
    figure = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    nb.cells[2].outputs = [figure]
    assert notebooks.figures_without_alt(nb) == []
    del nb.cells[2].metadata["mystnb"]["image"]
    assert notebooks.figures_without_alt(nb) == ["code-001"]
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="no picture")]
    assert notebooks.figures_without_alt(nb) == []


def test_code_in_a_page_becomes_a_python_block_with_the_readers_comments(tmp_path):
    path = tmp_path / "chapters" / "src" / "page.md"
    path.parent.mkdir(parents=True)
    path.write_text("---\nkind: page\n---\n\n::::{lang} en\n# Page\n::::\n::::{lang} de\n# Seite\n::::\n"
                    "::::{lang} zh\n# 页面\n::::\n\n```{code-cell}\nx = 1  # en: one | de: eins | zh: 一\n```\n", "utf-8")
    source = notebooks.parse_source(path)
    assert notebooks.render_page(source, "de").endswith("# Seite\n\n```python\nx = 1  # eins\n```\n")
    assert "x = 1  # 一" in notebooks.render_page(source, "zh")


def test_refresh_adds_new_cell_options_but_keeps_outputs_and_refuses_code_changes(tmp_path):
    path = write_source(tmp_path, "```{code-cell}\nshow()\n```\n")
    source = notebooks.parse_source(path)
    for out in notebooks.render(source, tmp_path):  # stands in for executed notebooks
        nb = nbformat.read(out, as_version=4)
        nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="kept\n")]
        nb.cells[2].execution_count = 1
        notebooks.write_notebook(nb, out)
    path.write_text(path.read_text("utf-8").replace("```{code-cell}\n", "```{code-cell}\n:alt: en: a | de: b | zh: 丙\n"))
    refreshed = notebooks.refresh(notebooks.parse_source(path), tmp_path)
    nb = nbformat.read(refreshed[2], as_version=4)
    assert nb.cells[2].metadata["mystnb"] == {"image": {"alt": "丙"}} and nb.cells[2].outputs[0].text == "kept\n"
    path.write_text(path.read_text("utf-8").replace("show()", "show()  # en: a comment | de: ein Kommentar | zh: 注释"))
    refreshed = notebooks.refresh(notebooks.parse_source(path), tmp_path)  # a comment cannot change an output
    nb = nbformat.read(refreshed[1], as_version=4)  # de
    assert nb.cells[2].source.endswith("# ein Kommentar") and nb.cells[2].outputs[0].text == "kept\n"
    path.write_text(path.read_text("utf-8").replace("show()", "show(1)"))
    with pytest.raises(notebooks.SourceError, match="code changed"):
        notebooks.refresh(notebooks.parse_source(path), tmp_path)


def test_refresh_takes_new_prose_keeps_outputs_and_rewrites_nothing_when_code_changed(tmp_path):
    prose = "::::{lang} en\nHello\n::::\n::::{lang} de\nHallo\n::::\n::::{lang} zh\n你好\n::::\n\n"
    path = write_source(tmp_path, prose + "```{code-cell}\nshow()\n```\n")
    for out in notebooks.render(notebooks.parse_source(path), tmp_path):
        nb = nbformat.read(out, as_version=4)
        show = next(c for c in nb.cells if c.source == "show()")
        show.outputs = [nbformat.v4.new_output("stream", name="stdout", text="kept\n")]
        notebooks.write_notebook(nb, out)
    path.write_text(path.read_text("utf-8").replace("Hallo", "Hallo, Welt"))
    refreshed = notebooks.refresh(notebooks.parse_source(path), tmp_path)
    nb = nbformat.read(refreshed[1], as_version=4)  # de
    assert nb.cells[0].source.startswith("Hallo, Welt")
    assert next(c for c in nb.cells if c.source == "show()").outputs[0].text == "kept\n"
    before = [p.read_bytes() for p in refreshed]
    path.write_text(path.read_text("utf-8").replace("Hallo, Welt", "Hallo").replace("show()", "show(2)"))
    with pytest.raises(notebooks.SourceError, match="code changed"):
        notebooks.refresh(notebooks.parse_source(path), tmp_path)
    assert [p.read_bytes() for p in refreshed] == before  # refused: nothing was rewritten


def test_the_index_lists_every_chapter_of_the_toc_in_order_with_its_own_title():
    slugs = notebooks.toc_chapters()
    assert len(slugs) >= 11 and slugs == sorted(slugs)
    for lang in notebooks.LANGUAGES:
        page = (notebooks.ROOT / "chapters" / lang / "index.md").read_text("utf-8")
        # a zh title that ends in "？" is bolded without it (CommonMark would show "**…吗？**针对"'s asterisks)
        items = re.findall(r"^(\d+)\. \*\*(.+?)\*\*(？?)", page, re.M)
        assert [int(n) for n, _, _ in items] == list(range(1, len(slugs) + 1)), lang
        assert [t + mark for _, t, mark in items] == [notebooks.chapter_title(s, lang)[1] for s in slugs], lang
        # de-b review 2026-12-02: "**Ist mein Modell kausal?**:" put a colon right after a question mark
        assert not re.search(r"[?？]\*\*[:：]", page), lang


def test_a_chapter_list_without_a_chapter_of_the_toc_or_with_an_unknown_one_is_rejected():
    lines = [f"{slug}: text" for slug in notebooks.toc_chapters()]
    assert notebooks.chapter_list("\n".join(lines), "en", "x").startswith("1. **")
    with pytest.raises(notebooks.SourceError, match="lacks 10-auditing-a-real-model"):
        notebooks.chapter_list("\n".join(l for l in lines if not l.startswith("10-")), "en", "x")
    with pytest.raises(notebooks.SourceError, match="names 12-new"):
        notebooks.chapter_list("\n".join(lines + ["12-new: text"]), "en", "x")


def test_a_comment_with_english_words_in_a_de_or_zh_notebook_is_found(tmp_path):
    path = write_source(tmp_path, "::::{lang} en\nHi\n```python\nx = 1  # the new query\n```\n::::\n"
                                  "::::{lang} de\nHallo\n```python\nx = 1  # the new query\n```\n::::\n"
                                  "::::{lang} zh\n你好\n```python\nx = 1  # 新的查询\n```\n::::\n\n"
                                  "```{code-cell}\nq, k = 1, 2  # [B, T] each\nq_kv = q  # [B, H, T_kv, d] -> [B, T, D]\n"
                                  "dq = k  # dQ = dS K / sqrt(d)\nk_new = k  # [B, T]: en: new keys | de: neue Keys | zh: 新的键\n```\n")
    found = notebooks.untranslated_comments(notebooks.parse_source(path))
    assert sorted(f.split(": ", 1)[1] for f in found) == ["de prose: '# the new query' (the, new, query)",
                                                         "de: '# [B, T] each' (each)", "zh: '# [B, T] each' (each)"], found
