"""The theme's own words on the German and Chinese pages.

Sphinx, pydata-sphinx-theme and sphinx-book-theme translate most of what they write, but not all:
pydata-sphinx-theme ships no German catalog (its colour-mode switcher, "Back to top", "Skip to
main content", the labels of its navigation), some labels are typed into the templates
("Toggle primary sidebar"), sphinx-book-theme's launch buttons have no German or Chinese, Sphinx's
German and Chinese catalogs lack "Link to this heading", and sphinx-book-theme's German download
button says "Sie" where the course says "du". A German or Chinese reader would meet these as
tooltips, in a screen reader or as text. After each build they are replaced in the pages'
attributes (title, aria-label, data-bs-title, alt) and text; tests/test_site_words.py compares the
tooltips and labels of six kinds of page with the English page's, so a word the theme adds later is found.
"""

from __future__ import annotations

import html
import re

from .layout import HTML

THEME_WORDS = {
    "de": {
        "Back to top": "Nach oben",
        "Skip to main content": "Zum Hauptinhalt springen",
        "Color mode": "Farbmodus",
        "Light": "Hell",
        "Dark": "Dunkel",
        "System Settings": "Systemeinstellung",
        "Launch interactive content": "Interaktiv starten",
        "Launch on Binder": "Auf Binder starten",
        "Launch on Colab": "In Colab starten",
        "Binder logo": "Binder-Logo",
        "Colab logo": "Colab-Logo",
        "Link to this heading": "Link zu dieser Überschrift",
        "Link to this image": "Link zu diesem Bild",
        "Main": "Hauptnavigation",
        "Page": "Vorherige und nächste Seite",
        "Toggle primary sidebar": "Linke Seitenleiste ein- oder ausblenden",
        "Toggle secondary sidebar": "Rechte Seitenleiste ein- oder ausblenden",
        "Version warning": "Versionshinweis",
        "previous page": "vorherige Seite",
        "next page": "nächste Seite",
        # sphinx-book-theme's own German speaks to the reader with "Sie"; the course says "du"
        "Laden Sie diese Seite herunter": "Diese Seite herunterladen",
    },
    "zh": {
        "Color mode": "颜色模式",
        "System Settings": "跟随系统",
        "Launch interactive content": "交互式运行",
        "Launch on Binder": "在 Binder 上运行",
        "Launch on Colab": "在 Colab 中运行",
        "Binder logo": "Binder 标志",
        "Colab logo": "Colab 标志",
        "Link to this heading": "指向此标题的链接",
        "Link to this image": "指向此图片的链接",
        "Main": "主导航",
        "Page": "翻页导航",
        "Toggle primary sidebar": "显示或隐藏左侧边栏",
        "Toggle secondary sidebar": "显示或隐藏右侧边栏",
        "Version warning": "版本提示",
    },
}
ATTRIBUTES = ("title", "aria-label", "data-bs-title", "alt")
TEXT_WORDS = ("Back to top", "Skip to main content")  # the only ones written as text (short ones like "Dark"
# could be a table cell or code of a page, so they are replaced in attributes alone)


def localize_text(text: str, words: dict[str, str]) -> str:
    """``text`` (a page) with each English theme word replaced where it is a whole attribute value, and
    the TEXT_WORDS where they are a whole text node (surrounding white space kept)."""
    escaped = {html.escape(english, quote=True): html.escape(word, quote=True) for english, word in words.items()}
    alternatives = "|".join(re.escape(english) for english in sorted(escaped, key=len, reverse=True))
    attribute = re.compile(rf'(\b(?:{"|".join(ATTRIBUTES)})=")({alternatives})(")')
    texts = "|".join(re.escape(english) for english in TEXT_WORDS if english in escaped) or "(?!)"
    text_node = re.compile(rf"(>\s*)({texts})(\s*<)")
    text = attribute.sub(lambda m: m.group(1) + escaped[m.group(2)] + m.group(3), text)
    return text_node.sub(lambda m: m.group(1) + escaped[m.group(2)] + m.group(3), text)


def localize_theme_words(lang: str) -> int:
    """Rewrite every page of ``lang``'s site; returns how many pages changed."""
    words = THEME_WORDS.get(lang)
    if not words:
        return 0
    changed = 0
    for page in (HTML / lang).rglob("*.html"):
        before = page.read_text("utf-8")
        after = localize_text(before, words)
        if after != before:
            page.write_text(after, "utf-8")
            changed += 1
    return changed
