"""The site's CJK web font, cut from the package's font subset with fontTools alone.

The site build (tools/site/) calls :func:`make_web_font`; it must not import
``attnlab``, whose package imports torch and numpy: ``make book`` installs only
requirements/site.txt. The subset itself (attnlab/fonts/) is made by
tools/make_font.py, which shares :func:`subset_font`.
"""

from __future__ import annotations

import pathlib

from fontTools import subset

ROOT = pathlib.Path(__file__).resolve().parent.parent
FONT_FILE = "NotoSansSC-attnlab-subset.otf"  # attnlab.figures.fonts.FONT_FILE (a test keeps them equal)
PACKAGE_FONT = ROOT / "attnlab" / "fonts" / FONT_FILE


def subset_font(font, chars: str, flavor: str | None = None):
    """Keep only ``chars`` in ``font`` (in place); ``flavor="woff2"`` for the web. Same input, same bytes."""
    options = subset.Options()
    options.name_IDs = ["*"]
    options.layout_features = ["*"]
    options.hinting = False
    options.desubroutinize = False
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=chars)
    subsetter.subset(font)
    font.recalcTimestamp = False  # keep the source timestamp: same input, same bytes
    font.flavor = flavor
    return font


class MissingGlyphs(RuntimeError):
    """Characters the package's font subset lacks (run ``make font``)."""


def make_web_font(chars: str, out: pathlib.Path) -> dict:
    """Write a WOFF2 holding ``chars``, cut from the package's subset (attnlab/fonts/).

    Raises MissingGlyphs when the subset lacks one of them. Returns what was written
    (characters, bytes) for the build log.
    """
    from fontTools.ttLib import TTFont

    font = TTFont(str(PACKAGE_FONT))
    cmap = font.getBestCmap()
    missing = sorted({ch for ch in chars if ord(ch) not in cmap})
    if missing:
        raise MissingGlyphs(f"{''.join(missing)} ({', '.join(f'U+{ord(ch):04X}' for ch in missing)}) not in "
                            f"attnlab/fonts/{FONT_FILE}: run `make font` (needs Debian's fonts-noto-cjk)")
    subset_font(font, chars, flavor="woff2")
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(out))
    return {"characters": len(set(chars)), "bytes": out.stat().st_size}
