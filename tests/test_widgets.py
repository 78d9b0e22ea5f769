import ipywidgets as widgets
import pytest
import torch

import attnlab
from attnlab.widgets import mask_explorer, nested_stack, toggle


def links_to(links, stack):
    return [link for link in links if link.target == (stack, "selected_index")]


def test_nested_stack_links_every_level_to_its_control():
    a, b = toggle(["x", "y"]), toggle(["1", "2", "3"])
    stack, links = nested_stack([a, b], lambda i, j: widgets.Label(f"{i}{j}"))
    assert len(links) == 1 + 2
    assert len(stack.children) == 2 and all(len(c.children) == 3 for c in stack.children)
    assert stack.children[1].children[2].value == "12"
    assert [link.source for link in links_to(links, stack)] == [(a, "index")]
    assert all([link.source for link in links_to(links, inner)] == [(b, "index")] for inner in stack.children)


@pytest.fixture(scope="module")
def explorer():
    attnlab.setup("zh")
    tokens = attnlab.tokens()
    q, k = torch.randn(2, len(tokens), 8).unbind(0)
    yield mask_explorer(tokens, q, k)
    attnlab.setup("en")


def frames(explorer):
    stack = explorer.children[4]
    return [[[bytes(image.value) for image in rows.children] for rows in steps.children] for steps in stack.children]


def test_explorer_prerenders_every_combination_as_distinct_small_pngs(explorer):
    images = frames(explorer)
    assert [len(images), len(images[0]), len(images[0][0])] == [2, 3, 7]  # mask x step x (all + 6 rows)
    flat = [png for mask in images for step in mask for png in step]
    assert all(png.startswith(b"\x89PNG") for png in flat)
    assert len(set(flat)) == len(flat)  # every frame differs (captions name step, row and mask)
    assert max(map(len, flat)) < 40_000


def test_explorer_controls_are_localized_and_linked_in_the_browser(explorer):
    assert explorer.mask_control.options == ("开", "关")
    assert explorer.row_control.options[0] == "全部"
    assert explorer.row_control.options[1] == "0 那只"
    stack = explorer.children[4]
    assert len(explorer.links) == 1 + 2 + 2 * 3
    assert [link.source for link in links_to(explorer.links, stack)] == [(explorer.mask_control, "index")]
    for steps in stack.children:
        assert [link.source for link in links_to(explorer.links, steps)] == [(explorer.step_control, "index")]
        for rows in steps.children:
            assert [link.source for link in links_to(explorer.links, rows)] == [(explorer.row_control, "index")]
    assert repr(explorer) == "MaskExplorer(tokens=['那只', '猫', '坐', '在', '垫子', '上'])"


def test_head_explorer_has_a_grid_frame_and_one_frame_per_head():
    from attnlab.multihead import hand_built_heads
    from attnlab.widgets import head_explorer

    attnlab.setup("de")
    module, x = hand_built_heads(6)
    explorer = head_explorer(attnlab.tokens(), module.weights(x)[0])
    attnlab.setup("en")
    stack = explorer.children[2]
    pngs = [bytes(image.value) for image in stack.children]
    assert len(pngs) == 1 + 4 and len(set(pngs)) == 5
    assert explorer.head_control.options == ("alle Köpfe", "Kopf 0", "Kopf 1", "Kopf 2", "Kopf 3")
    assert [link.source for link in explorer.links] == [(explorer.head_control, "index")]


def test_tile_explorer_shows_one_picture_per_block_size():
    from attnlab.widgets import tile_explorer

    explorer = tile_explorer(T=16, blocks=(2, 4, 8))
    stack = explorer.children[2]
    assert len({bytes(image.value) for image in stack.children}) == 3
    assert repr(explorer) == "TileExplorer(T=16, blocks=[2, 4, 8])"


def test_an_own_sentence_gets_its_own_explorer_and_long_ones_a_clear_message():
    from attnlab.widgets import mask_explorer_for

    explorer = mask_explorer_for("模型 不能 偷看 下一个 词")
    assert explorer.tokens == ["模型", "不能", "偷看", "下一个", "词"]
    assert len(explorer.row_control.options) == 1 + 5
    with pytest.raises(ValueError, match="12"):
        mask_explorer_for(" ".join(["x"] * 13))
