import warnings

import pytest
from fontTools.ttLib import TTFont
from matplotlib.figure import Figure

from attnlab import i18n
from attnlab.figures import fonts


def test_every_message_has_all_languages_with_the_same_placeholders():
    catalog = i18n.catalog()
    assert len(catalog) >= 20
    for key, entry in catalog.items():
        assert set(entry) == set(i18n.LANGUAGES), key
        assert all(text.strip() for text in entry.values()), key
        names = {lang: i18n.placeholders(text) for lang, text in entry.items()}
        assert names["de"] == names["en"] == names["zh"], (key, names)


def test_german_and_chinese_messages_are_translated():
    same = [key for key, entry in i18n.catalog().items()
            if (entry["de"] == entry["en"] or entry["zh"] == entry["en"]) and len(entry["en"]) > 12]
    assert same == []


def test_t_uses_current_language_and_fills_placeholders():
    i18n.set_language("de")
    try:
        assert i18n.tr("explorer.mask") == "Maske"
        assert i18n.tr("explorer.sources", token="x", sources="a b") == "„x“ darf lesen: a b"
        assert i18n.tr("explorer.mask", lang="zh") == "掩码"
    finally:
        i18n.set_language("en")
    with pytest.raises(ValueError):
        i18n.set_language("fr")


def test_font_subset_covers_every_chinese_catalog_character():
    cmap = TTFont(fonts.font_path())["cmap"].getBestCmap()
    text = "".join(entry["zh"] for entry in i18n.catalog().values())
    missing = sorted({ch for ch in text if ord(ch) > 0x7F and ord(ch) not in cmap
                      and ch not in "−∞√ᵀ→·✓✗"})  # these come from DejaVu Sans
    assert missing == [], f"run `make font`: missing {''.join(missing)}"


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_drawing_every_message_emits_no_missing_glyph_warning(lang):
    fonts.register_fonts()
    fig = Figure()
    ax = fig.add_subplot()
    for n, entry in enumerate(i18n.catalog().values()):
        ax.text(0, n, entry[lang])
    ax.set_title("−∞ √ ᵀ → · ✓ ✗")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.canvas.draw()  # raises on "Glyph ... missing from font(s)"


def test_font_subset_covers_every_character_of_the_chinese_course_text():
    # The site's CJK web font is cut from this subset (tools/site/), so it must hold
    # every character a Chinese reader sees: prose, code comments, alt texts, captions.
    from tools.make_font import course_text

    cmap = TTFont(fonts.font_path())["cmap"].getBestCmap()
    text = course_text()
    assert "因果掩码" in text and "掩码速查表" in text
    missing = sorted({ch for ch in text if "\u2e80" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef"} - {chr(c) for c in cmap})
    assert missing == [], f"run `make font`: missing {''.join(missing)}"


def test_numbers_percentages_and_labels_are_printed_as_each_language_writes_them():
    assert i18n.number(65536, lang="en") == "65,536" == i18n.number(65536, lang="zh")
    assert i18n.number(65536, lang="de") == "65\u202f536"  # never 65,536: a German reader sees a decimal comma
    assert i18n.number(999, lang="de") == "999"
    assert i18n.percent(0.3199, lang="en") == "32%" and i18n.percent(0.25, digits=1, lang="de") == "25.0\u202f%"
    with pytest.raises(TypeError):
        i18n.number(2.5)
    with pytest.raises(TypeError):
        i18n.number(True)
    assert i18n.labeled("row sums:", [1, 2]) == "row sums: [1, 2]"  # what print(label, value) prints
    assert i18n.labeled("每行之和：", [1, 2]) == "每行之和：[1, 2]"  # no space after a full-width colon
    assert i18n.labeled("  ", "a：", 1, "|", "b：", True) == "   a：1 | b：True"
    assert i18n.pad("参数量", 8, right=True) == "  参数量" and i18n.pad("ab", 4) == "ab  "
