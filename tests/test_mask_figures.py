"""Chapter 8's figures and explorer: block kinds from a BlockMask, frames, clear errors."""

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

import attnlab
from attnlab.blocked import tile_map
from attnlab.mask_builder import build_mask, mask_mod
from attnlab.figures.masks import (block_kinds, blocks_figure, mask_combination_explorer, reach_figure,
                                  tile_kinds_as_blocks)


def test_block_kinds_of_the_causal_rule_are_chapter_3s_tiles():
    for T, block in ((32, 8), (48, 16)):
        block_mask = create_block_mask(mask_mod("causal"), 1, None, T, T, device="cpu", BLOCK_SIZE=block)
        assert block_kinds(block_mask) == tile_kinds_as_blocks(T, block)
        names = {"full": "full", "partial": "diagonal", "empty": "skipped"}
        assert [[names[k] for k in row] for row in block_kinds(block_mask)] == tile_map(T, block)


def test_figures_draw():
    kinds = tile_kinds_as_blocks(16, 4)
    fig = blocks_figure([{"kinds": kinds, "allowed": build_mask("causal", 16), "title": "x"}], 4)
    assert len(fig.axes) == 1
    assert len(reach_figure([build_mask("causal", 5)] * 2, ["1", "2"]).axes) == 2


def test_explorer_frames_and_counts():
    explorer = mask_combination_explorer(lengths=(4, 2), documents=((0, 0, 1, 1), (0, 0)), window=2, prefix=1)
    assert repr(explorer) == "MaskCombinationExplorer(lengths=[4, 2], window=2, prefix=1)"
    allowed, keep, labels = explorer.mask(0, 1)  # causal, left padding
    assert labels[1] == ["·", "·", "A1", "A2"] and (~allowed[1, 0].any(-1)).sum() == 2
    forgotten, _, _ = explorer.mask(0, 2)  # the padding mask forgotten: real queries read the pads
    assert forgotten[1, 0, 3, :2].all() and not allowed[1, 0, 3, :2].any()
    documents, _, _ = explorer.mask(1, 2)  # documents, mask forgotten: pads have their own id
    assert not documents[1, 0, 2:, :2].any()


def test_explorer_refuses_bad_input_in_the_readers_language():
    with pytest.raises(ValueError, match="one document id per token"):
        mask_combination_explorer(lengths=(3,), documents=((0, 0),))
    try:
        attnlab.set_language("de")
        with pytest.raises(ValueError, match="Dokument-ID"):
            mask_combination_explorer(lengths=(3,), documents=((0, 0),))
    finally:
        attnlab.set_language("en")
    with pytest.raises(ValueError, match="window"):
        mask_combination_explorer(lengths=(3,), documents=((0, 0, 0),), window=0)


def test_reach_figure_takes_nested_lists_and_one_matrix():
    assert len(reach_figure([[[True, False], [True, True]]], ["1"]).axes) == 1
    assert len(reach_figure(build_mask("causal", 4), ["1"]).axes) == 1
    with pytest.raises(ValueError, match="reach"):
        reach_figure([[True, False]], ["1"])  # one row: not a [T, T] table
