"""Every page of the three sites in a browser, each loaded once: no console error, no failed or
remote request; axe-core finds no critical or serious accessibility violation; at phone width every
box that scrolls takes the keyboard and nothing is cut; every explorer's controls change its
picture, and its frames are described in the reader's language; the site's own CJK web font holds
every CJK character a page shows.

The three checks used to load the pages three times (about 520 s of a 2-core machine); one pass
(``every_page``) now records what each check needs, and the three tests below judge it, each
naming every page that fails, not only the first.
"""

import json
import re
import time
import traceback
from dataclasses import dataclass, field

import pytest

from site_support import WAIT_MS, Page, all_pages, frames_after_change, visible_frames, visit_all, widget_pages
from tools import site

AXE = site.NODE_MODULES / "axe-core" / "axe.min.js"


def audited_pages(rels, with_widgets):
    """The pages axe checks: every English content page, and the German and Chinese ones with
    explorers (their alt texts are in the reader's language). The three sites share template and
    markup, so the other de/zh pages would repeat the English findings at about half of the
    axe check's time (391 s for all 69 pages, loaded)."""
    content = [rel for rel in rels if "/chapters/" in rel or "/exercises/" in rel or "/solutions/" in rel]
    return {rel for rel in content if rel.startswith("en/") or rel in with_widgets}


@dataclass
class Seen:
    """What one visit of one page showed."""

    errors: list = field(default_factory=list)  # console errors and page errors while it loaded
    failed: list = field(default_factory=list)  # (status, url) of responses >= 400
    remote: list = field(default_factory=list)  # requests to another host (aborted)
    violations: list | None = None  # axe: (rule, first node's HTML) of the serious ones; None: not audited
    alts: list | None = None  # the explorers' frame descriptions (audited pages)
    controls: str | None = None  # what went wrong with the explorer's controls; None: all fine or none
    icons: list = field(default_factory=list)  # (family, code point) of every Font Awesome 6 icon it can draw
    shown_cjk: str = ""  # every CJK character the reader sees as text (widgets included), before any click
    phone: dict | None = None  # at phone width (PHONE): what scrolls without a tab stop, what overflows


# axe over the whole page, started without waiting; the promise is read later (window.attnlabAxe).
# Tried and dropped, as they saved nothing clear on a loaded 2-core machine (11-18 s per audit of
# chapter 8 either way): auditing only the article (a run over the rest of the page still took
# most of the time: axe models the whole page whatever it checks), and auditing the contrast of
# one highlighted code token per look instead of all 4743.
# It waits for the page to settle first: MathJax done and the fonts ready, then 0.4 s without a
# change under #main-content, then (at most 3 s) until every block that scrolls has a tab stop.
# The theme gives a scrollable code block its tab stop on the load event and 0.3 s after a change
# under #main-content (pydata-sphinx-theme.js, debounced); a block that began to scroll later, on
# a loaded machine, kept none (en exercise 7's first code block, twice): tools/web/tab-stops.js
# now sets it whenever a block starts to scroll, and the wait lets that happen before axe looks.
START_AXE = """() => {
  const quiet = () => new Promise(done => {
    let timer;
    const observer = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(finish, 400); });
    function finish() { observer.disconnect(); done(); }
    observer.observe(document.getElementById("main-content") || document.body, {subtree: true, childList: true});
    timer = setTimeout(finish, 400);
    setTimeout(finish, 10000);  // a page that never settles is audited as it is then
  });
  // then until every block that scrolls has its tab stop (tools/web/tab-stops.js sets it when a
  // block starts to scroll), at most 3 s: one that still lacks it then is a real finding
  const SCROLLERS = window.attnlabScrollers || "pre";  // tools/web/tab-stops.js's selector (the theme's)
  const stopsSet = () => [...document.querySelectorAll(SCROLLERS)].every(el =>
    !(el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight) || el.tabIndex === 0);
  const tabStops = () => new Promise(done => {
    const start = Date.now();
    (function poll() { stopsSet() || Date.now() - start > 3000 ? done() : setTimeout(poll, 100); })();
  });
  const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
  const fonts = document.fonts && document.fonts.ready;
  window.attnlabAxe = Promise.all([typeset, fonts]).then(quiet).then(tabStops)
    .then(() => axe.run(document, {resultTypes: ["violations"]}));
}"""


# Every Font Awesome 6 character that the page's styles put before or after an element (shown or
# hidden: a hidden menu's icon shows when the menu opens), with the family that draws it.
ICONS = """() => {
  const out = new Set();
  for (const el of document.querySelectorAll("body *")) {
    for (const pseudo of ["::before", "::after"]) {
      const style = getComputedStyle(el, pseudo);
      if (!style.fontFamily.includes("Font Awesome 6")) continue;
      for (const ch of style.content) {
        const code = ch.codePointAt(0);
        if (code >= 0xe000 && code <= 0xf8ff) out.add(style.fontFamily.replace(/"/g, "") + "|" + code);
      }
    }
  }
  return [...out];
}"""

# What the reader sees as text, widgets included (rendered by JavaScript from their state): its CJK
# characters. innerText does not depend on the fonts installed, so this pass (a browser with CJK
# fonts) reads the same characters as one without them; a second pass over the 39 Chinese pages
# in test_site_fonts.py's browser without CJK fonts cost about 42 s for no other evidence.
SHOWN_CJK = """() => [...new Set([...document.body.innerText].filter(c => /[\\u2e80-\\u9fff\\uf900-\\ufaff\\ufe10-\\uffef]/.test(c)))].join("")"""

# ICONS, started without waiting (it reads the style of every element: 0.3 s a page); read later.
START_ICONS = "() => { window.attnlabIcons = new Promise(done => setTimeout(() => done((" + ICONS + ")()), 0)); }"


# The page at phone width (390 px, as a small phone): every box that scrolls can be reached by
# keyboard (a tab stop on it or inside it: axe's scrollable-region-focusable, "serious"), the page
# itself does not scroll sideways, and no inline formula is cut by its box (span.math hides what
# overflows). After the resize (and MathJax's typesetting) it runs what fit-math.js runs 150 ms
# after one (attnlabFitMath) and waits two frames, in which tab-stops.js's ResizeObserver has
# looked again. It is each page's last check, and the page stays at that width: visit_all gives
# the tab its size back once the next page has committed (resizing a page with widgets back cost
# up to 0.6 s). axe's full run at both widths
# over every page found no other rule that changes with the width (docs/site.md); a second axe pass
# would cost about 5 s a page.
PHONE = {"width": 390, "height": 800}
PHONE_CHECK = r"""async () => {
  await Promise.all([window.MathJax && MathJax.startup && MathJax.startup.promise, document.fonts.ready]);
  if (window.attnlabFitMath) window.attnlabFitMath();
  return await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
    const focusable = "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])";
    const main = document.querySelector("main") || document.body;
    const scrolls = el => {  // overflows a box that scrolls (the cheap size test first)
      if (!(el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1) || !el.offsetParent) return false;
      const s = getComputedStyle(el);
      return (/(auto|scroll)/.test(s.overflowX) && el.scrollWidth > el.clientWidth + 1) ||
             (/(auto|scroll)/.test(s.overflowY) && el.scrollHeight > el.clientHeight + 1);
    };
    const unreachable = [...main.querySelectorAll("*")].filter(el => scrolls(el) && el.tabIndex < 0 && !el.querySelector(focusable));
    const name = el => el.tagName.toLowerCase() + "." + String(el.className).trim().split(/\s+/).slice(0, 2).join(".");
    done({
      unreachable: unreachable.map(el => name(el) + ": " + el.textContent.trim().slice(0, 40)),
      page_wider: document.documentElement.scrollWidth - window.innerWidth,
      cut_formulas: [...document.querySelectorAll("span.math")].filter(span => {  // the formula's end hidden
        const math = span.querySelector("mjx-math");
        return math && span.offsetParent && getComputedStyle(span).overflowX === "hidden" &&
          math.getBoundingClientRect().right > span.getBoundingClientRect().right + 1;
      }).map(span => span.textContent.slice(0, 40)),
    });
  })));
}"""


def at_phone_width(page) -> dict:
    """PHONE_CHECK on ``page`` at phone width (the page stays at it: see visit_all)."""
    page.set_viewport_size(PHONE)
    return page.evaluate(PHONE_CHECK)


def check_every_control(rel, visit, errors_before):
    page = visit.page
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
    assert visit.errors[errors_before:] == [], (rel, visit.errors[errors_before:])


@pytest.fixture(scope="module")
def every_page(html_root, server, browser) -> dict[str, Seen]:
    # One context for all pages, as a reader's browser: the shared theme, MathJax and widget
    # scripts come from its cache after the first page (a fresh context per page fetched and
    # parsed them again for each of about a hundred pages). Every request is still recorded,
    # and one to another host is aborted, which also shows as a console error.
    # Four pages load at once (a RequireJS race once sent the widget manager's font requests
    # under the page's folder; the site now loads the manager without RequireJS, and
    # test_the_widget_managers_fonts_all_come_from_its_own_folder keeps its fonts in its folder).
    # axe starts on each page of the four as soon as it has loaded, so the four audits run in their
    # own renderer processes at once; each is read before that page's controls are clicked.
    assert AXE.exists(), "axe-core missing: tools/site/ installs web/package-lock.json"
    axe = AXE.read_text("utf-8")
    rels = list(all_pages(html_root))
    with_widgets = set(widget_pages(html_root))
    audited = audited_pages(rels, with_widgets)
    audited_urls = {f"{server}/{rel}" for rel in audited}
    widget_urls = {f"{server}/{rel}" for rel in with_widgets}

    def ready(visit):
        if visit.page.url in widget_urls:
            visit.page.wait_for_selector(".jupyter-widgets img", state="attached", timeout=WAIT_MS)
            visit.page.wait_for_selector(".jupyter-widgets button", state="attached", timeout=WAIT_MS)
        visit.page.evaluate(START_ICONS)  # in the page's own process, while the others load
        if visit.page.url in audited_urls:  # the page as it first shows, before any click
            visit.page.add_script_tag(content=axe)
            visit.page.evaluate(START_AXE)

    seen, seconds = {}, {}  # seconds: rel -> {"wait": loading (four at a time), "axe": ..., "controls": ...}
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    clock = time.monotonic()
    try:
        for rel, visit in zip(rels, visit_all(browser, context, [f"{server}/{rel}" for rel in rels], ready)):
            spent = seconds[rel] = {"wait": time.monotonic() - clock}
            now = seen[rel] = Seen(list(visit.errors), list(visit.failed), visit.remote_requests())
            now.shown_cjk = visit.page.evaluate(SHOWN_CJK)
            clock = time.monotonic()
            now.icons = [(family, int(code)) for family, code in
                         (item.rsplit("|", 1) for item in visit.page.evaluate("window.attnlabIcons"))]
            spent["icons"] = time.monotonic() - clock
            if rel in audited:
                clock = time.monotonic()
                result = visit.page.evaluate("window.attnlabAxe")
                now.violations = [(v["id"], v["nodes"][0]["html"][:120]) for v in result["violations"]
                                  if v["impact"] in ("critical", "serious")]
                now.alts = visit.page.eval_on_selector_all("img.widget-image", "els => els.map(e => e.alt)")
                spent["axe"] = time.monotonic() - clock
            if rel in with_widgets:
                clock = time.monotonic()
                try:
                    check_every_control(rel, visit, len(visit.errors))
                except Exception as error:  # noqa: BLE001  (an assertion, or Playwright's timeout)
                    now.controls = "".join(traceback.format_exception_only(error)).strip()
                spent["controls"] = time.monotonic() - clock
            clock = time.monotonic()
            now.phone = at_phone_width(visit.page)  # the last look: the page stays that narrow
            spent["phone"] = time.monotonic() - clock
            clock = time.monotonic()
    finally:
        context.close()
        write_timing(seconds)
    assert list(seen) == rels
    return seen


TIMING = site.BUILD / "site-pages-timing.json"


def write_timing(seconds):
    """Where the page pass spent its time (issue 31), per phase and per page, slowest first:
    _build/site-pages-timing.json."""
    phases = sorted({phase for spent in seconds.values() for phase in spent})
    totals = {phase: round(sum(spent.get(phase, 0) for spent in seconds.values()), 1) for phase in phases}
    pages = sorted(seconds.items(), key=lambda item: -sum(item[1].values()))
    TIMING.write_text(json.dumps({"total": round(sum(totals.values()), 1), "phases": totals, "pages": {
        rel: {phase: round(value, 2) for phase, value in spent.items()} for rel, spent in pages}}, indent=1), "utf-8")


def test_every_page_loads_without_console_errors_or_remote_requests(every_page):
    assert len(every_page) >= 3 * 4
    broken = {rel: (s.errors, s.failed, s.remote) for rel, s in every_page.items() if s.errors or s.failed or s.remote}
    assert broken == {}, broken


def test_every_widget_control_changes_the_picture(html_root, every_page):
    rels = widget_pages(html_root)
    assert len(rels) >= 3
    failed = {rel: every_page[rel].controls for rel in rels if every_page[rel].controls is not None}
    assert failed == {}, failed


def test_no_page_has_a_critical_or_serious_accessibility_violation(every_page):
    alts = {rel: s.alts for rel, s in every_page.items() if s.alts is not None}
    found = {rel: s.violations for rel, s in every_page.items() if s.violations}
    assert sum(rel.startswith("en/") for rel in alts) >= 23 and {rel[:3] for rel in alts} == {"en/", "de/", "zh/"}
    assert found == {}, found
    # every explorer frame is described in the reader's language: its caption and its controls' values
    for rel, texts in alts.items():
        assert all(len(text) > 10 for text in texts), (rel, texts)
        if rel.startswith("zh/"):
            assert all(re.search(r"[\u4e00-\u9fff]", text) for text in texts), (rel, texts)
    assert sum(len(texts) for texts in alts.values()) >= 9 * 3


def test_at_phone_width_every_scrolling_box_takes_the_keyboard_and_nothing_is_cut(every_page):
    # issue 52: formulas in chapters 6 and 11 ran past the column at phone width in every language,
    # German chapter 11's in a box without a tab stop (axe: scrollable-region-focusable, serious),
    # chapter 11's inline D_i cut by its box; the explorers' boxes scrolled by 4 px without one
    assert all(seen.phone is not None for seen in every_page.values())
    problems = {rel: seen.phone for rel, seen in every_page.items()
                if seen.phone["unreachable"] or seen.phone["page_wider"] > 0 or seen.phone["cut_formulas"]}
    assert problems == {}, problems


def test_every_icon_a_page_draws_is_in_the_cut_font_awesome_fonts(html_root, every_page):
    # tools/site/ cuts Font Awesome's web fonts to the icons the pages name (cut_font_awesome);
    # a glyph missing there would show as an empty box. The pages draw about twenty icons.
    from fontTools.ttLib import TTFont

    fonts = {}
    for lang in {rel.split("/")[0] for rel in every_page}:
        folder = html_root / lang / site.ICON_FONTS
        fonts[lang] = {name: set(TTFont(str(folder / f"{name}.woff2")).getBestCmap())
                       for name in ("fa-solid-900", "fa-regular-400", "fa-brands-400")}
    missing, drawn = {}, set()
    for rel, seen in every_page.items():
        have = fonts[rel.split("/")[0]]
        for family, code in seen.icons:
            drawn.add(code)
            names = ("fa-brands-400",) if "Brands" in family else ("fa-solid-900", "fa-regular-400")
            if not any(code in have[name] for name in names):
                missing.setdefault(rel, []).append(f"{family} U+{code:04X}")
    assert missing == {}, missing
    assert len(drawn) >= 10  # the theme's own icons: menu, search, colour modes, download, GitHub, ...
    assert all(sum(len(cmap) for cmap in by_name.values()) < 100 for by_name in fonts.values())  # cut, not whole


def test_the_web_font_holds_every_cjk_character_a_page_shows(html_root, every_page):
    # On a machine without CJK fonts every CJK character falls back to the site's own web font
    # (test_site_fonts.py shows that it does); a character missing from it would show as a box.
    from fontTools.ttLib import TTFont

    cmaps = {lang: TTFont(html_root / lang / site.WEB_FONT)["cmap"].getBestCmap() for lang in ("en", "de", "zh")}
    missing = {rel: "".join(ch for ch in seen.shown_cjk if ord(ch) not in cmaps[rel.split("/")[0]])
               for rel, seen in every_page.items() if rel.split("/")[0] in cmaps}
    assert {rel: chars for rel, chars in missing.items() if chars} == {}
    zh_pages = [rel for rel in every_page if rel.startswith("zh/")]
    assert len(zh_pages) >= 30 and all(every_page[rel].shown_cjk for rel in zh_pages)  # every Chinese page shows some
    # the language switcher's "中文" on every English and German page that has the switcher (all but the
    # redirecting index.html, search.html and genindex.html, which Sphinx writes without the article)
    switched = [rel for rel in every_page if rel.startswith(("en/", "de/"))
                and Page((html_root / rel).read_text("utf-8")).switcher]
    assert len(switched) >= 60
    assert [rel for rel in switched if "中" not in every_page[rel].shown_cjk] == []


def test_a_code_block_that_starts_to_scroll_after_the_load_event_gets_its_tab_stop(server, browser):
    # The theme sets tab stops on the load event and after a change under #main-content; here a
    # block starts to scroll later through its style alone (as a late font would make it), which
    # the theme does not see. Without tools/web/tab-stops.js (its request aborted) the block stays
    # without a tab stop; with it, it gets one.
    def tab_index_after_growing(block_script: bool) -> int:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            if not block_script:
                page.route(re.compile(r"/tab-stops\.js(\?|$)"), lambda route: route.abort())
            page.goto(f"{server}/en/exercises/en/07-bidirectional-attention.html", wait_until="load")
            index = page.evaluate("""() => [...document.querySelectorAll("pre")].findIndex(
                el => el.scrollWidth <= el.clientWidth && el.scrollHeight <= el.clientHeight)""")
            assert index >= 0, "no code block that fits its box on this page"
            pre = page.locator("pre").nth(index).element_handle()
            page.wait_for_timeout(500)  # past the theme's 0.3 s debounce
            assert pre.evaluate("el => el.tabIndex") != 0
            pre.evaluate("el => { el.style.fontSize = '48px'; }")  # no node added: the theme's observer stays quiet
            page.wait_for_function("el => el.scrollWidth > el.clientWidth", arg=pre, timeout=5000)
            if block_script:
                page.wait_for_function("el => el.tabIndex === 0", arg=pre, timeout=5000)
            else:
                page.wait_for_timeout(1000)
            return pre.evaluate("el => el.tabIndex")
        finally:
            context.close()

    assert tab_index_after_growing(block_script=False) != 0  # the theme alone: the case is real
    assert tab_index_after_growing(block_script=True) == 0
