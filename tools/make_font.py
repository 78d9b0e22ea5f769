"""Rebuild the CJK font subset that the package ships (attnlab/fonts/).

Source: Debian's ``fonts-noto-cjk`` (Noto Sans CJK, SIL OFL 1.1):
    apt-get install fonts-noto-cjk
Keeps every character of the message catalog's Chinese entries, the 3500
most frequent Chinese characters of jieba's dictionary (so that a learner's
own sentence renders too) and full-width punctuation.
Run it again after adding Chinese messages; a test fails when a catalog
character is missing from the font.

    python tools/make_font.py
"""

from __future__ import annotations

import pathlib
import re
import sys

from fontTools import subset
from fontTools.ttLib import TTCollection

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attnlab.fonts import CJK_FAMILY, FONT_FILE, SOURCE_FAMILY  # noqa: E402
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


def needed_characters() -> str:
    """Catalog characters, common characters and punctuation, sorted."""
    text = "".join(entry["zh"] for entry in catalog().values())
    chars = {ch for ch in text if ord(ch) > 0x7F} | common_characters() | set(PUNCTUATION)
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
    options = subset.Options()
    options.name_IDs = ["*"]
    options.layout_features = ["*"]
    options.hinting = False
    options.desubroutinize = False
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=chars)
    subsetter.subset(font)
    rename_family(font, CJK_FAMILY)  # a modified font gets its own name (OFL 1.1, condition 3)
    font.recalcTimestamp = False  # keep the source timestamp: same input, same bytes
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
