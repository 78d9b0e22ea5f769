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

import operator
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


# How a reader of each language groups the digits of a whole number. German prose writes
# 65.536, but printed outputs use the decimal point of code (0.125), so there a point would
# be ambiguous: German outputs group with a narrow no-break space (U+202F), as DIN 1333 and
# the SI allow. See docs/authoring.md, "Numbers and labels in outputs".
GROUP_SEPARATOR = {"en": ",", "de": "\u202f", "zh": ","}


def number(n, lang: str | None = None) -> str:
    """A whole number with its digits grouped as the reader's language groups them.

    ``number(65536)`` gives ``65,536`` in English and Chinese and ``65 536`` (a narrow
    no-break space) in German, where ``65,536`` would read as a decimal fraction.
    """
    if isinstance(n, bool):
        raise TypeError(f"number() takes a whole number, not {n!r}")
    value = operator.index(n)  # int, numpy and 0-d torch integers; a float is refused
    return f"{value:,}".replace(",", GROUP_SEPARATOR[lang or _current])


def percent(fraction: float, digits: int = 0, lang: str | None = None) -> str:
    """A fraction as a percentage: ``32%`` in English and Chinese, ``32 %`` in German (narrow no-break space)."""
    text = f"{float(fraction) * 100:.{digits}f}"
    return text + ("\u202f%" if (lang or _current) == "de" else "%")


def _ends_full_width(text: str) -> bool:
    return bool(text) and unicodedata.east_asian_width(text[-1]) in "WF" and unicodedata.category(text[-1])[0] == "P"


def labeled(*parts) -> str:
    """What ``print(*parts)`` prints, without the space after full-width punctuation.

    ``print(labeled(tr("ch1.row_sums"), sums))``: ``row sums: tensor(...)`` in English,
    ``每行之和：tensor(...)`` in Chinese, where ``print("每行之和：", sums)`` would put a
    space after the full-width colon. Every part is shown with ``str()``, as print shows it.
    """
    out = ""
    for i, part in enumerate(parts):
        text = str(part)
        if i and not _ends_full_width(out):
            out += " "
        out += text
    return out


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospaced font: a Chinese character (wide or full-width) takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` filled with spaces up to ``width`` columns (after it, or before it with ``right=True``),
    so that printed columns line up in every language."""
    fill = " " * max(0, width - display_width(text))
    return fill + text if right else text + fill
