"""The built site: three languages, switcher, local assets only, search, launch buttons.

Builds the site from scratch (tools/site.py, warnings as errors) once per run.
"""

import json
import os
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


def own_weight(page: pathlib.Path) -> int:
    """Bytes of a page's own HTML plus the images only it shows (not the shared theme files)."""
    images = set(re.findall(r'src="([^"]*_images/[^"]+)"', page.read_text("utf-8")))
    return page.stat().st_size + sum((page.parent / src).resolve().stat().st_size for src in images)


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_weighs_less_than_one_megabyte_of_its_own(html_root, lang):
    weights = {path.name: own_weight(path) for path in (html_root / lang / "chapters").rglob("*.html")}
    assert len(weights) >= 2
    heavy = {name: size for name, size in weights.items() if size >= 1_000_000}
    assert heavy == {}, heavy


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


# --------------------------------------------------------------------------
# In a real browser: Debian's chromium driven by Playwright (make test installs it),
# or the browser that ATTNLAB_CHROMIUM names (GitHub's runners: their Chrome).

CHROMIUM = pathlib.Path(os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = site.BUILD / "screenshots"


@pytest.fixture(scope="module")
def server(html_root):
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(html_root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"no browser at {CHROMIUM}: make test installs Debian's chromium, or set ATTNLAB_CHROMIUM"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"])
        yield browser
        browser.close()


class Visit:
    """One page in a fresh context, recording console errors and every request."""

    def __init__(self, browser, url, lang="en-US"):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, locale=lang)
        self.page = self.context.new_page()
        self.errors, self.requests = [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/]).*"), lambda route: route.abort())
        self.page.goto(url)
        self.page.wait_for_load_state("networkidle")

    def remote_requests(self):
        return [u for u in self.requests if not re.match(r"^(http://127\.0\.0\.1[:/]|data:|blob:|file:)", u)]

    def screenshot(self, name):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)

    def close(self):
        self.context.close()


def all_pages(html_root):
    for lang in LANGS:
        for path in pages(html_root, lang):
            if "_static" not in path.parts and "_sources" not in path.parts:
                yield path.relative_to(html_root).as_posix()


def test_every_page_loads_without_console_errors_or_remote_requests(html_root, server, browser):
    checked = []
    for rel in all_pages(html_root):
        visit = Visit(browser, f"{server}/{rel}")
        assert visit.errors == [], (rel, visit.errors)
        assert visit.remote_requests() == [], (rel, visit.remote_requests())
        visit.close()
        checked.append(rel)
    assert len(checked) >= 3 * 4


@pytest.mark.parametrize("lang", LANGS)
def test_math_is_typeset_by_the_local_mathjax(server, browser, lang):
    visit = Visit(browser, f"{server}/{lang}/chapters/{lang}/01-causal-mask.html")
    visit.page.wait_for_selector("mjx-container", state="attached", timeout=15000)
    assert visit.page.locator("mjx-container").count() > 20
    assert any("/_static/assets/mathjax/tex-mml-chtml.js" in u for u in visit.requests)
    assert visit.page.evaluate("window.MathJax.version").startswith("3.")
    visit.close()


def visible_frames(page):
    return page.eval_on_selector_all(
        ".jupyter-widgets img", "els => els.filter(e => e.offsetParent !== null).map(e => e.src)")


def frames_after_change(page, before, timeout=5.0):
    """The visible frames once they differ from ``before`` (or after ``timeout`` seconds)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        now = visible_frames(page)
        if now != before or time.monotonic() > deadline:
            return now
        page.wait_for_timeout(50)


def widget_pages(html_root):
    return [rel for rel in all_pages(html_root)
            if "application/vnd.jupyter.widget-state+json" in (html_root / rel).read_text("utf-8")]


def test_every_widget_control_changes_the_picture(html_root, server, browser):
    rels = widget_pages(html_root)
    assert len(rels) >= 3
    for rel in rels:
        visit = Visit(browser, f"{server}/{rel}")
        page = visit.page
        page.wait_for_selector(".jupyter-widgets img", state="attached", timeout=15000)
        groups = page.locator(".widget-toggle-buttons")
        assert groups.count() >= 1, rel
        for g in range(groups.count()):
            buttons = groups.nth(g).locator("button")
            before = visible_frames(page)
            assert len(before) >= 1, rel
            buttons.nth(buttons.count() - 1).click()
            after = frames_after_change(page, before)
            assert after and after != before, (rel, g)
        groups.first.scroll_into_view_if_needed()
        visit.screenshot(rel.replace("/", "_").removesuffix(".html") + "_widget")
        assert visit.errors == [], (rel, visit.errors)
        visit.close()


def test_widgets_respond_when_the_page_is_opened_from_disk(html_root, browser):
    visit = Visit(browser, (html_root / "zh" / "chapters" / "zh" / "01-causal-mask.html").as_uri())
    page = visit.page
    page.wait_for_selector(".jupyter-widgets img", state="attached", timeout=15000)
    before = visible_frames(page)
    page.get_by_role("button", name="关", exact=True).click()
    page.get_by_role("button", name="3 · softmax → 权重").click()
    assert frames_after_change(page, before) != before
    assert visit.remote_requests() == []
    visit.close()


def test_language_switcher_leads_to_the_same_chapter(server, browser):
    visit = Visit(browser, f"{server}/en/chapters/en/01-causal-mask.html")
    visit.page.click("nav.attnlab-lang a[hreflang=de]")
    visit.page.wait_for_load_state()
    assert visit.page.url.endswith("/de/chapters/de/01-causal-mask.html")
    assert visit.page.locator("html").get_attribute("lang") == "de"
    visit.page.click("nav.attnlab-lang a[hreflang=zh]")
    visit.page.wait_for_load_state()
    assert visit.page.url.endswith("/zh/chapters/zh/01-causal-mask.html")
    assert "因果掩码" in visit.page.locator("h1").first.inner_text()
    visit.close()


@pytest.mark.parametrize("lang, preferred", [("de", "de-DE"), ("zh", "zh-CN"), ("en", "fr-FR")])
def test_root_page_sends_the_reader_to_their_language(server, browser, lang, preferred):
    visit = Visit(browser, f"{server}/", lang=preferred)
    visit.page.wait_for_url(f"**/{lang}/chapters/{lang}/index.html")
    visit.close()


@pytest.mark.parametrize("lang, query", [("de", "Masken"), ("zh", "对角线")])
def test_search_finds_german_stems_and_chinese_words_inside_sentences(server, browser, lang, query):
    # "Masken" is found through its stem (the chapter mostly says "Maske"); "对角线"
    # occurs only inside longer Chinese sentences, without spaces around it.
    visit = Visit(browser, f"{server}/{lang}/search.html?q={query}")
    visit.page.wait_for_selector("#search-results ul.search li", timeout=15000)
    hits = visit.page.locator("#search-results ul.search li a").evaluate_all("els => els.map(e => e.href)")
    assert any(h.split("?")[0].endswith(f"/chapters/{lang}/01-causal-mask.html") for h in hits), hits
    visit.screenshot(f"search_{lang}")
    visit.close()


@pytest.mark.parametrize("lang", LANGS)
def test_launch_buttons_open_the_notebook_on_binder_and_colab(server, browser, lang):
    visit = Visit(browser, f"{server}/{lang}/chapters/{lang}/01-causal-mask.html")
    links = visit.page.locator(".dropdown-launch-buttons a").evaluate_all("els => els.map(e => e.href)")
    nb = f"chapters/{lang}/01-causal-mask.ipynb"
    assert f"https://mybinder.org/v2/gh/{REPO}/main?urlpath=lab/tree/{nb}" in links
    assert f"https://colab.research.google.com/github/{REPO}/blob/main/{nb}" in links
    visit.screenshot(f"chapter1_top_{lang}")
    visit.close()
