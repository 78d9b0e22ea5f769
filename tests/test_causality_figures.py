"""Figures and the explorer of chapters 4 and 5 (attnlab.figures.causality)."""

import numpy as np
import pytest
import torch
from matplotlib.patches import Rectangle

import attnlab
from attnlab.causality import TESTS, dependence_map, example_tokens
from attnlab.figures.causality import (causality_explorer, leak_map_figure, leak_table, loss_curves_figure,
                                       moving_average, verdict)
from attnlab.gpt import GPT, GPTConfig
from attnlab.leaky import leaky_gpt


def test_moving_average_is_shorter_at_the_start():
    assert np.allclose(moving_average([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    assert np.allclose(moving_average([5.0] * 7, 3), 5.0)


def test_loss_curves_have_localized_labels():
    attnlab.setup("de")
    try:
        fig = loss_curves_figure([3.0, 2.0, 1.5], [3.0, 1.0, 0.1], honest=6.5, window=2)
        labels = fig.axes[0].get_legend_handles_labels()[1]
        assert labels == ["mit kausaler Maske", "ohne Maske (sieht die Antwort)", "ohne Maske, Token für Token: 6.50"]
        assert fig.axes[0].get_xlabel() == "Trainingsschritt"
    finally:
        attnlab.setup("en")


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    causal = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=1, n_head=2, n_embd=16)).eval()
    return {"causal": causal, "conv": leaky_gpt("lookahead_conv", causal)}


def test_leaks_are_hatched_and_verdicts_name_the_first_pair(models):
    idx = example_tokens(models["causal"], T=6)
    leak_map = dependence_map(models["conv"], idx)
    fig = leak_map_figure(leak_map, "x", atol=1e-5)
    hatched = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_hatch()]
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert len(hatched) == int(((leak_map > 1e-5) & future).sum()) > 0
    assert verdict("prefix", leak_map) == "prefix test: leak, output 0 depends on the later input 1"
    # the cut test cannot name the later position, only where the sequence was cut
    assert verdict("cut", leak_map).endswith(": leak, output 0 changes when the sequence is cut before position 1")
    assert verdict("jacobian", torch.zeros(6, 6)) == "Jacobian test: causal, nothing above the diagonal"


def test_explorer_prerenders_every_model_and_test(models):
    idx = example_tokens(models["causal"], T=6)
    explorer = causality_explorer(models, idx)
    stack = explorer.children[3]
    frames = [bytes(image.value) for per_model in stack.children for image in per_model.children]
    assert len(frames) == len(models) * len(TESTS) and len(set(frames)) == len(frames)
    assert all(png.startswith(b"\x89PNG") and len(png) < 40_000 for png in frames)
    assert explorer.model_control.options == ("causal", "conv")
    assert len(explorer.links) == 1 + len(models)
    assert repr(explorer) == "CausalityExplorer(models=['causal', 'conv'], tests=['prefix', 'cut', 'jacobian'])"


def test_the_table_aligns_chinese_labels(models):
    idx = example_tokens(models["causal"], T=6)
    explorer = causality_explorer(models, idx)
    attnlab.setup("zh")
    try:
        lines = leak_table({"因果": explorer.maps["causal"], "卷积": explorer.maps["conv"]}).splitlines()
    finally:
        attnlab.setup("en")
    assert lines[1].split() == ["因果", "-", "-", "-"]
    assert lines[2].split() == ["卷积", "(0,", "1)", "(0,", "1)", "(0,", "1)"]
    width = lambda text: sum(2 if "\u4e00" <= c <= "\u9fff" else 1 for c in text)
    assert len({width(line) for line in lines}) == 1  # every row ends in the same column
