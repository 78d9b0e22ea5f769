"""Figures and the explorer of chapter 9 (ring attention).

* :func:`layout_figure`  which rank holds which token, for every layout;
* :func:`timeline_figure` measured busy / waiting time of every rank per ring step;
* :class:`RingExplorer`  which (query, key) pairs every rank computes at every
  ring step, per layout: pre-rendered frames in ipywidgets ``Stack``s linked
  in the browser (``attnlab.figures.widgets.nested_stack``), so it responds on the
  static site too.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.patches import Patch, Rectangle

from .. import inputs
from ..i18n import tr
from .plotting import frozen_layout
from .png import figure_png
from ..ring import LAYOUTS, JobResult, check_sizes, ring_schedule, shard_positions
from .widgets import image_frame, nested_stack, toggle

RANK_COLOURS = ["#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB", "#222255"]  # Paul Tol
WAIT_COLOUR = "#DDDDDD"
MAX_TOKENS = 64  # the figures draw every token (the explorer every (query, key) pair)


def check_figure_sizes(T, P, block, layouts) -> tuple[int, int, int, list[str]]:
    """T, P, block and the layouts of a figure, checked with clear messages."""
    T = inputs.whole_number("T", T, 2, MAX_TOKENS)
    P = inputs.whole_number("P", P, 1, len(RANK_COLOURS))
    if isinstance(layouts, str):
        layouts = [layouts]
    if not isinstance(layouts, (list, tuple)) or not layouts or any(layout not in LAYOUTS for layout in layouts):
        raise ValueError(tr("ring.error_layouts_widget", layouts=", ".join(LAYOUTS), got=inputs.describe(layouts)))
    for layout in layouts:
        check_sizes(T, P, layout, block)
    return T, P, int(block), list(layouts)


def rank_colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)]


def _light(colour: str, amount: float) -> tuple[float, float, float]:
    """``colour`` mixed with white: amount 0 keeps it, 1 gives white."""
    return tuple(c + (1 - c) * amount for c in to_rgb(colour))


def _ink(colour: str) -> str:
    """Text colour that stays readable on ``colour``."""
    red, green, blue = to_rgb(colour)
    return "white" if 0.2126 * red + 0.7152 * green + 0.0722 * blue < 0.5 else "#1a1a1a"


def layout_figure(T: int, P: int, layouts: Sequence[str] = LAYOUTS) -> Figure:
    """One row of T tokens per layout, each token coloured by the rank that holds it."""
    T, P, _, layouts = check_figure_sizes(T, P, 1, layouts)
    fig = Figure(figsize=(7.2, 0.55 + 0.62 * len(layouts)), layout="constrained")
    axes = fig.subplots(len(layouts), 1, squeeze=False)[:, 0]
    for ax, layout in zip(axes, layouts):
        owner = np.empty(T, dtype=int)
        for rank, positions in enumerate(shard_positions(T, P, layout).tolist()):
            owner[positions] = rank
        for t in range(T):
            ax.add_patch(Rectangle((t, 0), 1, 1, facecolor=rank_colour(owner[t]), edgecolor="white", linewidth=1))
            ax.text(t + 0.5, 0.5, str(owner[t]), ha="center", va="center", fontsize=7,
                    color=_ink(rank_colour(owner[t])))
        ax.set_xlim(0, T)
        ax.set_ylim(0, 1)
        ax.set_yticks([0.5], [tr(f"ring.layout.{layout}")], fontsize=8)
        ax.set_xticks(np.arange(T) + 0.5, [str(t) for t in range(T)], fontsize=6.5)
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
    axes[-1].set_xlabel(tr("ring.token_axis"), fontsize=8)
    fig.suptitle(tr("ring.layout_title", P=P), fontsize=9)
    return fig


def timeline_figure(results: Sequence[JobResult]) -> Figure:
    """Per layout, one bar per rank: computing (coloured, one shade per step), waiting for the
    next block (grey) and idle after its last step until the slowest rank is done (white)."""
    if isinstance(results, JobResult):
        results = [results]
    if not results or not all(isinstance(result, JobResult) for result in results):
        raise ValueError(tr("ring.error_results", got=inputs.describe(results)))
    fig = Figure(figsize=(7.2, 1.0 + 1.05 * len(results)), layout="constrained")
    axes = fig.subplots(len(results), 1, squeeze=False, sharex=True)[:, 0]
    end = max(result.span for result in results) * 1e3
    for ax, result in zip(axes, results):
        P = len(result.ranks)
        for rank in range(P):
            y = P - 1 - rank
            for step, (start, computed, done) in enumerate(result.timeline(rank)):
                shade = _light(rank_colour(rank), 0.45 * (step % 2))
                ax.add_patch(Rectangle((start * 1e3, y + 0.12), (computed - start) * 1e3, 0.76,
                                       facecolor=shade, edgecolor="white", linewidth=0.6))
                if done > computed:
                    ax.add_patch(Rectangle((computed * 1e3, y + 0.3), (done - computed) * 1e3, 0.4,
                                           facecolor=WAIT_COLOUR, edgecolor="none"))
            finished = result.timeline(rank)[-1][2] * 1e3
            ax.add_patch(Rectangle((finished, y + 0.12), result.span * 1e3 - finished, 0.76, facecolor="white",
                                   edgecolor="#999999", linewidth=0.6, hatch="///"))
        ax.set_ylim(0, P)
        ax.set_yticks(np.arange(P) + 0.5, [tr("ring.rank", rank=r) for r in reversed(range(P))], fontsize=7.5)
        ax.set_title(tr("ring.timeline_panel", layout=tr(f"ring.layout.{result.job.layout}"),
                        span=f"{result.span * 1e3:.0f}"), fontsize=8.5, loc="left")
        ax.tick_params(length=0, labelsize=7.5)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1].set_xlim(0, end * 1.02)
    axes[-1].set_xlabel(tr("ring.time_axis"), fontsize=8)
    busy = (Patch(facecolor=RANK_COLOURS[0]), Patch(facecolor=_light(RANK_COLOURS[0], 0.45)))  # both shades of a step
    handles = [busy, Patch(facecolor=WAIT_COLOUR), Patch(facecolor="white", edgecolor="#999999", hatch="///")]
    labels = [tr("ring.legend_busy"), tr("ring.legend_wait"), tr("ring.legend_idle")]
    fig.legend(handles, labels, handler_map={tuple: HandlerTuple(ndivide=None, pad=0)}, loc="outside lower center",
               ncols=3, fontsize=7.5, frameon=False)
    return fig


def pair_grid(T: int, P: int, layout: str, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every (query position, key position): the rank that handles it, the ring step at which
    it does, and its fate there: 2 = computed and allowed, 1 = computed but masked, 0 = skipped."""
    rank_of = np.zeros((T, T), dtype=int)
    step_of = np.zeros((T, T), dtype=int)
    fate = np.zeros((T, T), dtype=int)
    for rank, steps in enumerate(ring_schedule(T, P, layout, block)):
        for step, entry in enumerate(steps):
            for kind, q_positions, k_positions in entry["tiles"]:
                for i in q_positions:
                    for j in k_positions:
                        rank_of[i, j], step_of[i, j] = rank, step
                        fate[i, j] = 0 if kind == "skipped" else (2 if j <= i else 1)
    return rank_of, step_of, fate


def tiles_per_rank_and_step(T: int, P: int, layout: str, block: int) -> np.ndarray:
    """Computed tiles: [rank, step]."""
    return np.array([[sum(kind != "skipped" for kind, _, _ in entry["tiles"]) for entry in steps]
                     for steps in ring_schedule(T, P, layout, block)])


class RingExplorer(widgets.VBox):
    """Which (query, key) pairs each rank computes at each ring step, for each layout."""

    def __init__(self, T: int = 16, P: int = 4, block: int = 2, layouts: Sequence[str] = LAYOUTS):
        T, P, block, layouts = check_figure_sizes(T, P, block, layouts)
        self.T, self.P, self.block, self.layouts = T, P, block, layouts
        self.layout_control = toggle([tr(f"ring.layout.{layout}") for layout in self.layouts], tr("ring.layout"))
        self.step_control = toggle([tr("ring.all_steps")] + [str(t) for t in range(P)], tr("ring.step"))
        grids = {layout: pair_grid(T, P, layout, block) for layout in self.layouts}
        work = {layout: tiles_per_rank_and_step(T, P, layout, block) for layout in self.layouts}
        top = max(int(w.sum(axis=1).max()) for w in work.values())
        rects = frozen_layout(self._figure(grids[self.layouts[0]], work[self.layouts[0]], None, top))

        def frame(layout_index: int, step_index: int) -> widgets.Image:
            layout = self.layouts[layout_index]
            step = None if step_index == 0 else step_index - 1
            return image_frame(figure_png(self._figure(grids[layout], work[layout], step, top, rects)))

        stack, self.links = nested_stack([self.layout_control, self.step_control], frame)
        legend = widgets.HTML(f"<small>{tr('ring.explorer_legend')}</small>")
        super().__init__([widgets.HTML(f"<b>{tr('ring.explorer_title', T=T, P=P, block=block)}</b>"),
                          self.layout_control, self.step_control, stack, legend])

    def _figure(self, grid, work: np.ndarray, step: int | None, top: int, rects: list | None = None) -> Figure:
        T, P = self.T, self.P
        rank_of, step_of, fate = grid
        size = (7.4, 3.9)
        if rects is None:
            fig = Figure(figsize=size, layout="constrained")
            left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
        else:
            fig = Figure(figsize=size)
            left, right = (fig.add_axes(rect) for rect in rects)
        image = np.ones((T, T, 3))
        for i in range(T):
            for j in range(T):
                colour = rank_colour(rank_of[i, j])
                now = step is None or step_of[i, j] == step
                before = step is not None and step_of[i, j] < step
                if fate[i, j] == 0 or not (now or before):
                    continue
                image[i, j] = _light(colour, (0.0 if fate[i, j] == 2 else 0.6) if now else 0.82)
        left.imshow(image, interpolation="nearest", extent=(-.5, T - .5, T - .5, -.5))
        masked = (fate == 1) & ((step_of == step) if step is not None else True)
        left.add_collection(PatchCollection([Rectangle((j - .5, i - .5), 1, 1) for i, j in zip(*np.nonzero(masked))],
                                            facecolor="none", edgecolor="white", hatch="////", linewidth=0))
        skipped_i, skipped_j = np.nonzero(fate == 0)
        left.scatter(skipped_j, skipped_i, s=2, color="#AAAAAA", marker="o", linewidths=0)
        # strips along the edges: the rank that holds each token, as query (left) and as key (top)
        owners = np.array([[to_rgb(rank_colour(r)) for r in rank_of[:, 0]]])  # [1, T, 3]
        left.imshow(owners.transpose(1, 0, 2), extent=(-1.9, -0.9, T - .5, -.5), interpolation="nearest")
        left.imshow(owners, extent=(-.5, T - .5, -0.9, -1.9), interpolation="nearest")
        left.set_xlim(-1.9, T - .5)
        left.set_ylim(T - .5, -1.9)
        ticks = list(range(0, T, 4)) + [T - 1]
        left.set_xticks(ticks, [str(t) for t in ticks], fontsize=7)
        left.set_yticks(ticks, [str(t) for t in ticks], fontsize=7)
        left.xaxis.tick_top()
        left.xaxis.set_label_position("top")
        left.set_xlabel(tr("axis.key"), fontsize=7.5)
        left.set_ylabel(tr("axis.query"), fontsize=7.5)
        left.tick_params(length=0)
        if step is None:
            caption = tr("ring.explorer_all")
        else:
            sources = ", ".join(f"{r}←{(r - step) % P}" for r in range(P))
            caption = tr("ring.explorer_step", step=step, sources=sources)
        left.set_title(caption, fontsize=8, loc="left", y=-0.1)
        ranks = np.arange(P)
        if step is None:
            right.bar(ranks, work.sum(axis=1), color=[rank_colour(r) for r in ranks])
            values = work.sum(axis=1)
        else:
            done = work[:, :step].sum(axis=1)
            right.bar(ranks, done, color=[_light(rank_colour(r), 0.75) for r in ranks])
            right.bar(ranks, work[:, step], bottom=done, color=[rank_colour(r) for r in ranks])
            values = done + work[:, step]
        for r, value in zip(ranks, values):
            right.text(r, value + top * 0.02, str(int(value)), ha="center", fontsize=7.5)
        right.set_ylim(0, top * 1.12)
        right.set_xticks(ranks, [tr("ring.rank", rank=r) for r in ranks], fontsize=7.5)
        right.set_ylabel(tr("ring.tiles_axis"), fontsize=7.5)
        right.tick_params(labelsize=7.5)
        right.set_title(tr("ring.explorer_bars"), fontsize=8, loc="left")
        for spine in ("top", "right"):
            right.spines[spine].set_visible(False)
        return fig

    def __repr__(self) -> str:
        return f"RingExplorer(T={self.T}, P={self.P}, block={self.block}, layouts={self.layouts})"


def ring_explorer(T: int = 16, P: int = 4, block: int = 2, layouts: Sequence[str] = LAYOUTS) -> RingExplorer:
    """The chapter-9 explorer: pick a layout and a ring step."""
    return RingExplorer(T, P, block, layouts)
