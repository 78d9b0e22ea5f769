import numpy as np
import pytest

import attnlab
from attnlab.ring import LAYOUTS, JobResult, RankReport, RingJob, expected_tiles
from attnlab.figures.ring import layout_figure, pair_grid, ring_explorer, tiles_per_rank_and_step, timeline_figure


def test_pair_grid_covers_every_pair_once_and_computes_the_whole_lower_triangle():
    T = 16
    for layout in LAYOUTS:
        rank_of, step_of, fate = pair_grid(T, 4, layout, 2)
        lower = np.tril(np.ones((T, T), dtype=bool))
        assert (fate[lower] == 2).all()  # every allowed pair is computed
        assert (fate[~lower] < 2).all()  # no future pair counts as allowed
        assert set(np.unique(rank_of)) == {0, 1, 2, 3} and set(np.unique(step_of)) == {0, 1, 2, 3}


def test_bars_count_the_formula():
    for layout in LAYOUTS:
        assert tiles_per_rank_and_step(16, 4, layout, 2).tolist() == expected_tiles(16, 4, layout, 2)


def test_explorer_has_a_distinct_small_frame_per_layout_and_step_linked_in_the_browser():
    attnlab.setup("de")
    try:
        explorer = ring_explorer(T=16, P=4, block=2)
    finally:
        attnlab.setup("en")
    stack = explorer.children[3]
    pngs = [bytes(image.value) for layout in stack.children for image in layout.children]
    assert len(pngs) == 3 * (1 + 4) and len(set(pngs)) == len(pngs)
    assert max(map(len, pngs)) < 40_000
    assert explorer.layout_control.options == ("zusammenhängend", "gestreift", "Zickzack")
    assert explorer.step_control.options == ("alle Schritte", "0", "1", "2", "3")
    assert len(explorer.links) == 1 + 3
    assert repr(explorer) == "RingExplorer(T=16, P=4, block=2, layouts=['contiguous', 'striped', 'zigzag'])"


def test_timeline_and_layout_figures_draw_without_processes():
    job = RingJob(T=16)
    ranks = [RankReport(job, r, [], [[(0.0, 0.001 * (r + 1), 0.001 * (r + 1) + 0.0002)] * 2]) for r in range(2)]
    fig = timeline_figure([JobResult(job, ranks)])
    assert len(fig.axes) == 1
    assert len(layout_figure(16, 4).axes) == 3


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(T=100), ValueError, "T must be between 2 and 64; got 100"),
    (dict(P=9), ValueError, "P must be between 1 and 8; got 9"),
    (dict(T=12, layouts=["zigzag"]), ValueError, "12 tokens cannot be cut into 8"),
    (dict(layouts=["diagonal"]), ValueError, "layouts must be a non-empty list of contiguous, striped, zigzag"),
    (dict(block=0), ValueError, "block must be at least 1; got 0"),
    (dict(P="4"), TypeError, "P must be a whole number"),
])
def test_explorer_refuses_bad_sizes_with_clear_messages(kwargs, error, match):
    with pytest.raises(error, match=match):
        ring_explorer(**kwargs)


def test_timeline_figure_without_results_says_what_it_needs():
    from attnlab.figures.ring import timeline_figure

    with pytest.raises(ValueError, match="results of run_ring"):
        timeline_figure([])
