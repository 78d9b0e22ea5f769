"""Font Awesome cut to what the pages show: no icon script, icon fonts and rules for the pages' icons.

The theme's Font Awesome script goes (the theme's stylesheet draws the same icons from the web
fonts), and so does the search field's label that hides its visible words; the web fonts and
the icon rules of the theme's stylesheet keep only the icons a page of the site can show.
"""

from __future__ import annotations

import pathlib
import re

from .layout import HTML

FONT_AWESOME_JS = re.compile(r'[ \t]*<script src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>\n?')
# The theme's search field shows "Search Ctrl + K" but is named "Search" (aria-label): a name that
# lacks the visible words fails WCAG 2.5.3 (axe: label-content-name-mismatch). Without the label,
# its name is its visible text.
SEARCH_LABEL = re.compile(r'(<button class="btn search-button-field[^>]*?)\s+aria-label="[^"]*"')


def drop_font_awesome_js(lang: str) -> int:
    """The theme's Font Awesome script (1.5 MB) turns its icons into SVG; the theme's stylesheet
    draws the same icons from Font Awesome's web fonts, which the pages load anyway. Returns the
    number of pages changed."""
    site = HTML / lang
    changed = 0
    for path in site.rglob("*.html"):
        text = path.read_text("utf-8")
        new = SEARCH_LABEL.sub(r"\1", FONT_AWESOME_JS.sub("", text))
        if new != text:
            path.write_text(new, "utf-8")
            changed += 1
    (site / "_static" / "scripts" / "fontawesome.js").unlink(missing_ok=True)
    for extra in (site / "_static" / "scripts").glob("fontawesome.js.*"):
        extra.unlink()
    return changed


ICON_FONTS = pathlib.Path("_static") / "vendor" / "fontawesome" / "webfonts"  # inside each language site
ICON_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:(?::?before|:?after),?)+)\{content:"([^"]*)"\}')
CSS_CONTENT = re.compile(r'(?:content|--[\w-]+):\s*"((?:\\[0-9a-fA-F]{4,5}|[\ue000-\uf8ff])+)"')
ICON_CLASS = re.compile(r"\bfa-[a-z0-9-]+")


def css_characters(value: str) -> set[str]:
    """The characters of a CSS string: ``"\\f09b"`` escapes or the characters themselves."""
    return {chr(int(code, 16)) if code else ch
            for code, ch in re.findall(r"\\([0-9a-fA-F]{4,5})|(.)", value)}


def named_icon_classes(lang: str) -> set[str]:
    """The Font Awesome classes (``fa-github``) that one site's pages and theme scripts name; not
    those of _static/assets/, where the widget manager brings its own Font Awesome 5."""
    site_dir = HTML / lang
    texts = [p for p in site_dir.rglob("*.html") if "_sources" not in p.parts] + \
        [p for p in sorted((site_dir / "_static").rglob("*.js")) if "assets" not in p.relative_to(site_dir).parts]
    return {name for path in texts for name in ICON_CLASS.findall(path.read_text("utf-8", errors="replace"))}


def icon_characters(lang: str) -> set[str]:
    """Every Font Awesome character a page of one site can show: the icon classes its pages and
    scripts name (named_icon_classes), looked up in the theme's icon rules, and every private-use
    character the stylesheets use outside those rules (the theme's admonition and link icons).
    Generous on purpose: a class that a page names but hides still keeps its glyph."""
    css = "".join(path.read_text("utf-8") for path in sorted((HTML / lang / "_static").rglob("*.css")))
    by_class = {}
    for selectors, value in ICON_RULE.findall(css):
        for name in re.findall(r"\.(fa-[a-z0-9-]+)", selectors):
            by_class[name] = css_characters(value)
    chars = {ch for value in CSS_CONTENT.findall(ICON_RULE.sub("", css)) for ch in css_characters(value)}
    for name in named_icon_classes(lang):
        chars |= by_class.get(name, set())
    return {ch for ch in chars if 0xE000 <= ord(ch) <= 0xF8FF}


def cut_font_awesome(lang: str) -> dict[str, int]:
    """Font Awesome 6 of one site cut to the icons its pages can show (icon_characters): its web
    fonts (the theme ships every icon: fa-solid-900.woff2 0.16 MB and fa-brands-400.woff2
    0.12 MB, which a first visit loads; the pages show about twenty) and the icon rules of the
    theme's stylesheet (0.09 MB of pydata-sphinx-theme.css's 0.39 MB, one per icon). The rest of
    Font Awesome's CSS stays: the theme's icons need it. Font Awesome Free's fonts are under the
    SIL OFL 1.1, its CSS under the MIT licence; both allow this. Returns {file: bytes}."""
    from fontTools.ttLib import TTFont

    from tools.web_font import subset_font  # fontTools only

    site_dir = HTML / lang
    chars = "".join(sorted(icon_characters(lang)))
    named = named_icon_classes(lang)
    written = {}
    for path in sorted((site_dir / ICON_FONTS).iterdir()):
        if path.suffix not in (".woff2", ".ttf"):
            continue
        font = TTFont(str(path))
        subset_font(font, chars, flavor="woff2" if path.suffix == ".woff2" else None)
        font.save(str(path))
        written[path.name] = path.stat().st_size
    theme_css = site_dir / "_static" / "styles" / "pydata-sphinx-theme.css"
    text = theme_css.read_text("utf-8")
    kept = ICON_RULE.sub(lambda m: m.group() if set(re.findall(r"\.(fa-[a-z0-9-]+)", m.group(1))) & named else "", text)
    theme_css.write_text(kept, "utf-8")
    written[theme_css.name] = theme_css.stat().st_size
    return written
