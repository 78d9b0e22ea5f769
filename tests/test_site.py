"""The built site: three languages, switcher, local assets only, search, launch buttons.

Builds the site from scratch (tools/site.py, warnings as errors) once per run.
"""

import json
import pathlib
import re
from html.parser import HTMLParser

import pytest

from tools import site

LANGS = ("en", "de", "zh")
REPO = "attnlab/causal-attention"


@pytest.fixture(scope="module")
def html_root() -> pathlib.Path:
    site.build(list(LANGS))
    return site.HTML


class Page(HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.scripts, self.styles, self.links, self.switcher = [], [], [], []
        self._in_switcher = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        if tag == "link" and "stylesheet" in (a.get("rel") or ""):
            self.styles.append(a["href"])
        if tag == "link" and a.get("rel") in ("icon", "preload", "modulepreload"):
            self.styles.append(a["href"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
            if self._in_switcher:
                self.switcher.append((a.get("hreflang"), a["href"]))
        if tag == "nav" and "attnlab-lang" in (a.get("class") or ""):
            self._in_switcher = True

    def handle_endtag(self, tag):
        if tag == "nav":
            self._in_switcher = False


def pages(html_root, lang):
    return sorted((html_root / lang).rglob("*.html"))


def test_three_languages_and_a_root_page_that_offers_all(html_root):
    root_page = (html_root / "index.html").read_text("utf-8")
    for lang in LANGS:
        target = html_root / lang / "chapters" / lang / "index.html"
        assert target.exists()
        assert f'"{lang}/chapters/{lang}/index.html"' in root_page
        assert (html_root / lang / "chapters" / lang / "01-causal-mask.html").exists()
    assert 'lang="de"' in (html_root / "de" / "chapters" / "de" / "index.html").read_text("utf-8")
    assert 'lang="zh-CN"' in (html_root / "zh" / "chapters" / "zh" / "index.html").read_text("utf-8")


@pytest.mark.parametrize("lang", LANGS)
def test_language_switcher_links_resolve_to_the_same_page(html_root, lang):
    checked = 0
    for path in sorted((html_root / lang / "chapters").rglob("*.html")):  # every content page
        page = Page(path.read_text("utf-8"))
        assert [code for code, _ in page.switcher] == [other for other in LANGS if other != lang], path
        for other, href in page.switcher:
            target = (path.parent / href).resolve()
            assert target.exists(), (path, href)
            assert target.name == path.name
            checked += 1
    assert checked >= 2 * 2  # index and chapter 1, two other languages each


@pytest.mark.parametrize("lang", LANGS)
def test_no_page_loads_a_script_or_stylesheet_from_the_internet(html_root, lang):
    for path in pages(html_root, lang):
        if "_static" in path.parts:
            continue  # theme templates, not pages
        page = Page(path.read_text("utf-8"))
        remote = [u for u in page.scripts + page.styles if re.match(r"^(https?:)?//", u)]
        assert remote == [], path
        for url in page.scripts + page.styles:
            local = (path.parent / url.split("?")[0]).resolve()
            assert local.exists(), (path, url)


@pytest.mark.parametrize("lang", LANGS)
def test_chapter_page_serves_mathjax_and_widget_manager_locally_with_widget_state(html_root, lang):
    text = (html_root / lang / "chapters" / lang / "01-causal-mask.html").read_text("utf-8")
    scripts = Page(text).scripts
    assert any(s.startswith("../../_static/assets/mathjax/tex-mml-chtml.js") for s in scripts)
    for name in ("require-config.js", "require.js", "embed-amd.js"):
        assert any(f"_static/assets/widgets/{name}" in s for s in scripts), name
    assert scripts.index(next(s for s in scripts if "require-config" in s)) < \
        scripts.index(next(s for s in scripts if s.split("?")[0].endswith("/require.js")))
    assert "application/vnd.jupyter.widget-state+json" in text
    assert text.count("THEBE_JS_URL =") <= 1
    assert (html_root / lang / "_static" / "assets" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


@pytest.mark.parametrize("lang", LANGS)
def test_launch_buttons_point_at_the_notebook_files(html_root, lang):
    text = (html_root / lang / "chapters" / lang / "01-causal-mask.html").read_text("utf-8")
    nb = f"chapters/{lang}/01-causal-mask.ipynb"
    assert f"https://mybinder.org/v2/gh/{REPO}/main?urlpath=lab/tree/{nb}" in text
    assert f"https://colab.research.google.com/github/{REPO}/blob/main/{nb}" in text


def search_terms(html_root, lang):
    text = (html_root / lang / "searchindex.js").read_text("utf-8")
    return json.loads(text[text.index("(") + 1: text.rindex(")")])["terms"]


def test_german_search_index_is_stemmed(html_root):
    terms = search_terms(html_root, "de")
    assert "mask" in terms  # "Maske", "Masken", "maskierte" share the snowball stem
    assert "masken" not in terms


def test_chinese_search_index_holds_segmented_words(html_root):
    terms = search_terms(html_root, "zh")
    for word in ("掩码", "对角线", "注意力", "权重"):  # words inside sentences, cut by jieba
        assert word in terms, word
