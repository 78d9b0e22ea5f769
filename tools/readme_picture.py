"""The README's picture: chapter 1's mask explorer as the built English site shows it, taken by
the Chromium the tests use (Playwright), written to docs/images/explorer.png.

    python -m tools.readme_picture     # needs the built site (make site) and make browser's chromium

The explorer, with its first control on the softmax weights, is the widget the widget manager draws from the page's stored state (its controls,
the pre-rendered frame, the caption), so the picture is exactly what a reader of the site sees.
The PNG is committed (GitHub shows the README from the repository, where no site is built);
`tests/test_site.py` checks that it is there, a PNG of a sensible size, and linked by the README.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from tools import site
from tools.pdf import launch_chromium

PICTURE = site.ROOT / "docs" / "images" / "explorer.png"
PAGE = "en/chapters/en/01-causal-mask.html"
EXPLORER = ".cell_output:has(.widget-toggle-buttons)"  # the first output cell with an explorer


def take(out: pathlib.Path = PICTURE) -> pathlib.Path:
    from playwright.sync_api import sync_playwright

    page_file = site.HTML / PAGE
    if not page_file.exists():
        raise SystemExit(f"no built site at {page_file}: run `make site` first")
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 720, "height": 1000}, device_scale_factor=1,
                                    locale="en-US", color_scheme="light")
            page.goto(page_file.as_uri())
            page.wait_for_selector(f"{EXPLORER} .jupyter-widgets img", state="visible", timeout=60_000)
            page.evaluate("document.fonts.ready.then(() => true)")
            explorer = page.locator(EXPLORER).first
            explorer.scroll_into_view_if_needed()
            before = explorer.locator("img").evaluate_all("els => els.map(e => e.src)")
            explorer.locator(".widget-toggle-buttons").first.locator("button").last.click()  # the weights
            page.wait_for_function("([sel, before]) => JSON.stringify([...document.querySelector(sel)"
                                   ".querySelectorAll('img')].map(e => e.src)) !== JSON.stringify(before)",
                                   arg=[EXPLORER, before], timeout=10_000)
            out.parent.mkdir(parents=True, exist_ok=True)
            explorer.screenshot(path=str(out), animations="disabled")
        finally:
            browser.close()
    return out


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m tools.readme_picture", description=__doc__.splitlines()[0]).parse_args(argv)
    out = take()
    print(f"{out.relative_to(site.ROOT)}: {out.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
