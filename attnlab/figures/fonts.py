"""Fonts for figures: Chinese labels need a CJK font, or matplotlib draws boxes.

The package ships a subset of Noto Sans CJK SC, renamed to ``attnlab Noto Sans SC`` (SIL Open Font License, see
``fonts/OFL.txt``) that holds exactly the CJK characters of the message
catalog; ``tools/make_font.py`` rebuilds it. Latin text keeps DejaVu Sans
(matplotlib's own font); CJK glyphs fall back to the subset.
"""

from __future__ import annotations

from importlib import resources

import matplotlib
from matplotlib import font_manager

FONT_FILE = "NotoSansSC-attnlab-subset.otf"
CJK_FAMILY = "attnlab Noto Sans SC"
SOURCE_FAMILY = "Noto Sans CJK SC"


def font_path() -> str:
    return str(resources.files("attnlab").joinpath("fonts", FONT_FILE))


def register_fonts() -> None:
    """Make the bundled CJK subset known to matplotlib and use it as fallback."""
    path = font_path()
    if path not in {f.fname for f in font_manager.fontManager.ttflist}:
        font_manager.fontManager.addfont(path)
    # An explicit family list: matplotlib falls back glyph by glyph along it.
    matplotlib.rcParams["font.family"] = ["DejaVu Sans", CJK_FAMILY]
    matplotlib.rcParams["axes.unicode_minus"] = True
