"""Shared fixtures: the repository's root, and for the site's tests (test_site*.py) the built site,
a local server, one Chromium per worker and one that sees no CJK font (their helpers are in
site_support.py)."""

import functools
import http.server
import os
import pathlib
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tools/ is not installed; tests import it from the checkout

from site_support import CHROMIUM, FONTCONFIG, LATIN_FONTS, built_site, font_families, launch_chromium  # noqa: E402


@pytest.fixture
def root() -> pathlib.Path:
    return ROOT


@pytest.fixture(scope="session")
def html_root():
    return built_site()


@pytest.fixture(scope="session")
def server(html_root):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(html_root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="session")
def playwright():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"no browser at {CHROMIUM}: make test installs Debian's chromium, or set ATTNLAB_CHROMIUM"
    with sync_playwright() as playwright:  # one per worker process: a second one in the same thread fails
        yield playwright


@pytest.fixture(scope="session")
def browser(playwright):
    browser = launch_chromium(playwright)
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def latin_only_fonts(tmp_path_factory):
    """Environment for a browser that sees DejaVu only (as on a fresh Linux box), never a CJK font."""
    assert LATIN_FONTS.is_dir(), "Debian's fonts-dejavu-core is missing"
    folder = tmp_path_factory.mktemp("fontconfig")
    (folder / "fonts.conf").write_text(FONTCONFIG.format(fonts=LATIN_FONTS, cache=folder / "cache"))
    env = dict(os.environ, FONTCONFIG_FILE=str(folder / "fonts.conf"))
    assert font_families(env, ":lang=zh") == []  # no font with Chinese glyphs is visible
    assert any("DejaVu" in family for family in font_families(env))
    return env


@pytest.fixture(scope="session")
def browser_without_cjk_fonts(playwright, latin_only_fonts):
    browser = launch_chromium(playwright, latin_only_fonts)
    yield browser
    browser.close()
