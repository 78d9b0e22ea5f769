"""Rebuild the CJK font subset that the package ships (attnlab/fonts/).

Source: Debian's ``fonts-noto-cjk`` (Noto Sans CJK, SIL OFL 1.1):
    apt-get install fonts-noto-cjk
Keeps every character of the message catalog's Chinese entries, of the
Chinese course text (prose, code comments, alt texts and captions of every
source, the site's own words), the 3500 most frequent Chinese characters of
jieba's dictionary (so that a learner's own sentence renders too) and
full-width punctuation.
Run it again after adding Chinese text; tests fail when a catalog or course
character is missing from the font.

    python tools/make_font.py

The site's CJK web font is cut from this subset by ``tools.web_font.make_web_font``
(called by tools/site/, no Debian font needed, fontTools only): a WOFF2 with
exactly the CJK characters of the built pages.
"""

from __future__ import annotations

import pathlib
import re
import sys

from fontTools.ttLib import TTCollection

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attnlab.figures.fonts import CJK_FAMILY, FONT_FILE, SOURCE_FAMILY  # noqa: E402
from tools.web_font import MissingGlyphs, make_web_font, subset_font  # noqa: E402,F401  (shared with the site build)
from attnlab.i18n import catalog  # noqa: E402

SOURCE = pathlib.Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
LICENSE_SOURCE = pathlib.Path("/usr/share/doc/fonts-noto-cjk/copyright")
OUT_DIR = ROOT / "attnlab" / "fonts"


COMMON_CHARACTERS = 3500
PUNCTUATION = "，。、：；！？（）“”‘’《》【】…—～·"


def common_characters(n: int = COMMON_CHARACTERS) -> set[str]:
    """The n most frequent CJK characters, weighted by jieba's word frequencies."""
    import collections

    import jieba

    frequency: collections.Counter = collections.Counter()
    with open(pathlib.Path(jieba.__file__).parent / "dict.txt", encoding="utf-8") as words:
        for line in words:
            word, count = line.split()[:2]
            for ch in word:
                if "\u4e00" <= ch <= "\u9fff":
                    frequency[ch] += int(count)
    return {ch for ch, _ in frequency.most_common(n)}


def course_text() -> str:
    """The Chinese text of the course: catalog, every source's zh prose, comments, alt texts and captions, site words."""
    from tools import notebooks, site
    from tools.sphinx_ext.attnlab_site import LANGUAGE_NAMES

    parts = [entry["zh"] for entry in catalog().values()]
    parts += [notebooks.reader_text(source, "zh") for source in notebooks.find_sources()]
    parts += [site.TITLES["zh"], LANGUAGE_NAMES["zh"]]
    return "\n".join(parts)


def needed_characters() -> str:
    """Course characters, common characters and punctuation, sorted."""
    chars = {ch for ch in course_text() if ord(ch) > 0x7F} | common_characters() | set(PUNCTUATION)
    return "".join(sorted(chars))


def rename_family(font, family: str) -> None:
    """Give the subset its own family name, so it never shadows an installed Noto."""
    postscript = family.replace(" ", "")
    for record in font["name"].names:
        if record.nameID in (1, 16):
            record.string = family
        elif record.nameID in (3, 4):
            record.string = family + " Regular"
        elif record.nameID == 6:
            record.string = postscript + "-Regular"
    font["CFF "].cff.fontNames = [postscript + "-Regular"]


def main() -> None:
    collection = TTCollection(str(SOURCE))
    font = next(f for f in collection.fonts if f["name"].getDebugName(1) == SOURCE_FAMILY)
    chars = needed_characters()
    subset_font(font, chars)
    rename_family(font, CJK_FAMILY)  # a modified font gets its own name (OFL 1.1, condition 3)
    out = OUT_DIR / FONT_FILE
    font.save(str(out))
    copyright_line = font["name"].getDebugName(0)
    license_text = LICENSE_SOURCE.read_text("utf-8")
    start = license_text.index(" SIL OPEN FONT LICENSE")
    ofl = license_text[start:license_text.index("License: GPL-3+", start)]
    ofl = "\n".join("" if line.strip() == "." else line[1:] for line in ofl.splitlines())
    (OUT_DIR / "OFL.txt").write_text(
        f"{CJK_FAMILY}: a subset of {SOURCE_FAMILY} made by tools/make_font.py from Debian's fonts-noto-cjk.\n"
        f"{copyright_line}\n\n{ofl.strip()}\n", "utf-8")
    print(f"{out.relative_to(ROOT)}: {len(chars)} characters, {out.stat().st_size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
