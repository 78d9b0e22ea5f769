"""The message catalog: every string that code shows to a reader, in en/de/zh.

Strings live in ``messages.toml`` (one table per key, one entry per language)::

    [explorer.title]
    en = "Causal mask explorer"
    de = "Die kausale Maske erkunden"
    zh = "因果掩码探索器"

``tr("explorer.title")`` returns the entry for the current language; keyword
arguments fill ``{placeholders}``. A test checks that every key has all three
languages with the same placeholders.
"""

from __future__ import annotations

import string
import unicodedata
import tomllib
from functools import lru_cache
from importlib import resources

LANGUAGES = ("en", "de", "zh")
_current = "en"


@lru_cache(maxsize=1)
def catalog() -> dict[str, dict[str, str]]:
    """Flat view of messages.toml: ``{"explorer.title": {"en": ..., "de": ..., "zh": ...}}``."""
    raw = tomllib.loads(resources.files("attnlab").joinpath("messages.toml").read_text("utf-8"))
    flat: dict[str, dict[str, str]] = {}

    def walk(prefix: str, table: dict) -> None:
        if any(isinstance(v, str) for v in table.values()):
            flat[prefix] = {lang: text for lang, text in table.items() if isinstance(text, str)}
        for key, value in table.items():
            if isinstance(value, dict):
                walk(f"{prefix}.{key}" if prefix else key, value)

    walk("", raw)
    return flat


def set_language(lang: str) -> None:
    """Choose the language of every later message (en, de or zh)."""
    global _current
    if lang not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, not {lang!r}")
    _current = lang


def get_language() -> str:
    return _current


def tr(key: str, lang: str | None = None, **values) -> str:
    """The message ``key`` in the current (or given) language, placeholders filled."""
    entry = catalog()[key]
    return entry[lang or _current].format(**values)


def placeholders(text: str) -> set[str]:
    """Names of the ``{placeholders}`` in a message."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospaced font: a Chinese character (wide or full-width) takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int) -> str:
    """``text`` followed by spaces up to ``width`` columns, so that printed columns line up in every language."""
    return text + " " * max(0, width - display_width(text))
