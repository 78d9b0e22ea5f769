import itertools
import warnings

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation

import attnlab
from attnlab.figures import plotting, tiles
from attnlab.blocked import tile_map
from attnlab.masks import causal_allowed
from attnlab.figures.plotting import draw_matrix, matrix_figure
from attnlab.figures.png import figure_png
from attnlab.figures.tiles import tile_figure
from language_checks import message

TOKENS = "the model must not peek at the next word again and again".split()  # 12




weights4 = torch.full((4, 4), 0.25)
# One case per message key of matrix_figure, draw_matrix, figure_png and tile_figure:
# (key, exception, call, words the English message holds, words the German message holds).
CASES = [
    ("error.kind", ValueError, lambda: matrix_figure([dict(matrix=weights4, kind="weight")], TOKENS[:4]),
     ["kind must be one of 'scores', 'weights', 'allowed'", "'weight'"],
     ["kind muss einer dieser Werte sein", "'weight'"]),
    ("error.tokens_per_key", ValueError, lambda: matrix_figure([dict(matrix=weights4)], TOKENS[:6]),
     ["shape (4, 4)", "needs 4 tokens, one per column", "got 6"],
     ["Form (4, 4)", "braucht daher 4 Tokens", "übergeben wurden 6"]),
    ("error.more_queries", ValueError, lambda: matrix_figure([dict(matrix=torch.zeros(5, 3))], TOKENS[:3]),
     ["5 rows (queries) but only 3 columns (keys)"], ["5 Zeilen (Queries), aber nur 3 Spalten (Keys)"]),
    ("error.matrix_2d", ValueError, lambda: matrix_figure([dict(matrix=weights4[None])], TOKENS[:4]),
     ["must be a 2-D table", "(1, 4, 4)"], ["muss eine 2-D-Tabelle", "(1, 4, 4)"]),
    ("error.numbers", TypeError, lambda: matrix_figure([dict(matrix=[["a", "b"], ["c", "d"]])], TOKENS[:2]),
     ["matrix must hold numbers"], ["matrix muss Zahlen enthalten"]),
    ("error.same_shape", ValueError,
     lambda: matrix_figure([dict(matrix=weights4, allowed=causal_allowed(6))], TOKENS[:4]),
     ["allowed must have the shape of the matrix, (4, 4); got (6, 6)"],
     ["allowed muss dieselbe Form wie die Matrix haben, also (4, 4); übergeben wurde (6, 6)"]),
    ("error.between", ValueError, lambda: matrix_figure([dict(matrix=weights4, highlight_row=4)], TOKENS[:4]),
     ["highlight_row must be between 0 and 3; got 4"], ["highlight_row muss zwischen 0 und 3 liegen"]),
    ("error.whole_number", TypeError, lambda: matrix_figure([dict(matrix=weights4, highlight_row=1.5)], TOKENS[:4]),
     ["highlight_row must be a whole number; got 1.5"], ["highlight_row muss eine ganze Zahl sein"]),
    ("error.panel_type", TypeError, lambda: matrix_figure([weights4], TOKENS[:4]),
     ["Each panel must be a dict", "Tensor (4, 4)"], ["Jedes Panel muss ein dict sein", "Tensor (4, 4)"]),
    ("error.panel_key", TypeError, lambda: matrix_figure([dict(matrix=weights4, titel="x")], TOKENS[:4]),
     ["no setting 'titel'", "title"], ["kennt die Einstellung 'titel' nicht", "title"]),
    ("error.panel_matrix", TypeError, lambda: matrix_figure([dict(kind="weights")], TOKENS[:4]),
     ["Each panel needs a matrix"], ["Jedes Panel braucht eine Matrix"]),
    ("error.panels", TypeError, lambda: matrix_figure([], TOKENS[:4]),
     ["panels must be a list of dicts"], ["panels muss eine Liste von dicts sein"]),
    ("error.positive", ValueError, lambda: matrix_figure([dict(matrix=weights4)], TOKENS[:4], height=0),
     ["height must be a positive number; got 0"], ["height muss eine positive Zahl sein"]),
    ("error.axes_rects", ValueError,
     lambda: matrix_figure([dict(matrix=weights4)], TOKENS[:4], axes_rects=[(0, 0, 1, 1)] * 2),
     ["one rectangle per panel (1); got 2"], ["ein Rechteck pro Panel (1); übergeben wurden 2"]),
    ("error.tokens_type", TypeError, lambda: matrix_figure([dict(matrix=weights4)], 4),
     ["tokens must be a list of strings", "got 4"], ["tokens muss eine Liste von Strings sein"]),
    ("error.figure", TypeError, lambda: figure_png(weights4),
     ["Expected a matplotlib Figure; got Tensor (4, 4)"], ["Erwartet wird eine matplotlib-Figure"]),
    ("error.at_least", ValueError, lambda: tile_figure(32, 0),
     ["block must be at least 1; got 0"], ["block muss mindestens 1 sein; übergeben wurde 0"]),
    ("error.tiles_per_side", ValueError, lambda: tile_figure(4096, 8),
     ["512 tiles per side", "at least 64"], ["512 Kacheln pro Seite", "mindestens 64"]),
]


@pytest.mark.parametrize("key, exception, call, english, german", CASES, ids=[case[0] for case in CASES])
def test_bad_input_gets_a_clear_message_in_the_readers_language(key, exception, call, english, german):
    for lang, words in (("en", english), ("de", german)):
        text = message(lang, exception, call)
        for word in words:
            assert word in text, (lang, text)
    assert message("zh", exception, call) != message("en", exception, call)


def test_every_plotting_error_key_has_a_case():
    import inspect

    keys = set()
    for module in (plotting, attnlab.inputs):
        keys |= {key for key in attnlab.i18n.catalog() if key.startswith("error.") and f'"{key}"' in
                 inspect.getsource(module)}
    from test_wrong_inputs import CASES as WRONG_INPUTS  # inputs.as_allowed_mask: tested with forward_with_mask

    covered = {case[0] for case in CASES} | {"error.sentence_type"}  # tested with the widgets
    covered |= {f"error.{case[0]}" for case in WRONG_INPUTS}
    assert keys <= covered, keys - covered


def test_natural_readings_are_accepted():
    one = matrix_figure(dict(matrix=weights4, kind="weights"), "the model must not")  # one panel, a sentence
    assert [tick.get_text() for tick in one.axes[0].get_xticklabels()] == ["0 the", "1 model", "2 must", "3 not"]
    fewer_queries = matrix_figure([dict(matrix=torch.zeros(2, 4))], TOKENS[:4])  # queries are the last positions
    assert [tick.get_text() for tick in fewer_queries.axes[0].get_yticklabels()] == ["2 must", "3 not"]
    numpy_and_lists = matrix_figure([dict(matrix=np.eye(2), kind="allowed"), dict(matrix=[[1, 0], [0.5, 0.5]])],
                                    ["a", "b"])
    assert len(numpy_and_lists.axes) == 2


def rendered(fig):
    """Draw ``fig`` with Agg and return the renderer (for window extents)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def overlaps(boxes):
    return [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]


@pytest.mark.parametrize("n", [6, 12])
def test_labels_and_numbers_do_not_overlap(n):
    attnlab.setup("de")
    tokens = "das Modell darf das nächste Wort nicht sehen und auch nicht raten".split()[:n]
    scores = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    fig = matrix_figure([dict(matrix=scores, kind="scores", title="1 · Scores"),
                         dict(matrix=scores.softmax(-1), kind="weights", title="3 · Softmax")], tokens)
    renderer = rendered(fig)
    for ax in fig.axes:
        numbers = [text for text in ax.texts if not isinstance(text, Annotation)]  # the caption is one
        assert overlaps([text.get_window_extent(renderer) for text in numbers]) == []
        assert overlaps([tick.get_window_extent(renderer).shrunk(0.98, 0.9) for tick in ax.get_yticklabels()]) == []
        # column labels are rotated by 60 degrees: neighbours are sin(60°) x their spacing apart
        x = ax.transData.transform([(0, 0), (1, 0)])[:, 0]
        height = ax.get_xticklabels()[0].get_fontsize() * fig.dpi / 72
        assert (x[1] - x[0]) * np.sin(np.pi / 3) >= height
        assert len(numbers) == (n * n if n == 6 else 0)  # 12 tokens in 3.2-inch panels: no numbers
    attnlab.setup("en")


def test_long_captions_wrap_inside_the_figure():
    attnlab.setup("en")
    caption = "“again” may read: " + " ".join(TOKENS)
    fig = matrix_figure([dict(matrix=torch.eye(12), kind="weights", title=caption)], TOKENS, width_per_panel=4)
    renderer = rendered(fig)
    text = fig.axes[0].texts[-1]
    assert "\n" in text.get_text()
    assert fig.bbox.contains(*text.get_window_extent(renderer).p1)


def test_short_token_and_wrap_text():
    assert plotting.short_token("Aufmerksamkeitsmechanismus") == "Aufmerksamk…"
    assert plotting.short_token("注意力机制的掩码矩阵") == "注意力机制…"
    assert plotting.short_token("cat") == "cat"
    assert plotting.wrap_text("a b c", 1e6) == "a b c"
    four = plotting.text_size("aaaa", plotting.CAPTION_FONTSIZE)[0]
    assert plotting.wrap_text("aaaa bbbb", four + 1) == "aaaa\nbbbb"
    assert plotting.wrap_text("aaaaaaaa", four + 1) == "aaaa\naaaa"  # too long on its own: cut


def tile_cells(fig, T):
    """Per element (q, k): is it hatched, and is it inside a skipped tile?"""
    ax = fig.axes[0]
    centres = [(k + .5, q + .5) for q in range(T) for k in range(T)]
    hatched = np.zeros(T * T, dtype=bool)
    for patch in ax.patches:
        if patch.get_hatch():
            hatched |= patch.get_path().contains_points(centres, transform=patch.get_patch_transform())
    return hatched.reshape(T, T)


@pytest.mark.parametrize("T, block", [(16, 4), (10, 4), (12, 1), (8, 16), (32, 8)])
def test_tile_figure_hatches_exactly_the_blocked_elements_of_diagonal_tiles(T, block):
    hatched = tile_cells(tile_figure(T, block), T)
    kinds = tile_map(T, block)
    skipped = np.array([[kinds[q // block][k // block] == "skipped" for k in range(T)] for q in range(T)])
    blocked = ~causal_allowed(T).numpy()
    assert (hatched == (blocked & ~skipped)).all()
    assert ((hatched | skipped) == blocked).all()  # every blocked element is hatched or in a skipped tile


@pytest.mark.parametrize("lang", ["en", "de", "zh"])
def test_tile_legend_and_title_are_fully_visible_at_every_block_size(lang):
    attnlab.setup(lang)
    for block in (1, 2, 4, 8, 16, 32):
        fig = tile_figure(32, block, attnlab.tr("tiles.caption", T=32, block=block, full=28, diagonal=8, skipped=28))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no missing glyphs
            renderer = rendered(fig)
        inside = fig.bbox.padded(-1)
        for artist in (fig.legends[0], fig._suptitle):
            box = artist.get_window_extent(renderer)
            assert inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1), (lang, block, artist)
        ax = fig.axes[0]
        assert len(ax.get_xticks()) <= tiles.MAX_TILE_NUMBERS
        assert ax.get_xticks()[0] == 0 and ax.get_xticks()[-1] == 32
    attnlab.setup("en")


def test_tile_ticks_are_tile_boundaries_and_few():
    assert tiles.tile_ticks(32, 4) == [0, 4, 8, 12, 16, 20, 24, 28, 32]  # 8 tiles: every boundary
    assert tiles.tile_ticks(32, 2) == [0, 4, 8, 12, 16, 20, 24, 28, 32]  # 16 tiles: every second
    for T, block in [(200, 16), (4096, 64), (100, 3), (7, 2)]:
        ticks = tiles.tile_ticks(T, block)
        assert ticks[0] == 0 and ticks[-1] == T and len(ticks) <= tiles.MAX_TILE_NUMBERS
        assert all(t % block == 0 for t in ticks[:-1]) and ticks == sorted(set(ticks))


def test_draw_matrix_on_a_learners_own_axes():
    fig = Figure(figsize=(4, 4))
    draw_matrix(fig.add_subplot(), torch.eye(3), ["a", "b", "c"], kind="weights", title="x")
    assert len(fig.axes[0].texts) == 9 + 1  # numbers + caption
    assert figure_png(fig).startswith(b"\x89PNG")
