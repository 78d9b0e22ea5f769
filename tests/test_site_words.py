"""The theme's own words (tooltips, labels for screen readers, "Skip to main content") in the
reader's language on the German and Chinese sites (tools/site/theme_words.py)."""

import re

import pytest

from tools.site.theme_words import TEXT_WORDS, THEME_WORDS, localize_text

LABELS = re.compile(r'\b(?:title|aria-label|data-bs-title|alt|placeholder)="([^"]*)"')
# Words that are the same in every language: names of services and licences, key names, symbols.
SAME_IN_EVERY_LANGUAGE = {"Binder", "Colab", "Ctrl", "K", "MIT", "CC BY 4.0", "SIL OFL 1.1", "GitHub"}
KINDS = ["chapters/{lang}/index.html", "chapters/{lang}/06-kv-cache.html", "chapters/{lang}/cheatsheet.html",
         "exercises/{lang}/12-decoding-faster.html", "solutions/{lang}/01-causal-mask.html", "search.html"]


def labels(path):
    return set(LABELS.findall(path.read_text("utf-8")))


@pytest.mark.parametrize("lang", ["de", "zh"])
def test_no_tooltip_or_label_of_the_theme_stays_english(html_root, lang):
    english = {kind: labels(html_root / "en" / kind.format(lang="en")) for kind in KINDS}
    same = {kind: sorted(english[kind] & labels(html_root / lang / kind.format(lang=lang)) - SAME_IN_EVERY_LANGUAGE)
            for kind in KINDS}
    assert {kind: words for kind, words in same.items() if words} == {}, "add them to THEME_WORDS"


def test_the_german_site_says_du_in_the_themes_labels_too(html_root):
    text = (html_root / "de" / "chapters" / "de" / "06-kv-cache.html").read_text("utf-8")
    assert re.findall(r'(?:title|aria-label|data-bs-title)="[^"]*\bSie\b[^"]*"', text) == []


@pytest.mark.parametrize("lang", ["de", "zh"])
def test_no_english_theme_word_is_left_as_text(html_root, lang):
    text = (html_root / lang / "chapters" / lang / "06-kv-cache.html").read_text("utf-8")
    assert [word for word in TEXT_WORDS if re.search(rf">\s*{re.escape(word)}\s*<", text)] == []


def test_only_whole_labels_and_text_nodes_are_replaced():
    page = ('<nav aria-label="Main"><a title="next page">x</a></nav><p>The Main idea: next page</p>'
            '<span>\n  Back to top\n</span><code>Dark</code><p title="Dark mode">Light</p>')
    assert localize_text(page, THEME_WORDS["de"]) == (
        '<nav aria-label="Hauptnavigation"><a title="nächste Seite">x</a></nav><p>The Main idea: next page</p>'
        '<span>\n  Nach oben\n</span><code>Dark</code><p title="Dark mode">Light</p>')
