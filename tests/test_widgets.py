import ipywidgets as widgets
import numpy as np
import pytest
import torch

import attnlab
from attnlab.figures.widgets import mask_explorer, nested_stack, toggle


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
    from attnlab.figures.widgets import head_explorer

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
    from attnlab.figures.widgets import tile_explorer

    explorer = tile_explorer(T=16, blocks=(2, 4, 8))
    stack = explorer.children[2]
    assert len({bytes(image.value) for image in stack.children}) == 3
    assert repr(explorer) == "TileExplorer(T=16, blocks=[2, 4, 8])"


def test_an_own_sentence_gets_its_own_explorer_and_long_ones_a_clear_message():
    from attnlab.figures.widgets import mask_explorer_for

    explorer = mask_explorer_for("模型 不能 偷看 下一个 词")
    assert explorer.tokens == ["模型", "不能", "偷看", "下一个", "词"]
    assert len(explorer.row_control.options) == 1 + 5
    with pytest.raises(ValueError, match="12"):
        mask_explorer_for(" ".join(["x"] * 13))


# --- bad input: one case per message key of the widgets, checked in English and German ---

from attnlab import inputs  # noqa: E402
from attnlab.masks import causal_allowed  # noqa: E402
from attnlab.figures.widgets import head_explorer, mask_explorer_for, tile_explorer  # noqa: E402


from language_checks import message  # noqa: E402


SIX = ["the", "cat", "sat", "on", "the", "mat"]
q6, k6 = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(0)).unbind(0)
heads8 = torch.softmax(torch.randn(8, 6, 6).masked_fill(~causal_allowed(6), float("-inf")), dim=-1)
CASES = [
    ("error.qk_shape", ValueError, lambda: mask_explorer(SIX, torch.stack([q6, q6]), torch.stack([k6, k6])),
     ["q must be [T, d]: one sentence, one head", "(2, 6, 8)", "q[0]"],
     ["q muss die Form [T, d] haben: ein Satz, ein Kopf", "(2, 6, 8)", "q[0]"]),
    ("error.qk_mismatch", ValueError, lambda: mask_explorer(SIX, q6, k6[:5]),
     ["q and k must have the same shape", "(6, 8) and (5, 8)"], ["q und k müssen dieselbe Form", "(6, 8) und (5, 8)"]),
    ("error.tokens_positions", ValueError, lambda: mask_explorer(SIX + ["again"], q6, k6),
     ["7 tokens, but q has 6 positions", "give one token per position"],
     ["7 Tokens, aber q hat 6 Positionen", "Gib ein Token pro Position an"]),
    ("error.explorer_tokens", ValueError, lambda: mask_explorer(["x"] * 13, torch.zeros(13, 2), torch.zeros(13, 2)),
     ["takes 1 to 12 tokens; got 13"], ["nimmt daher 1 bis 12 Tokens; übergeben wurden 13"]),
    ("explorer.too_long", ValueError, lambda: mask_explorer_for(" ".join(["x"] * 13)),
     ["Give 1 to 12 tokens (got 13)"], ["Gib 1 bis 12 Tokens an (es waren 13)"]),
    ("error.tokens_type", TypeError, lambda: mask_explorer_for(42),
     ["sentence must be a list of strings", "got 42"], ["sentence muss eine Liste von Strings sein"]),
    ("error.sentence_type", TypeError, lambda: inputs.split_sentence(["a", "b"]),
     ["Give the sentence as a string"], ["Gib den Satz als String an"]),
    ("error.at_least", ValueError, lambda: mask_explorer_for("a b", d=0),
     ["d must be at least 1; got 0"], ["d muss mindestens 1 sein"]),
    ("error.whole_number", TypeError, lambda: mask_explorer_for("a b", seed="one"),
     ["seed must be a whole number; got 'one'"], ["seed muss eine ganze Zahl sein; übergeben wurde 'one'"]),
    ("error.numbers", TypeError, lambda: mask_explorer(SIX, [["a"]], k6),
     ["q must hold numbers"], ["q muss Zahlen enthalten"]),
    ("error.head_names", ValueError, lambda: head_explorer(SIX, heads8, ["a", "b", "c"]),
     ["8 heads but 3 head names", "one name per head, or none"], ["8 Köpfe, aber 3 Namen", "oder gar keinen"]),
    ("error.weights_shape", ValueError, lambda: head_explorer(SIX, torch.stack([heads8, heads8])),
     ["weights must be [H, T, T]", "(2, 8, 6, 6)"], ["weights muss für einen Satz die Form [H, T, T]"]),
    ("error.heads_range", ValueError, lambda: head_explorer(SIX, torch.cat([heads8, heads8, heads8[:1]])),
     ["shows 1 to 16 heads; got 17"], ["zeigt 1 bis 16 Köpfe; übergeben wurden 17"]),
    ("error.tokens_positions", ValueError, lambda: head_explorer(SIX[:4], heads8),
     ["4 tokens, but weights has 6 positions"], ["4 Tokens, aber weights hat 6 Positionen"]),
    ("error.blocks_empty", ValueError, lambda: tile_explorer(32, ()),
     ["Give at least one block size"], ["Gib mindestens eine Blockgröße an"]),
    ("error.whole_number", TypeError, lambda: tile_explorer(32, (4, 8.5)),
     ["block must be a whole number; got 8.5"], ["block muss eine ganze Zahl sein"]),
    ("error.at_least", ValueError, lambda: tile_explorer(0, 4),
     ["T must be at least 1; got 0"], ["T muss mindestens 1 sein"]),
]


@pytest.mark.parametrize("key, exception, call, english, german", CASES,
                         ids=[f"{case[0]}-{n}" for n, case in enumerate(CASES)])
def test_bad_input_gets_a_clear_message_in_the_readers_language(key, exception, call, english, german):
    for lang, words in (("en", english), ("de", german)):
        text = message(lang, exception, call)
        for word in words:
            assert word in text, (lang, text)


def test_every_widget_error_key_has_a_case():
    import inspect

    import attnlab.figures.widgets

    used = {key for key in attnlab.i18n.catalog() if key.startswith("error.")
            and f'"{key}"' in inspect.getsource(attnlab.figures.widgets)}
    assert used <= {case[0] for case in CASES}, used - {case[0] for case in CASES}


def test_natural_readings_are_accepted():
    batch_of_one = mask_explorer(SIX, q6[None], k6[None, None])  # [1, T, d] and [1, 1, T, d] read as [T, d]
    plain = mask_explorer(SIX, q6, k6)
    assert bytes(batch_of_one.children[4].children[0].children[0].children[0].value) == \
        bytes(plain.children[4].children[0].children[0].children[0].value)
    assert mask_explorer("the cat sat", q6[:3].numpy(), k6[:3].tolist()).tokens == ["the", "cat", "sat"]
    assert mask_explorer_for(["my", "own", "tokens"]).tokens == ["my", "own", "tokens"]
    one_block = tile_explorer(32, 8)
    assert one_block.blocks == [8] and len(one_block.children[2].children) == 1
    assert tile_explorer(16, [4, 4, torch.tensor(8)]).blocks == [4, 8]
    explorer = head_explorer(SIX, heads8[None])  # [1, H, T, T]: a batch of one
    assert len(explorer.head_control.options) == 1 + 8
    assert len(head_explorer(SIX, heads8[0]).head_control.options) == 1 + 1  # [T, T]: one head


# --- Chinese sentences without spaces ---

def test_chinese_without_spaces_is_split_into_words_with_jieba():
    pytest.importorskip("jieba")
    assert inputs.split_sentence("模型不能偷看下一个词") == ["模型", "不能", "偷看", "下", "一个", "词"]
    assert inputs.split_sentence("我爱PyTorch") == ["我", "爱", "PyTorch"]
    assert mask_explorer_for("模型不能偷看下一个词").tokens == ["模型", "不能", "偷看", "下", "一个", "词"]


def test_chinese_without_spaces_falls_back_to_characters_without_jieba(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "jieba", None)  # import jieba now raises ImportError
    assert inputs.split_sentence("模型不能偷看") == ["模", "型", "不", "能", "偷", "看"]
    assert inputs.split_sentence("我爱PyTorch。") == ["我", "爱", "PyTorch", "。"]


def test_spaces_written_by_the_learner_stay_the_token_boundaries():
    assert inputs.split_sentence("模型 不能 偷看 下一个 词") == ["模型", "不能", "偷看", "下一个", "词"]
    assert inputs.split_sentence("  the cat  sat ") == ["the", "cat", "sat"]
    assert inputs.split_sentence("Katze") == ["Katze"]


# --- twelve tokens: every frame, hatching, captions, legibility ---

@pytest.fixture(scope="module")
def explorer12():
    attnlab.setup("de")
    yield mask_explorer_for("das Modell darf das nächste Wort nicht sehen und auch nicht raten")
    attnlab.setup("en")


def test_twelve_tokens_give_every_frame(explorer12):
    images = frames(explorer12)
    assert [len(images), len(images[0]), len(images[0][0])] == [2, 3, 13]
    flat = [png for mask in images for step in mask for png in step]
    assert len(flat) == 2 * 3 * (12 + 1) == 78
    assert all(png.startswith(b"\x89PNG") for png in flat)
    assert len(set(flat)) == len(flat)


def hatched_cells(ax):
    return {(round(p.get_y() + .5), round(p.get_x() + .5)) for p in ax.patches if p.get_hatch()}


def test_hatched_cells_are_exactly_the_blocked_ones_and_only_without_the_mask(explorer12):
    T = len(explorer12.tokens)
    blocked = {(i, j) for i, j in zip(*torch.nonzero(~causal_allowed(T), as_tuple=True))}
    blocked = {(int(i), int(j)) for i, j in blocked}
    axes = explorer12.frames.axes
    assert hatched_cells(axes["leaked"]) == blocked
    assert all(hatched_cells(axes[name]) == set() for name in ("scores", "masked", "weights"))
    assert [explorer12.heatmap(0, step) for step in range(3)] == ["scores", "masked", "weights"]  # mask on
    assert [explorer12.heatmap(1, step) for step in range(3)] == ["scores", "scores", "leaked"]  # mask off
    slow = explorer12.figure(1, 2, 5)  # the same frame drawn as an ordinary figure
    assert hatched_cells(slow.axes[0]) == blocked
    grey = np.isnan(axes["weights"].images[0].get_array().filled(np.nan))
    assert (grey == ~causal_allowed(T).numpy()).all()  # masked weights: grey exactly where blocked


def test_without_the_mask_step_two_does_not_claim_masking(explorer12):
    for lang in ("en", "de"):
        attnlab.set_language(lang)
        try:
            caption = explorer12.caption(1, 1, 0)
            assert caption == attnlab.tr("step.unmasked")
            assert attnlab.tr("step.masked") not in caption
            assert explorer12.caption(0, 1, 0) == attnlab.tr("step.masked")
        finally:
            attnlab.set_language("de")
    assert "Maske aus" in attnlab.tr("step.unmasked", lang="de")


def test_twelve_token_frames_are_legible(explorer12):
    from PIL import ImageFont

    from attnlab.figures.frames import _latin_font_path

    frames_ = explorer12.frames
    cell = (frames_.col_edges[1] - frames_.col_edges[0]) / 12
    for name, panel in explorer12.heatmaps.items():
        size = explorer12._value_fontsize(name)
        assert size == 7.5  # the numbers keep their size: the figure grows instead
        font = ImageFont.truetype(_latin_font_path(), size * 100 / 72)
        assert font.getlength("−0.00") < 0.9 * cell
    assert all(len(line) for line in explorer12.caption(1, 2, 12).split("\n"))
    width_px = frames_.bases["scores"].shape[1]
    for combination in [(1, 2, 12), (0, 2, 12)]:
        for line in explorer12.caption(*combination).split("\n"):
            assert frames_.caption_left + frames_._line(line).shape[1] <= width_px  # wrapped inside the frame
