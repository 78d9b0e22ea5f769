"""Every page of the three sites in a browser, each loaded once: no console error, no failed or
remote request; axe-core finds no critical or serious accessibility violation; every explorer's
controls change its picture, and its frames are described in the reader's language.

The three checks used to load the pages three times (about 520 s of a 2-core machine); one pass
(``every_page``) now records what each check needs, and the three tests below judge it, each
naming every page that fails, not only the first.
"""

import re
import traceback
from dataclasses import dataclass, field

import pytest

from site_support import WAIT_MS, all_pages, frames_after_change, visible_frames, visit_all, widget_pages
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
    # Four pages load at once. They used to load one after the other: at four at a time, the widget
    # manager of a page now and then asked for its Font Awesome files under the page's own folder
    # (404). The cause: embed-amd.js defines six AMD modules, and each takes its webpack public
    # path from its own RequireJS URL; only one of them had a path, the others' URLs were under
    # the page (RequireJS's baseUrl), so their @font-face rules pointed there, and which rule the
    # browser used first was a matter of timing. tools/web/require-config.js gives every module a
    # path; test_the_widget_managers_fonts_all_come_from_its_own_folder keeps it so.
    assert AXE.exists(), "axe-core missing: tools/site.py installs web/package-lock.json"
    axe = AXE.read_text("utf-8")
    rels = list(all_pages(html_root))
    with_widgets = set(widget_pages(html_root))
    audited = audited_pages(rels, with_widgets)
    widget_urls = {f"{server}/{rel}" for rel in with_widgets}

    def ready(visit):
        if visit.page.url in widget_urls:
            visit.page.wait_for_selector(".jupyter-widgets img", state="attached", timeout=WAIT_MS)

    seen = {}
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    try:
        for rel, visit in zip(rels, visit_all(browser, context, [f"{server}/{rel}" for rel in rels], ready)):
            now = seen[rel] = Seen(list(visit.errors), list(visit.failed), visit.remote_requests())
            if rel in audited:  # before the controls are clicked: the page as it first shows
                visit.page.add_script_tag(content=axe)
                result = visit.page.evaluate("axe.run(document, {resultTypes: ['violations']})")
                now.violations = [(v["id"], v["nodes"][0]["html"][:120]) for v in result["violations"]
                                  if v["impact"] in ("critical", "serious")]
                now.alts = visit.page.eval_on_selector_all("img.widget-image", "els => els.map(e => e.alt)")
            if rel in with_widgets:
                try:
                    check_every_control(rel, visit, len(visit.errors))
                except Exception as error:  # noqa: BLE001  (an assertion, or Playwright's timeout)
                    now.controls = "".join(traceback.format_exception_only(error)).strip()
    finally:
        context.close()
    assert list(seen) == rels
    return seen


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
