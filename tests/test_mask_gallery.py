"""Chapter 7's gallery of masks."""

import pytest

import attnlab
from attnlab.mask_gallery import GALLERY, mask_gallery, mask_gallery_figure


def test_one_frame_per_mask_type_and_a_clear_error():
    attnlab.setup("zh")
    gallery = mask_gallery(["a", "b", "c", "d", "e"])
    control, stack = gallery.children[1], gallery.children[2]
    assert len(control.options) == len(stack.children) == len(GALLERY)
    assert len(mask_gallery_figure(["a", "b", "c", "d"]).axes) == len(GALLERY)
    with pytest.raises(ValueError, match="4 到 12"):
        mask_gallery(["a", "b"])
    attnlab.setup("en")
