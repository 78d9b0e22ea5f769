"""Chapter 7's gallery of masks."""

import pytest

import attnlab
from attnlab.figures.mask_gallery import GALLERY, mask_gallery, mask_gallery_figure
from language_checks import assert_message_in_languages


def test_one_frame_per_mask_type():
    attnlab.setup("zh")
    try:
        gallery = mask_gallery(["a", "b", "c", "d", "e"])
    finally:
        attnlab.setup("en")
    control, stack = gallery.children[1], gallery.children[2]
    assert len(control.options) == len(stack.children) == len(GALLERY)
    assert len(mask_gallery_figure(["a", "b", "c", "d"]).axes) == len(GALLERY)


def test_sentences_short_ones_and_own_prefix_and_window_are_accepted():
    assert mask_gallery("The cat sat on the mat").tokens == ["The", "cat", "sat", "on", "the", "mat"]
    short = mask_gallery(["a", "b"])  # prefix and window default to 3, capped at T
    assert (short.prefix, short.window) == (2, 2)
    own = mask_gallery(["a", "b", "c", "d", "e"], prefix=1, window=2)
    assert repr(own) == "MaskGallery(tokens=['a', 'b', 'c', 'd', 'e'], prefix=1, window=2)"
    assert own.children[1].options[2].endswith("LM")  # the toggle names the types


CASES = [  # (call, English words, German words)
    (lambda: mask_gallery(["a"]), ["takes 2 to 12 tokens; got 1"], ["nimmt daher 2 bis 12 Tokens"]),
    (lambda: mask_gallery([str(i) for i in range(13)]), ["got 13"], ["übergeben wurden 13"]),
    (lambda: mask_gallery(["a", "b", "c"], prefix=4), ["prefix must be between 0 and 3; got 4"],
     ["prefix muss zwischen 0 und 3 liegen"]),
    (lambda: mask_gallery(["a", "b", "c"], window=0), ["window must be between 1 and 3; got 0"],
     ["window muss zwischen 1 und 3 liegen"]),
    (lambda: mask_gallery(["a", "b", "c"], window=2.5), ["window must be a whole number"],
     ["window muss eine ganze Zahl sein"]),
    (lambda: mask_gallery(None), ["tokens must be a list of strings"], ["tokens muss eine Liste von Strings sein"]),
]


@pytest.mark.parametrize("call, english, german", CASES)
def test_bad_input_gets_a_clear_message_in_the_readers_language(call, english, german):
    assert_message_in_languages((ValueError, TypeError), call, {"en": english, "de": german})


def test_the_buttons_show_short_names_in_every_language():
    for lang, expected in (("en", "cross-attention"), ("de", "Cross-Attention"), ("zh", "交叉注意力")):
        attnlab.setup(lang)
        try:
            options = mask_gallery(["a", "b", "c"]).children[1].options
        finally:
            attnlab.setup("en")
        assert options[-1] == expected and all(":" not in o and "：" not in o for o in options)
