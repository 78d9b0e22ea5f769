"""What the site's tests share: the site built once per run, its pages, and a headless Chromium
(Debian's chromium driven by Playwright; make test installs it, or the browser that
ATTNLAB_CHROMIUM names, e.g. GitHub's runners' Chrome).

The fixtures that use these live in tests/conftest.py. The site's tests are spread over three
files (test_site.py, test_site_pages.py, test_site_fonts.py) so that pytest-xdist's two workers
share them; the first one to need the site builds it, the others wait for that build
(``built_site``), so it is built once per run, from scratch, warnings as errors. ``make test``
starts that build in the background before pytest, while pip installs the rest of the venv
(``tools.site.build_once``; the run is named by ATTNLAB_TEST_RUN).
"""

import os
import pathlib
import re
import subprocess
import time
from html.parser import HTMLParser

from tools import site

LANGS = ("en", "de", "zh")
REPO = "attnlab/causal-attention"
TEST_RUN = "ATTNLAB_TEST_RUN"  # make test names its run, so the site it builds in the background counts
WAIT_MS = 60_000  # how long a browser test waits for what should appear within a second (a slow CI machine)


def built_site() -> pathlib.Path:
    """``site.HTML``, built from scratch once per test run, however many workers ask for it, and
    not again if ``make test``'s background build already did it for this run (ATTNLAB_TEST_RUN)."""
    run = os.environ.get(TEST_RUN) or os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    site.build_once(run, list(LANGS))
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


CHROMIUM = pathlib.Path(os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = site.BUILD / "screenshots"


# The browser cannot reach any other host than this machine: every request to another host goes to
# a proxy on a closed local port (Chromium sends loopback addresses past the proxy) and no host name
# resolves, so such a request fails (a console error) and is recorded (Visit.remote_requests).
# Playwright's page.route() did this per tab before, but routing switches the browser's HTTP cache
# off: every page then fetched and compiled the theme's, MathJax's and the widget manager's scripts
# anew (16 pages: 17.5 to 22.4 s of browser CPU with routing, 12.7 to 15.4 s without; issue 31).
OFFLINE = ["--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def launch_chromium(playwright, env=None):
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), env=env,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--no-first-run", "--disable-sync", *OFFLINE])


def open_tab(context):
    """A new page of ``context`` (its browser reaches no other host: ``OFFLINE``)."""
    return context.new_page()


class Visit:
    """One page in a fresh context, a new page of ``context``, or ``tab`` (a page already open in a
    context, navigated to ``url``): records console errors and every request from here on."""

    def __init__(self, browser, url, lang="en-US", context=None, wait=True, tab=None):
        self.own_context = context is None and tab is None
        self.keep_tab = tab is not None
        self.context = tab.context if tab else (context or browser.new_context(
            viewport={"width": 1280, "height": 900}, locale=lang))
        self.page = tab or open_tab(self.context)
        self.errors, self.requests = [], []
        self.failed = []  # (status, url) of every response >= 400, to name what a "Failed to load" error was
        self.listeners = {
            "console": lambda m: self.errors.append(m.text) if m.type == "error" else None,
            "pageerror": lambda e: self.errors.append(str(e)),
            "request": lambda r: self.requests.append(r.url),
            "response": lambda r: self.failed.append((r.status, r.url)) if r.status >= 400 else None,
        }
        for event, listener in self.listeners.items():
            self.page.on(event, listener)
        if wait:
            self.page.goto(url)
            self.page.wait_for_load_state("networkidle")
        else:  # the caller waits (see visit_all): the browser loads several pages at once meanwhile
            self.page.goto(url, wait_until="commit")

    def remote_requests(self):
        return [u for u in self.requests if not re.match(r"^(http://127\.0\.0\.1[:/]|data:|blob:|file:)", u)]

    def screenshot(self, name):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)

    def close(self):
        if self.own_context:
            self.context.close()
        elif self.keep_tab:  # the tab goes on to the next page; this visit stops recording
            for event, listener in self.listeners.items():
                self.page.remove_listener(event, listener)
        else:
            self.page.close()


def all_pages(html_root):
    for lang in LANGS:
        for path in pages(html_root, lang):
            if "_static" not in path.parts and "_sources" not in path.parts:
                yield path.relative_to(html_root).as_posix()


PARALLEL_PAGES = 4


def visit_all(browser, context, urls, ready=None):
    """Visit every URL in ``context``, PARALLEL_PAGES at a time; yield each Visit once it is loaded
    (network idle, then ``ready(visit)`` if given), and move on once the caller looked at it.

    The pages load in PARALLEL_PAGES tabs that stay open, each going on to its next URL as a
    reader follows a link: a new tab per page started a renderer process for each, which cost
    about 0.8 s of CPU per page on a 2-core machine (4.98 against 14.41 s of CPU for six
    pages), more than loading most pages. A reused tab starts from a fresh document (nothing of the
    last page's scripts, styles or widgets survives a navigation), and records only what happens
    after its new visit began.

    Each page is brought to the front before it is waited for and handed over: Chromium runs a tab
    in the background at a lower pace, and a click there waited about 2 s for the page's animation
    frames (0.1 s in front).

    The caller may resize a page it was handed (test_site_pages.py looks at each at a phone's width
    last): the tab gets its size back as soon as its next page has committed, when there is almost
    nothing to lay out again (resizing a page with widgets back cost up to 0.6 s)."""
    urls = list(urls)
    tabs, sizes = [], []
    try:
        for start in range(0, len(urls), PARALLEL_PAGES):
            batch = []
            for slot, url in enumerate(urls[start:start + PARALLEL_PAGES]):
                if slot == len(tabs):
                    tabs.append(open_tab(context))
                    sizes.append(tabs[slot].viewport_size)
                batch.append(Visit(browser, url, wait=False, tab=tabs[slot]))
                if tabs[slot].viewport_size != sizes[slot]:  # the caller resized the last page (a phone's width):
                    tabs[slot].set_viewport_size(sizes[slot])  # back to the context's size, on the new, empty page
            for visit in batch:
                visit.page.bring_to_front()
                visit.page.wait_for_load_state("networkidle")
                if ready:
                    ready(visit)
            for visit in batch:
                visit.page.bring_to_front()
                yield visit
                visit.close()
    finally:
        for tab in tabs:
            tab.close()


def visible_frames(page):
    return page.eval_on_selector_all(
        ".jupyter-widgets img", "els => els.filter(e => e.offsetParent !== null).map(e => e.src)")


def frames_after_change(page, before, timeout=20.0):
    """The visible frames once they differ from ``before`` (or after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        now = visible_frames(page)
        if now != before or time.monotonic() > deadline:
            return now
        page.wait_for_timeout(50)


def widget_pages(html_root):
    return [rel for rel in all_pages(html_root)
            if "application/vnd.jupyter.widget-state+json" in (html_root / rel).read_text("utf-8")]


# --------------------------------------------------------------------------
# Chinese text on a machine without any CJK font: the site's own web font.

LATIN_FONTS = pathlib.Path("/usr/share/fonts/truetype/dejavu")
FONTCONFIG = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>{fonts}</dir>
  <cachedir>{cache}</cachedir>
</fontconfig>
"""


def font_families(env, pattern=""):
    out = subprocess.run(["fc-list", pattern, "family"], env=env, capture_output=True, text=True, check=True).stdout
    return sorted(set(out.split()))

