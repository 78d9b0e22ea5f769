"""The course as one PDF per language, printed by Chromium from the built site (no TeX).

    python -m tools.pdf build     # _build/pdf/{en,de,zh}.pdf (builds the site first if it is missing)
    python -m tools.pdf check     # pdffonts / pdftotext over the three PDFs (poppler-utils)

For each language, the pages of the table of contents (chapters, cheat sheet,
exercises; the solutions stay on the site) are put one after the other into a
single HTML file next to the site's pages (_build/html/<lang>/chapters/<lang>/_print.html,
so every relative link to images, MathJax and the widget manager resolves),
behind a title page and a table of contents whose entries link to their pages and
give their page numbers. Chromium (Debian's /usr/bin/chromium or ATTNLAB_CHROMIUM,
driven by Playwright) opens it from disk, lets MathJax typeset and the widget
manager draw every widget in its first frame, and prints it with page numbers
in the footer. On paper: folded answers (dropdowns) are printed open; a code
cell is kept on one page where it fits, and a heading with what follows it;
code wraps instead of being cut; a formula wider than the page is set smaller
until it fits (tools/web/fit-math.js); buttons and sliders, which do nothing on
paper, are hidden; a link to a page outside the book (a solution, a download)
points at the published site (tools/site/published.py), never at a file of the
machine that printed it. The contents' page numbers come from a first print:
pdftotext finds the page on which each title starts, and the second print
writes them in (the numbers take the same room in both, so no page moves;
``check`` finds each title on its page). Chromium embeds the fonts it drew with
(the site's CJK web font where the machine has no CJK font).
"""

from __future__ import annotations

import argparse
import collections
import html
import json
import os
import pathlib
import re
import subprocess
import sys
import urllib.parse

import yaml

from tools import site
from tools.site.published import pages_url

PDF = site.BUILD / "pdf"
PRINT_NAME = "_print.html"
SECTIONS = ("Chapters", "Exercises")  # the parts of _toc.yml that go into the PDF
CHROMIUM = pathlib.Path(os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium"))
SUBTITLE = {"en": "The course as a book", "de": "Der Kurs als Buch", "zh": "课程的书本版"}
CONTENTS = {"en": "Contents", "de": "Inhalt", "zh": "目录"}
PRINT_WIDTH = 676  # CSS px of A4's printable width (210 - 2 * 15 mm at 96 dpi is 680), a little less
MATH_FLOORS = {"display": 0.45, "inline": 0.6}  # on paper nothing scrolls: a formula may shrink further

PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm 15mm; }
html, body { background: #fff !important; }
.bd-header, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer, .bd-footer-content, .bd-footer-article,
.header-article, .prev-next-area, .headerlink, .copybtn, .toggle-button, .attnlab-lang, #pst-back-to-top,
.jupyter-widgets .widget-toggle-buttons, .jupyter-widgets .widget-button, .jupyter-widgets .widget-slider,
.jupyter-widgets .widget-dropdown, .jupyter-widgets .widget-checkbox, .cell_input .copybtn { display: none !important; }
.bd-main, .bd-content, .bd-article-container, .bd-article { max-width: none !important; width: auto !important;
  padding: 0 !important; margin: 0 !important; overflow: visible !important; }
section.attnlab-print-page { break-before: page; }
.bd-main .bd-content .bd-article section.attnlab-print-page h1:first-of-type { display: block !important; }
pre, pre code, .highlight pre, .output pre, div.cell_output pre { white-space: pre-wrap !important;
  overflow-wrap: anywhere !important; word-break: break-word; overflow: visible !important; max-height: none !important; }
div.cell_output, .output, .highlight { overflow: visible !important; max-height: none !important; }
table { break-inside: auto; } tr, img, figure, .jupyter-widgets { break-inside: avoid; }
img { max-width: 100% !important; height: auto !important; }
/* a code cell, an output, a formula on one page where it fits; a heading stays with what follows */
div.cell_input, div.cell_output > .output, div.highlight, div.math, details.sd-dropdown { break-inside: avoid; }
h1, h2, h3, h4, .sd-summary-title, p:has(+ div.cell) { break-after: avoid; }
/* folded answers are printed open (assemble() opens them); the chevron that opens them is of no use */
details.sd-dropdown .sd-summary-state-marker { display: none !important; }
.attnlab-title-page { height: 240mm; display: flex; flex-direction: column; justify-content: center; text-align: center; }
.attnlab-title-page h1 { font-size: 2.4rem; } .attnlab-title-page p { font-size: 1.2rem; }
nav.attnlab-print-toc { break-before: page; } nav.attnlab-print-toc ul { line-height: 1.9; list-style: none; padding-left: 0; }
nav.attnlab-print-toc li.part { list-style: none; font-weight: 600; margin-top: 1em; }
nav.attnlab-print-toc li a { display: flex; align-items: baseline; gap: 0.4em; text-decoration: none; color: inherit; }
nav.attnlab-print-toc .leader { flex: 1 1 auto; border-bottom: 1px dotted #888; }
nav.attnlab-print-toc .page { font-variant-numeric: tabular-nums; min-width: 2.5em; text-align: right; }
"""

FOOTER = ('<div style="font-size:9px; width:100%; text-align:center; color:#555;">'
          '{title} · <span class="pageNumber"></span> / <span class="totalPages"></span></div>')


def book_pages(lang: str) -> list[tuple[str, list[str]]]:
    """[(part caption, [page paths without .html])] of one language, in the table of contents' order."""
    toc = yaml.safe_load(site.localized_toc((site.ROOT / "_toc.yml").read_text("utf-8"), lang))
    english = yaml.safe_load((site.ROOT / "_toc.yml").read_text("utf-8"))
    parts = []
    for part, original in zip(toc["parts"], english["parts"]):
        if original["caption"] in SECTIONS:
            parts.append((part["caption"], [entry["file"] for entry in part["chapters"]]))
    return parts


ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(.*?)</article>', re.S)
STATE = re.compile(r'<script type="application/vnd.jupyter.widget-state\+json">.*?</script>', re.S)
SWITCHER = re.compile(r'<nav class="attnlab-lang".*?</nav>', re.S)
TITLE = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S)


def slug(page: str) -> str:
    return "p-" + page.replace("/", "-")


def page_title(article: str) -> str:
    found = TITLE.search(article)
    text = re.sub(r"<[^>]+>", "", found.group(1)) if found else ""
    return html.unescape(text).replace("#", "").strip()


def assemble(lang: str, page_numbers: list[int] | None = None) -> tuple[pathlib.Path, list[str]]:
    """Write the print file of one language; return its path and the page titles in order.
    ``page_numbers``: the PDF page on which each title starts, for the contents (None: a first
    print, whose contents hold "000" in the same room)."""
    site_root = site.HTML / lang
    parts = book_pages(lang)
    first = (site_root / f"{parts[0][1][0]}.html").read_text("utf-8")
    head = first[first.index("<head>") + len("<head>"): first.index("</head>")]
    head = STATE.sub("", head)
    head = re.sub(r"<title>.*?</title>", f"<title>{html.escape(site.TITLES[lang])}</title>", head, flags=re.S)
    head = re.sub(r'<script src="[^"]*fontawesome\.js[^"]*"></script>', "", head)
    html_tag = re.search(r"<html[^>]*>", first).group()
    states, sections, titles, toc = [], [], [], []
    for caption, files in parts:
        toc.append(f'<li class="part">{html.escape(caption)}</li>')
        for file in files:
            text = (site_root / f"{file}.html").read_text("utf-8")
            states += STATE.findall(text)
            article = SWITCHER.sub("", ARTICLE.search(text).group(1), count=1)
            # links between the book's pages point at their sections in this file
            article = re.sub(r'href="(?:\.\./\.\./)?(?:(chapters|exercises)/%s/)?([\w-]+)\.html(#[^"]*)?"' % lang,
                             lambda m: self_link(m, lang, files), article)
            article = published_links(article, lang, file)
            article = OPEN_DETAILS.sub(r"<details open\1", article)  # folded answers, printed open
            title = page_title(article)
            titles.append(title)
            number = str(page_numbers[len(titles) - 1]) if page_numbers else "000"
            toc.append(f'<li><a href="#{slug(file)}"><span class="title">{html.escape(title)}</span>'
                       f'<span class="leader"></span><span class="page">{number}</span></a></li>')
            sections.append(f'<section class="attnlab-print-page" id="{slug(file)}">{article}</section>')
    body = (f'<div class="attnlab-title-page"><h1>{html.escape(site.TITLES[lang])}</h1>'
            f'<p>{html.escape(SUBTITLE[lang])}</p></div>'
            f'<nav class="attnlab-print-toc" aria-label="{CONTENTS[lang]}"><h2>{CONTENTS[lang]}</h2>'
            f'<ul>{"".join(toc)}</ul></nav>'
            f'<main id="main-content" class="bd-main"><div class="bd-content"><div class="bd-article-container">'
            f'<article class="bd-article">{"".join(sections)}</article></div></div></main>')
    document = (f"<!DOCTYPE html>\n{html_tag}\n<head>{head}\n{''.join(states)}\n<style>{PRINT_CSS}</style>\n</head>\n"
                f'<body data-default-mode="light">{body}</body></html>\n')
    out = site_root / parts[0][1][0].rsplit("/", 1)[0] / PRINT_NAME  # beside the pages: same relative links
    out.write_text(document, "utf-8")
    return out, titles


OPEN_DETAILS = re.compile(r"<details(?![^>]*\bopen\b)([\s>])")
LINK = re.compile(r'href="([^"#][^"]*)"')


def published_links(article: str, lang: str, file: str) -> str:
    """Every link that still leads to a file beside the page (a solution, a download, a page the book
    leaves out) points at the published site instead: in a PDF it would open a file:/// path of
    the machine that printed it."""
    here = f"{pages_url()}{lang}/{file}.html"

    def absolute(match):
        href = html.unescape(match.group(1))
        if urllib.parse.urlsplit(href).scheme:  # https:, mailto:, data: stay
            return match.group(0)
        return f'href="{html.escape(urllib.parse.urljoin(here, href))}"'

    return LINK.sub(absolute, article)


def self_link(match, lang: str, files: list[str]) -> str:
    section, name, anchor = match.group(1) or "chapters", match.group(2), match.group(3) or ""
    file = f"{section}/{lang}/{name}"
    if anchor:
        return f'href="{anchor}"'  # ids stay as the pages had them
    return f'href="#{slug(file)}"'


def print_pdf(lang: str, source: pathlib.Path, out: pathlib.Path, browser) -> None:
    context = browser.new_context(locale={"en": "en-US", "de": "de-DE", "zh": "zh-CN"}[lang],
                                  color_scheme="light", viewport={"width": 1000, "height": 1400})
    page = context.new_page()
    page.goto(source.as_uri())
    page.wait_for_load_state("networkidle")
    views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if views:  # the widget manager replaces each view script with its widget
        page.wait_for_function(f"document.querySelectorAll('.jupyter-widgets img').length >= {views}", timeout=120000)
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise.then(() => true) : null")
    page.evaluate("document.fonts.ready.then(() => true)")
    page.emulate_media(media="print")
    # lay the book out at the page's width and set every formula wider than that smaller (fit-math.js)
    page.evaluate(f"window.attnlabMathFloors = {json.dumps(MATH_FLOORS)}")
    page.set_viewport_size({"width": PRINT_WIDTH, "height": 1400})
    page.wait_for_function("window.attnlabMathFitted === true", timeout=60_000)
    page.wait_for_timeout(300)  # past fit-math.js's wait after a resize; then once more, to be sure
    page.evaluate("window.attnlabFitMath()")
    out.parent.mkdir(parents=True, exist_ok=True)
    page.pdf(path=str(out), format="A4", print_background=True, display_header_footer=True,
             header_template="<span></span>", footer_template=FOOTER.format(title=html.escape(site.TITLES[lang])),
             margin={"top": "16mm", "bottom": "18mm", "left": "15mm", "right": "15mm"}, outline=True, tagged=True)
    context.close()


def launch_chromium(playwright):
    """The tests' Chromium, allowed to read the built site from disk (also tools/readme_picture.py)."""
    if not CHROMIUM.exists():
        raise SystemExit(f"no browser at {CHROMIUM}: `make browser` installs Debian's chromium, or set ATTNLAB_CHROMIUM")
    return playwright.chromium.launch(executable_path=str(CHROMIUM),
                                      args=["--no-sandbox", "--disable-gpu", "--allow-file-access-from-files"])


def build(languages: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    if not all((site.HTML / lang).is_dir() for lang in languages):
        site.build(languages)
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            for lang in languages:
                out = PDF / f"{lang}.pdf"
                numbers = None
                for _ in range(2):  # the first print finds the pages, the second writes them into the contents
                    source, titles = assemble(lang, numbers)
                    try:
                        print_pdf(lang, source, out, browser)
                    finally:
                        source.unlink()  # not a page of the site
                    numbers = title_pages(pdf_text(out), titles)
                print(f"{out.relative_to(site.ROOT)}: {len(titles)} pages of the site, {out.stat().st_size / 1e6:.1f} MB")
        finally:
            browser.close()


def pdf_text(path: pathlib.Path) -> str:
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout


def pdf_fonts(path: pathlib.Path) -> list[dict]:
    lines = subprocess.run(["pdffonts", str(path)], capture_output=True, text=True, check=True).stdout.splitlines()
    header = lines[0]
    columns = {name: header.index(name) for name in ("name", "type", "emb", "sub", "uni")}
    fonts = []
    for line in lines[2:]:
        fonts.append({"name": line[:columns["type"]].strip(), "emb": line[columns["emb"]:columns["sub"]].strip()})
    return fonts


def title_pages(text: str, titles: list[str]) -> list[int]:
    """The PDF page (1-based, as the footer counts) on which each site page's title starts.

    Each page of the site starts a PDF page with its title. pdftotext may reorder a wrapped title
    that mixes scripts ("flash attention与"), so a title counts as found on the first later PDF
    page whose beginning holds all of its characters. Sheets 0 and 1 are the title page and the
    contents."""
    sheets = [re.sub(r"\s+", "", sheet) for sheet in text.split("\f")]
    found, position = [], 1
    for title in titles:
        wanted = collections.Counter(re.sub(r"\s+", "", title))
        position = next((n for n in range(position + 1, len(sheets))
                         if not wanted - collections.Counter(sheets[n][:len(title) + 60])), None)
        assert position is not None, f"no page starts with {title!r}"
        found.append(position + 1)
    return found


def check(languages: list[str]) -> None:
    """Every font embedded, a CJK font in the Chinese PDF, every page title in order on the page the
    contents give, page numbers, the folded answers printed, no link to a file of this machine."""
    for lang in languages:
        path = PDF / f"{lang}.pdf"
        fonts = pdf_fonts(path)
        assert fonts and [f for f in fonts if f["emb"] != "yes"] == [], lang
        text = pdf_text(path)
        if lang == "zh":  # Chromium embeds the CJK (CFF) glyphs as Type 3 fonts without a name: read the text
            assert len(re.findall(r"[\u4e00-\u9fff]", text)) > 20000, "too little Chinese text in the PDF"
        numbers = title_pages(text, assemble_titles(lang))
        source, titles = assemble(lang, numbers)
        printed = source.read_text("utf-8")
        source.unlink()
        flat = re.sub(r"\s+", " ", text)
        contents = re.sub(r"\s+", " ", text.split("\f")[1] + " " + text.split("\f")[2])
        listed = [int(n) for n in re.findall(r'<span class="page">(\d+)</span>', printed)]
        assert listed == numbers, (lang, "the contents' page numbers are not where the titles are")
        assert all(f" {n}" in contents for n in numbers[:8]), (lang, "no page numbers in the contents")
        assert "<details " not in printed.replace("<details open", ""), (lang, "a folded answer")
        body = printed.split("<body", 1)[1]
        assert not re.search(r'href="(?!#|https?:|mailto:)', body), (lang, "a link to a file of this machine")
        uris = set(re.findall(rb"/URI \(([^)]*)\)", path.read_bytes()))  # the printed links themselves
        assert uris and not [uri for uri in uris if not uri.startswith((b"https://", b"http://", b"mailto:"))], lang
        pages = int(subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True)
                    .stdout.split("Pages:")[1].split()[0])
        assert f"{pages} / {pages}" in flat and f"2 / {pages}" in flat, lang
        print(f"{path.relative_to(site.ROOT)}: {pages} pages, {len(fonts)} fonts (all embedded), "
              f"{len(titles)} titles in order on the pages the contents give, {len(uris)} links (none to a file)")


def assemble_titles(lang: str) -> list[str]:
    source, titles = assemble(lang)
    source.unlink()
    return titles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the course as one PDF per language.")
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--lang", action="append", choices=list(site.TITLES))
    args = parser.parse_args(argv)
    languages = args.lang or list(site.TITLES)
    build(languages) if args.command == "build" else check(languages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
