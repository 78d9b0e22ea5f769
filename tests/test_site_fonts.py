"""Chinese text on a machine without any CJK font: the site's own web font (a subset of Noto Sans
SC with exactly the characters each site shows), and a browser with a CJK font never downloads it.
That the web font holds every CJK character a page shows is read in test_site_pages.py's one pass
over every page."""

import os
import re

import pytest

from site_support import LANGS, WAIT_MS, Visit, font_families
from tools import site

WEB_FONT_PATH = "/_static/assets/fonts/attnlab-cjk.woff2"
WEB_FONT_FAMILY = "attnlab Noto Sans SC"



# Draws two different CJK characters of an element in the element's own font (canvas, 32 px).
# Real glyphs give two different pictures; without a font both are the same empty box (tofu).
DRAW_CJK = """async (el) => {
  const style = getComputedStyle(el);
  const chars = [...new Set([...el.textContent].filter(c => /[\\u3400-\\u9fff]/.test(c)))].slice(0, 2);
  const font = `${style.fontWeight} 32px ${style.fontFamily}`;
  await document.fonts.load(font, chars.join("")).catch(() => null);  // rejects when the font is blocked
  const draw = (c) => {
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 48;
    const ctx = canvas.getContext("2d");
    ctx.font = font;
    ctx.textBaseline = "top";
    ctx.fillText(c, 8, 8);
    return canvas.toDataURL();
  };
  return {chars: chars.join(""), pictures: chars.map(draw), family: style.fontFamily};
}"""

# Every element whose own text holds a CJK character, with its computed font stack.
CJK_TEXT_FONTS = """() => {
  const seen = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, el = node.parentElement;
    if (!/[\\u3400-\\u9fff]/.test(node.textContent) || !el || el.closest("script, style, noscript")) continue;
    seen.push({tag: el.tagName, text: node.textContent.trim().slice(0, 20), family: getComputedStyle(el).fontFamily});
  }
  return seen;
}"""

ZH_ELEMENTS = {  # what a Chinese reader must be able to read, by kind: (page, selector)
    "heading": ("01-causal-mask", "article h1"),
    "prose": ("01-causal-mask", "article p"),
    "widget label": ("01-causal-mask", ".jupyter-widgets button"),
    "sidebar": ("01-causal-mask", ".bd-sidebar-primary a"),
    "code comment": ("cheatsheet", "article .highlight .c1"),
    "table": ("cheatsheet", "article td"),
}


@pytest.fixture(scope="module")
def chinese_chapter_without_cjk_fonts(server, browser_without_cjk_fonts):
    """Chinese chapter 1 in the browser that sees no CJK font, loaded once for this file's tests."""
    visit = Visit(browser_without_cjk_fonts, f"{server}/zh/chapters/zh/01-causal-mask.html", lang="zh-CN")
    visit.page.wait_for_selector(".jupyter-widgets button", state="attached", timeout=WAIT_MS)
    yield visit
    visit.close()


def glyphs_of(visit, selector):
    element = visit.page.locator(selector).filter(has_text=re.compile(r"[\u3400-\u9fff]{2}")).first
    element.wait_for(state="attached", timeout=WAIT_MS)
    return element.evaluate(DRAW_CJK)


@pytest.mark.parametrize("slug", ["01-causal-mask", "cheatsheet"])
def test_chinese_text_is_drawn_on_a_machine_without_cjk_fonts(server, browser_without_cjk_fonts, slug, request):
    if slug == "01-causal-mask":
        visit = request.getfixturevalue("chinese_chapter_without_cjk_fonts")
    else:
        visit = Visit(browser_without_cjk_fonts, f"{server}/zh/chapters/zh/{slug}.html", lang="zh-CN")
    assert any(u.endswith("/zh" + WEB_FONT_PATH) for u in visit.requests)
    for kind, (page, selector) in ZH_ELEMENTS.items():
        if page != slug:
            continue
        drawn = glyphs_of(visit, selector)
        assert drawn["family"].rstrip().endswith(f'"{WEB_FONT_FAMILY}"'), (kind, drawn["family"])
        assert len(drawn["chars"]) == 2 and drawn["pictures"][0] != drawn["pictures"][1], (kind, drawn["chars"])
    fonts = visit.page.evaluate(CJK_TEXT_FONTS)
    assert len(fonts) > 20
    assert [f for f in fonts if WEB_FONT_FAMILY not in f["family"]] == []  # every Chinese text falls back to it
    visit.screenshot(f"zh_{slug}_without_cjk_fonts")
    assert visit.errors == [] and visit.remote_requests() == []
    if slug != "01-causal-mask":
        visit.close()
        return

    # The same page with the web font blocked: the same characters are identical boxes (tofu),
    # so the check above tells glyphs from boxes, and this browser really has no CJK font.
    blocked = Visit(browser_without_cjk_fonts, "about:blank", lang="zh-CN")
    blocked.page.route("**/attnlab-cjk.woff2", lambda route: route.abort())
    blocked.page.goto(f"{server}/zh/chapters/zh/01-causal-mask.html")
    blocked.page.wait_for_load_state("networkidle")
    tofu = glyphs_of(blocked, ZH_ELEMENTS["prose"][1])
    assert tofu["pictures"][0] == tofu["pictures"][1], tofu["chars"]
    blocked.screenshot("zh_without_cjk_fonts_web_font_blocked")
    blocked.close()


@pytest.mark.parametrize("lang", ["en", "de"])
def test_the_chinese_language_link_is_drawn_without_cjk_fonts(server, browser_without_cjk_fonts, lang):
    visit = Visit(browser_without_cjk_fonts, f"{server}/{lang}/chapters/{lang}/01-causal-mask.html")
    drawn = glyphs_of(visit, "nav.attnlab-lang a[hreflang=zh]")
    assert drawn["chars"] == "中文" and drawn["pictures"][0] != drawn["pictures"][1]
    assert any(u.endswith(f"/{lang}" + WEB_FONT_PATH) for u in visit.requests)
    visit.close()
    root = Visit(browser_without_cjk_fonts, f"{server}/index.html?stay")
    drawn = glyphs_of(root, "a[hreflang=zh]")
    assert drawn["pictures"][0] != drawn["pictures"][1], drawn["chars"]
    root.close()


def test_a_browser_with_a_cjk_font_never_downloads_the_web_font(server, browser):
    if not font_families(dict(os.environ), ":lang=zh"):
        pytest.skip("no system CJK font here (make test installs fonts-noto-cjk)")
    for rel in ("zh/chapters/zh/01-causal-mask.html", "zh/chapters/zh/index.html", "en/chapters/en/index.html",
                "index.html?stay"):
        visit = Visit(browser, f"{server}/{rel}", lang="zh-CN" if rel.startswith("zh") else "en-US")
        visit.page.evaluate("document.fonts.ready")
        assert not any(u.endswith("attnlab-cjk.woff2") for u in visit.requests), rel
        visit.close()


@pytest.mark.parametrize("lang", LANGS)
def test_each_site_has_a_small_web_font_with_exactly_its_cjk_characters(html_root, lang):
    from fontTools.ttLib import TTFont

    path = html_root / lang / site.WEB_FONT
    font = TTFont(path)
    assert font.flavor == "woff2"
    chars = {chr(c) for c in font["cmap"].getBestCmap()}
    assert chars == set(site.site_cjk_characters(lang))
    assert "中" in chars and "文" in chars  # the language switcher
    assert path.stat().st_size < (400_000 if lang == "zh" else 10_000)



# The theme's own words on a Chinese page (not the article's): what a reader needs to find their way.
# kind: (selector, how to bring it into view). A selector matches the first such element with CJK text.
THEME_ELEMENTS = {
    "header title": (".bd-sidebar-primary .logo__title", None),
    "sidebar caption": (".bd-sidebar-primary .caption-text", None),
    "sidebar link": (".bd-sidebar-primary .bd-links a.reference", None),
    "search button": (".bd-sidebar-primary .search-button__default-text", None),
    "on this page": (".bd-sidebar-secondary .onthispage", None),
    "page navigation": (".prev-next-area a.left-prev", None),
    "footer": (".bd-footer-content .attnlab-licence", None),
    "search field": (".search-button__search-container input, #pst-search-dialog input[name=q]", "search"),
    "back-to-top button": ("#pst-back-to-top", "show"),
}

# The element and everything in it set in its own font stack without the site's web font: what a
# machine without any CJK font would draw if the web font did not reach the element (boxes).
WITHOUT_WEB_FONT = """(el) => {
  for (const e of [el, ...el.querySelectorAll("*")]) {
    const family = getComputedStyle(e).fontFamily.replace(/,\\s*"attnlab Noto Sans SC"/g, "");
    e.style.setProperty("font-family", family, "important");
  }
}"""


def theme_element(visit, kind):
    selector, action = THEME_ELEMENTS[kind]
    page = visit.page
    if action == "show":  # the theme shows it when the reader scrolls back up, below 1200 px only
        page.eval_on_selector(selector, "el => el.style.setProperty('display', 'block', 'important')")
    elif action == "search":
        page.keyboard.press("Control+k")
    cjk = re.compile(r"[\u3400-\u9fff]")
    element = page.locator(selector).filter(has_text=cjk).first if action != "search" else page.locator(selector).first
    element.wait_for(state="visible", timeout=WAIT_MS)
    text = element.get_attribute("placeholder") if action == "search" else element.inner_text()
    assert cjk.search(text or ""), (kind, text)
    return element


def test_the_themes_own_words_are_drawn_without_cjk_fonts_pixel_by_pixel(chinese_chapter_without_cjk_fonts):
    # Issue 52: with no CJK font the header title was boxes (12 of 12 loads), the sidebar's home link
    # and the search field too, while the article was fine. Each element's pixels are compared with
    # the same element set without the web font (boxes on this machine): equal pixels would be tofu.
    # (With the web font blocked, all nine compare equal: the check tells glyphs from boxes.)
    visit = chinese_chapter_without_cjk_fonts
    visit.page.evaluate("document.fonts.ready.then(() => true)")
    drawn = {}
    for kind in THEME_ELEMENTS:
        element = theme_element(visit, kind)
        element.scroll_into_view_if_needed()
        visit.page.evaluate("document.fonts.ready.then(() => true)")
        real = element.screenshot(animations="disabled")
        element.evaluate(WITHOUT_WEB_FONT)
        tofu = element.screenshot(animations="disabled")
        drawn[kind] = real != tofu
        if kind == "search field":
            visit.page.keyboard.press("Escape")
    assert drawn == dict.fromkeys(THEME_ELEMENTS, True)
    assert visit.errors == [] and visit.remote_requests() == []
