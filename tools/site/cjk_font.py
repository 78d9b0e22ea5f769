"""Each site's Chinese web font: a subset of the package's CJK font with exactly the characters
its pages show.

The font is written to _static/assets/fonts/attnlab-cjk.woff2 of each site; tools/web/attnlab.css
puts it last in every font stack, so only a browser without a CJK font downloads it.
"""

from __future__ import annotations

import html
import pathlib
import re

from .layout import HTML, ROOT

SITE_CSS = ROOT / "tools" / "web" / "attnlab.css"
WEB_FONT = pathlib.Path("_static") / "assets" / "fonts" / "attnlab-cjk.woff2"  # inside each language site


def cjk_ranges() -> list[tuple[int, int]]:
    """The unicode-range of the web font's @font-face in tools/web/attnlab.css (one place for it)."""
    css = SITE_CSS.read_text("utf-8")
    face = re.search(r"@font-face\s*\{[^}]*" + re.escape(WEB_FONT.name) + r"[^}]*\}", css).group()
    ranges = []
    for part in re.search(r"unicode-range:\s*([^;]+);", face).group(1).split(","):
        low, _, high = part.strip().removeprefix("U+").partition("-")
        ranges.append((int(low, 16), int(high or low, 16)))
    return ranges


def shown_text(path: pathlib.Path) -> str:
    """A page's text with entities and JSON escapes (widget state, search data) decoded."""
    raw = path.read_text("utf-8")
    return html.unescape(raw) + "".join(chr(int(code, 16)) for code in re.findall(r"\\u([0-9a-fA-F]{4})", raw))


def site_cjk_characters(lang: str) -> str:
    """The CJK characters (in the web font's range) of one built site, plus the root page for zh."""
    site = HTML / lang
    files = [p for p in site.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts]
    files += sorted((site / "_static").glob("*.js")) + [site / "searchindex.js"]  # UI words (search, copy button)
    if lang == "zh":
        files.append(HTML / "index.html")
    # one character class for the ranges: a page is megabytes of widget state, and a Python test per
    # character took 9 of the build's 51 s
    in_ranges = re.compile("[" + "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in cjk_ranges()) + "]")
    chars = {ch for path in files if path.exists() for ch in in_ranges.findall(shown_text(path))}
    return "".join(sorted(chars))


def write_web_fonts(languages: list[str]) -> None:
    """Each site's CJK web font: exactly the characters its pages show (see tools/web/attnlab.css)."""
    from tools.web_font import MissingGlyphs, make_web_font  # fontTools only: no attnlab, torch or numpy

    for lang in languages:
        chars = site_cjk_characters(lang)
        try:
            written = make_web_font(chars, HTML / lang / WEB_FONT)
        except MissingGlyphs as error:
            raise SystemExit(f"the {lang} site shows characters the CJK font lacks: {error}") from None
        print(f"{lang}/{WEB_FONT.as_posix()}: {written['characters']} characters, {written['bytes'] / 1024:.1f} KiB")
