"""The built site: three languages, switcher, local assets only, search, launch buttons, the PDF's
source; in a browser: MathJax, the widget manager's fonts, the switcher, search, launch buttons and
an explorer by keyboard. Every page in a browser: test_site_pages.py; the Chinese web font:
test_site_fonts.py; what they share: site_support.py and conftest.py.
"""

import base64
import functools
import gzip
import json
import pathlib
import re
from html.parser import HTMLParser

import pytest

from site_support import LANGS, REPO, WAIT_MS, Page, Visit, all_pages, frames_after_change, pages, visible_frames
from tools import site
from tools.site import pdf_download
from tools.site.footer import footer_html
from tools.site.languages import SEARCH_FIELD
from tools.site.published import pages_url


def test_three_languages_and_a_root_page_that_offers_all(html_root):
    root_page = (html_root / "index.html").read_text("utf-8")
    for lang in LANGS:
        target = html_root / lang / "chapters" / lang / "index.html"
        assert target.exists()
        assert f'"{lang}/chapters/{lang}/index.html"' in root_page
        assert (html_root / lang / "chapters" / lang / "01-causal-mask.html").exists()
    assert 'lang="de"' in (html_root / "de" / "chapters" / "de" / "index.html").read_text("utf-8")
    assert 'lang="zh-CN"' in (html_root / "zh" / "chapters" / "zh" / "index.html").read_text("utf-8")


def test_every_page_names_its_icon_so_no_browser_asks_for_favicon_ico(html_root):
    # Jupyter Book's LANG/index.html was a bare <meta> refresh: Chromium asked the server for
    # /favicon.ico (404) and once logged that as a console error of the next page in the same tab
    rels = ["index.html", *all_pages(html_root)]
    assert {f"{lang}/index.html" for lang in LANGS} <= set(rels)
    assert [rel for rel in rels if 'rel="icon"' not in (html_root / rel).read_text("utf-8")] == []
    for lang in LANGS:
        front = (html_root / lang / "index.html").read_text("utf-8")
        assert f'url=chapters/{lang}/index.html"' in front and front.startswith("<!DOCTYPE html>")


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
    scripts = [s.split("?")[0] for s in Page(text).scripts]
    assert "../../_static/assets/mathjax/startup.js" in scripts  # MathJax's loader, which loads the rest
    assert "../../_static/assets/widgets/embed.js" in scripts  # the standalone widget manager
    # no RequireJS, no AMD build of the manager, no combined MathJax with its menu and MathML input
    assert not [s for s in scripts if re.search(r"require|embed-amd|tex-mml-chtml", s)], scripts
    assert "application/vnd.jupyter.widget-state+json" in text
    assert text.count("THEBE_JS_URL =") <= 1
    assets = html_root / lang / "_static" / "assets"
    assert all((assets / "mathjax" / name).is_file() for name in site.MATHJAX_FILES)
    assert not (assets / "mathjax" / "tex-mml-chtml.js").exists() and not (assets / "widgets" / "require.js").exists()
    assert (assets / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


HEAVIEST_RAW, HEAVIEST_GZIP = 3_800_000, 1_150_000  # bytes as first_visit counts them (no fonts): 3.68, 1.11 MB
WIDGETLESS_RAW = 1_600_000  # 1.55 MB


def own_weight(page: pathlib.Path) -> int:
    """Bytes of a page's own HTML plus the images only it shows (not the shared theme files)."""
    images = set(re.findall(r'src="([^"]*_images/[^"]+)"', page.read_text("utf-8")))
    return page.stat().st_size + sum((page.parent / src).resolve().stat().st_size for src in images)


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_weighs_less_than_one_megabyte_of_its_own(html_root, lang):
    weights = {path.name: own_weight(path) for path in (html_root / lang / "chapters").rglob("*.html")}
    assert len(weights) >= 2
    heavy = {name: size for name, size in weights.items() if size >= 1_100_000}
    assert heavy == {}, heavy


@functools.lru_cache(maxsize=None)
def gzip_size(path: pathlib.Path) -> int:
    return len(gzip.compress(path.read_bytes(), 6))


def first_visit(page: pathlib.Path) -> tuple[int, int]:
    """(bytes, gzip bytes) of a first visit to ``page`` as its HTML names it: the page, its scripts,
    stylesheets and images, and the MathJax components that its loader (startup.js) fetches.
    Fonts the stylesheets load come on top (measured in a browser: about 0.08 MB on the heaviest
    page; README, "Page weight")."""
    parsed = Page(page.read_text("utf-8"))
    images = set(re.findall(r'src="([^"]*_images/[^"]+)"', page.read_text("utf-8")))
    files = {(page.parent / url.split("?")[0]).resolve() for url in parsed.scripts + parsed.styles} | \
        {(page.parent / src).resolve() for src in images} | {page}
    loader = next((f for f in files if f.name == "startup.js" and f.parent.name == "mathjax"), None)
    if loader:
        files |= {loader.parent / name for name in site.MATHJAX_FILES}
    files = {f for f in files if f.is_file()}
    return sum(f.stat().st_size for f in files), sum(gzip_size(f) for f in files)


@pytest.mark.parametrize("lang", LANGS)
def test_a_first_visit_stays_light_and_loads_no_font_awesome_script(html_root, lang):
    # Measured in Chromium with an empty cache (README, "Page weight"), the heaviest first visit, a
    # Chinese chapter with widgets, was 8.6 MB, then 7.1 MB without the theme's fontawesome.js
    # (1.5 MB), then 4.2 MB (1.3 MB gzip-compressed, as web servers send it): the widget
    # manager's standalone embed.js (1.9 MB) without RequireJS instead of embed-amd.js (3.6 MB),
    # MathJax without its menu and MathML input, Font Awesome cut to the icons the pages show, the
    # widget frames at zlib's level 9; and is now 3.8 MB (1.2 MB gzip): embed.js without its
    # stylesheets' source maps (1.57 MB), the frames as lossless WebP. A page without widgets:
    # 2.3 MB, now 1.5 MB.
    weights = {}
    for path in pages(html_root, lang):
        if "_static" in path.parts or "_sources" in path.parts:
            continue
        assert "fontawesome.js" not in path.read_text("utf-8"), path
        weights[path.relative_to(html_root).as_posix()] = first_visit(path)
    assert not (html_root / lang / "_static" / "scripts" / "fontawesome.js").exists()
    heavy = {rel: w for rel, w in weights.items() if w[0] >= HEAVIEST_RAW or w[1] >= HEAVIEST_GZIP}
    assert heavy == {}, heavy
    widgetless = {rel: w for rel, w in weights.items() if "widget-state" not in (html_root / rel).read_text("utf-8")}
    assert widgetless and max(w[0] for w in widgetless.values()) < WIDGETLESS_RAW, max(widgetless.values())


def test_stylesheet_source_maps_are_cut_from_a_bundle_and_nothing_else():
    sheet = '[e.id,".a{b:c}","",{version:3,sources:["x.css"],names:[],mappings:"AAAA",sourcesContent:[\'.a{\\n b:"]"}\'],sourceRoot:""}]'
    bundle = f"var s=[];s.push({sheet});s.push([e.id,`.d{{u:url(${{E}})}}`,\"\"]);"
    out, dropped = site.strip_css_source_maps(bundle)
    assert dropped == 1
    assert out == 'var s=[];s.push([e.id,".a{b:c}",""]);s.push([e.id,`.d{u:url(${E})}`,""]);'
    with pytest.raises(ValueError):
        site.strip_css_source_maps("var nothing=1;")


@pytest.mark.parametrize("lang", LANGS)
def test_the_widget_manager_ships_its_stylesheets_without_their_source_maps(html_root, lang):
    bundle = (html_root / lang / "_static" / "assets" / "widgets" / "embed.js").read_text("utf-8")
    assert "{version:3,sources:[" not in bundle
    assert ".widget-toggle-buttons" in bundle and "Font Awesome 5 Free" in bundle  # the CSS itself stays
    assert len(bundle.encode()) < 1_600_000  # 1.57 MB; 1.88 MB with the maps


def test_a_frame_becomes_a_lossless_webp_with_the_same_pixels():
    import io

    from PIL import Image

    from attnlab.figures.frames import HeatmapFrames

    frames = HeatmapFrames({"scores": {"matrix": [[0.5, -1.0], [2.0, 0.25]], "kind": "scores", "value_fontsize": 9}},
                           ["a", "b"], ["caption"], width=2.5, height=2.5)
    png = site.smaller_png(frames.png("scores", 1, "caption"))
    webp = site.webp_frame(png)
    assert webp is not None and webp[:4] == b"RIFF" and webp[8:12] == b"WEBP" and len(webp) < len(png)
    decoded = [Image.open(io.BytesIO(data)).convert("RGBA") for data in (png, webp)]
    assert decoded[0].size == decoded[1].size and decoded[0].tobytes() == decoded[1].tobytes()


@pytest.mark.parametrize("lang", LANGS)
def test_the_pages_widget_frames_are_lossless_webp(html_root, lang):
    text = (html_root / lang / "chapters" / lang / "01-causal-mask.html").read_text("utf-8")
    state = json.loads(site.WIDGET_STATE.search(text).group(1))["state"]
    images = [model for model in state.values() if model["model_name"] == "ImageModel"]
    assert len(images) >= 40  # the mask explorer's 2 x 3 x 7 frames
    for model in images:
        data = base64.b64decode(model["buffers"][0]["data"])
        assert (model["state"]["format"], data[:4], data[8:12]) == ("webp", b"RIFF", b"WEBP")


@pytest.mark.parametrize("lang", LANGS)
def test_launch_buttons_point_at_the_notebook_files(html_root, lang):
    text = (html_root / lang / "chapters" / lang / "01-causal-mask.html").read_text("utf-8")
    nb = f"chapters/{lang}/01-causal-mask.ipynb"
    assert f"https://mybinder.org/v2/gh/{REPO}/main?urlpath=lab/tree/{nb}" in text
    assert f"https://colab.research.google.com/github/{REPO}/blob/main/{nb}" in text


@pytest.mark.parametrize("lang", LANGS)
def test_exercise_and_solution_pages_have_switcher_launch_buttons_and_light_weight(html_root, lang):
    for section in ("exercises", "solutions"):
        paths = sorted((html_root / lang / section / lang).glob("*.html"))
        assert len(paths) >= 3, section
        for path in paths:
            text = path.read_text("utf-8")
            switcher = Page(text).switcher
            assert [code for code, _ in switcher] == [other for other in LANGS if other != lang], path
            assert all((path.parent / href).resolve().exists() for _, href in switcher), path
            nb = f"{section}/{lang}/{path.stem}.ipynb"
            assert f"https://colab.research.google.com/github/{REPO}/blob/main/{nb}" in text
            assert f"https://mybinder.org/v2/gh/{REPO}/main?urlpath=lab/tree/{nb}" in text
            assert own_weight(path) < 1_100_000


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


class ContentImages(HTMLParser):
    """(alt, src) of every <img> inside the page's <article>: the figures, not the theme's icons."""

    def __init__(self, text):
        super().__init__()
        self.images, self._article = [], 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "article":
            self._article += 1
        if tag == "img" and self._article:
            a = dict(attrs)
            self.images.append((a.get("alt"), a.get("src")))

    def handle_endtag(self, tag):
        if tag == "article":
            self._article -= 1


def looks_like_a_path(text, src):
    text = text.strip()
    return text == src or bool(re.fullmatch(r"\S*\.(png|jpe?g|gif|svg|webp)", text, re.I)) or "_images/" in text


def figure_alts(html_root, lang):
    """{(page, n): alt} of every content image of one language's chapters."""
    alts = {}
    for path in sorted((html_root / lang / "chapters").rglob("*.html")):
        for n, (alt, src) in enumerate(ContentImages(path.read_text("utf-8")).images):
            assert alt and alt.strip() and not looks_like_a_path(alt, src), (lang, path.name, src, alt)
            alts[(path.name, n)] = alt
    return alts


def test_every_figure_has_an_alt_text_in_the_readers_language_never_a_path(html_root):
    # Widget frames are not in the page's HTML: the widget manager draws them from the widget
    # state, and ipywidgets' Image has no alt text; their cell's caption and the prose describe them.
    alts = {lang: figure_alts(html_root, lang) for lang in LANGS}
    assert len(alts["en"]) >= 5  # chapter 1's figures and chapter 3's memory plot at least
    assert alts["en"].keys() == alts["de"].keys() == alts["zh"].keys()
    for key, english in alts["en"].items():
        assert alts["de"][key] != english, key
        assert re.search(r"[\u4e00-\u9fff]", alts["zh"][key]), key


FONT_FACES = """() => {
  const out = [];
  for (const sheet of document.styleSheets) {
    let rules;
    try { rules = sheet.cssRules; } catch (e) { continue; }
    for (const rule of rules) {
      if (rule.type === CSSRule.FONT_FACE_RULE) out.push(rule.style.getPropertyValue("src"));
    }
  }
  return out;
}"""


def test_the_widget_managers_fonts_all_come_from_its_own_folder(server, browser):
    visit = Visit(browser, f"{server}/de/chapters/de/01-causal-mask.html")
    visit.page.wait_for_selector(".jupyter-widgets img", state="attached", timeout=WAIT_MS)
    urls = [url for src in visit.page.evaluate(FONT_FACES) for url in re.findall(r'url\("?([^")]+)"?\)', src)]
    widget_fonts = [u for u in urls if re.search(r"/[0-9a-f]{20}\.(woff2?|ttf|eot|svg)", u)]
    assert len(widget_fonts) >= 6  # Font Awesome's faces, from more than one of the manager's modules
    assert [u for u in widget_fonts if "/_static/assets/widgets/" not in u] == []
    visit.close()


@pytest.mark.parametrize("lang", LANGS)
def test_math_is_typeset_by_the_local_mathjax(server, browser, lang):
    visit = Visit(browser, f"{server}/{lang}/chapters/{lang}/01-causal-mask.html")
    visit.page.wait_for_selector("mjx-container", state="attached", timeout=WAIT_MS)
    assert visit.page.locator("mjx-container").count() > 20
    # every formula keeps its hidden MathML, what a screen reader reads (a11y/assistive-mml)
    visit.page.wait_for_function("document.querySelectorAll('mjx-container').length === "
                                 "document.querySelectorAll('mjx-container mjx-assistive-mml').length")
    loaded = [u.split("?")[0].split("/_static/assets/mathjax/")[1] for u in visit.requests if "/_static/assets/mathjax/" in u]
    assert set(site.MATHJAX_FILES) <= set(loaded), loaded  # MathJax's components, all from the site
    assert not [u for u in loaded if u.startswith(("ui/", "input/mml"))], loaded  # no menu, no MathML input
    assert visit.page.evaluate("window.MathJax.version").startswith("3.")
    assert visit.errors == []
    visit.close()


def test_widgets_respond_when_the_page_is_opened_from_disk(html_root, browser):
    visit = Visit(browser, (html_root / "zh" / "chapters" / "zh" / "01-causal-mask.html").as_uri())
    page = visit.page
    page.wait_for_selector(".jupyter-widgets img", state="attached", timeout=WAIT_MS)
    before = visible_frames(page)
    page.get_by_role("button", name="关", exact=True).click()
    page.get_by_role("button", name="3 · softmax → 权重").click()
    assert frames_after_change(page, before) != before
    assert visit.remote_requests() == []
    visit.close()


def test_the_test_browser_reaches_no_other_host_and_records_the_attempt(server, browser):
    # The page tests' "no remote request" rests on this: a request to another host, by name or by
    # address, fails in the browser (a console error) and is recorded (site_support.OFFLINE).
    visit = Visit(browser, f"{server}/en/index.html")
    targets = ["https://example.com/x.js", "http://93.184.215.14/x.js"]
    failed = visit.page.evaluate("""async urls => Promise.all(urls.map(url =>
        fetch(url).then(() => "loaded", error => "failed: " + error.message)))""", targets)
    assert [result.startswith("failed") for result in failed] == [True, True], failed
    assert set(targets) <= set(visit.remote_requests()), visit.requests
    # failed at the browser's dead proxy, not by chance of this machine's network
    assert sum("ERR_PROXY_CONNECTION_FAILED" in error for error in visit.errors) == 2, visit.errors
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
    visit.page.wait_for_selector("#search-results ul.search li", timeout=WAIT_MS)
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


def test_the_pdf_source_holds_every_page_in_order_with_its_widgets(html_root):
    # What `make pdf` prints (tools/pdf.py; the printing itself and its pdffonts/pdftotext check
    # run in `make pdf`, about a minute per language): chapters, cheat sheet and exercises in the
    # table of contents' order, each widget page's state, no Font Awesome script.
    from tools import pdf

    for lang in LANGS:
        source, titles = pdf.assemble(lang)
        try:
            text = source.read_text("utf-8")
        finally:
            source.unlink()
        files = [file for _, part in pdf.book_pages(lang) for file in part]
        assert len(titles) == len(files) >= 2 * 11 and all(titles), lang
        assert [text.index(f'id="{pdf.slug(file)}"') for file in files] == sorted(
            text.index(f'id="{pdf.slug(file)}"') for file in files)
        assert all(f'href="#{pdf.slug(file)}"' in text for file in files)  # the contents link to the pages
        states = sum("widget-state+json" in (html_root / lang / f"{file}.html").read_text("utf-8") for file in files)
        assert text.count("application/vnd.jupyter.widget-state+json") == states >= 1, lang
        assert "fontawesome.js" not in text and "solutions/" not in "".join(files)
        # every folded answer printed open; every link leads into the PDF or to the published site
        body = text.split("<body", 1)[1]
        assert body.count("<details open") >= 11 and "<details " not in body.replace("<details open", ""), lang
        assert not re.search(r'href="(?!#|https?:|mailto:)', body), lang
        solutions = re.findall(r'href="(https://[^"]*/solutions/%s/[^"]+)"' % lang, body)
        assert len(solutions) >= 11 and all(u.startswith(pages_url() + f"{lang}/solutions/{lang}/") for u in solutions)
        # the contents give each page's number (a first print holds "000" in the same room)
        assert len(re.findall(r'<span class="page">000</span>', text)) == len(files), lang
    numbered, _ = pdf.assemble("en", list(range(3, 3 + len(files))))
    try:
        assert re.findall(r'<span class="page">(\d+)</span>', numbered.read_text("utf-8")) == [
            str(n) for n in range(3, 3 + len(files))]
    finally:
        numbered.unlink()


def test_the_pdf_finds_the_page_each_title_starts_on():
    from tools import pdf

    sheets = ["Title", "Contents 1 · The causal mask 3", "1 · The causal mask\ntext", "more text",
              "3 · scaled_dot_product_attention与 flash\nattention", "Exercise 1 · The causal mask"]
    titles = ["1 · The causal mask", "3 · scaled_dot_product_attention 与 flash attention", "Exercise 1 · The causal mask"]
    assert pdf.title_pages("\f".join(sheets), titles) == [3, 5, 6]
    with pytest.raises(AssertionError):
        pdf.title_pages("\f".join(sheets[:4]), titles)


def test_an_explorers_alt_text_follows_its_controls_and_they_work_by_keyboard(server, browser):
    visit = Visit(browser, f"{server}/de/chapters/de/01-causal-mask.html")
    page = visit.page
    page.wait_for_selector(".jupyter-widgets img", state="attached", timeout=WAIT_MS)
    alt = lambda: page.eval_on_selector_all("img.widget-image", "els => els.filter(e => e.offsetParent).map(e => e.alt)")
    before, frames = alt(), visible_frames(page)
    assert before and "Maske an" in before[0], before
    button = page.get_by_role("button", name="aus", exact=True)
    button.focus()
    page.keyboard.press("Enter")  # a toggle button is a <button>: Tab reaches it, Enter or Space presses it
    assert frames_after_change(page, frames) != frames
    page.wait_for_function("() => [...document.querySelectorAll('img.widget-image')].some(e => / aus$/.test(e.alt))")
    assert visit.errors == []
    visit.close()


def test_the_pdf_link_is_made_only_when_make_pdf_made_the_pdf(tmp_path, monkeypatch):
    # Without _build/pdf/<lang>.pdf (make book without make pdf): no link, nothing copied.
    monkeypatch.setattr(pdf_download, "PDF_DIR", tmp_path / "pdf")
    monkeypatch.setattr(pdf_download, "HTML", tmp_path / "html")
    for lang in LANGS:
        assert site.pdf_link(lang) == {} and site.copy_pdf(lang) is None
    assert not (tmp_path / "html").exists()
    # With them: a link in each language's words to _static/downloads/<lang>.pdf, and the file there.
    (tmp_path / "pdf").mkdir()
    words = {"en": "Course (PDF)", "de": "Kurs (PDF)", "zh": "课程 PDF"}
    for lang in LANGS:
        (tmp_path / "pdf" / f"{lang}.pdf").write_bytes(b"%PDF-1.7 " + lang.encode())
        link = site.pdf_link(lang)
        assert link["file"] == f"_static/downloads/{lang}.pdf" and link["text"] == words[lang]
        copied = site.copy_pdf(lang)
        assert copied == tmp_path / "html" / lang / "_static" / "downloads" / f"{lang}.pdf"
        assert copied.read_bytes() == b"%PDF-1.7 " + lang.encode()
    assert len({site.pdf_link(lang)["tooltip"] for lang in LANGS}) == 3  # each in its language


def test_the_pdf_link_goes_into_the_themes_download_menu():
    from tools.sphinx_ext import attnlab_site

    def context():
        return {"pathto": lambda name, resource: f"../../{name}",
                "header_buttons": [{"type": "link", "label": "repository-button"},
                                   {"type": "group", "label": "download-buttons", "buttons": [{"type": "link"}]}]}

    without = context()
    assert not attnlab_site.add_pdf_link(without, {}) and without["header_buttons"] == context()["header_buttons"]
    assert not attnlab_site.add_pdf_link({"header_buttons": []}, {"file": "x.pdf", "text": "t", "tooltip": "t"})
    page = context()
    assert attnlab_site.add_pdf_link(page, {"file": "_static/downloads/de.pdf", "text": "Kurs (PDF)", "tooltip": "…"})
    added = page["header_buttons"][1]["buttons"][-1]
    assert added["url"] == "../../_static/downloads/de.pdf" and added["text"] == "Kurs (PDF)"
    assert added["icon"] == "fas fa-file-pdf" and added["type"] == "link"


@pytest.mark.parametrize("lang", LANGS)
def test_the_built_sites_pdf_link_is_there_exactly_when_its_pdf_is(html_root, lang):
    # The suite's build has a PDF only where `make pdf` ran before it; either way no link leads nowhere.
    pdf = html_root / lang / "_static" / "downloads" / f"{lang}.pdf"
    menus = 0
    for path in pages(html_root, lang):
        text = path.read_text("utf-8")
        if "_static" in path.parts or "dropdown-download-buttons" not in text:
            continue
        menus += 1
        links = re.findall(r'<a href="([^"]+)"[^>]*\n?\s*class="btn btn-sm btn-download-course-pdf-button', text)
        assert len(links) == (1 if pdf.exists() else 0), path
        assert all((path.parent / href).resolve() == pdf.resolve() for href in links), (path, links)
    assert menus >= 20


def test_what_the_pages_job_uploads_is_the_built_site_with_its_root_page(html_root):
    # .github/workflows/ci.yml uploads make site's output folder (test_launch.py checks the job): here
    # that folder holds the root page that sends a browser to its language, and the three sites
    import yaml

    workflow = yaml.safe_load((site.ROOT / ".github" / "workflows" / "ci.yml").read_text("utf-8"))
    upload = next(step for step in workflow["jobs"]["site"]["steps"] if "upload-pages-artifact" in step.get("uses", ""))
    assert (site.ROOT / upload["with"]["path"]).resolve() == html_root.resolve()
    root_page = (html_root / "index.html").read_text("utf-8")
    assert "location.replace" in root_page and all(f'"{lang}/chapters/{lang}/index.html"' in root_page for lang in LANGS)
    assert all((html_root / lang / "index.html").is_file() for lang in LANGS)
    # nothing in it points at the machine that built it (a published page would link nowhere)
    assert [rel for rel in ["index.html", *all_pages(html_root)] if "file://" in (html_root / rel).read_text("utf-8")] == []


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_names_the_licences_and_the_citation_in_its_language(html_root, lang):
    # the footer comes from the theme's template, the same on every page: a page of each kind
    # (reading all of them cost 1.5 s a language)
    kinds = [f"chapters/{lang}/index.html", f"chapters/{lang}/01-causal-mask.html", f"chapters/{lang}/cheatsheet.html",
             f"exercises/{lang}/01-causal-mask.html", f"solutions/{lang}/11-backward-pass.html"]
    footer = footer_html(lang)
    assert [kind for kind in kinds if footer not in (html_root / lang / kind).read_text("utf-8")] == []


@pytest.mark.parametrize("lang", LANGS)
def test_the_search_field_speaks_the_sites_language(html_root, lang):
    text = (html_root / lang / "chapters" / lang / "01-causal-mask.html").read_text("utf-8")
    assert f'placeholder="{SEARCH_FIELD[lang]}"' in text and "Search this book" not in text
