"""Chapter 12's explorers: the chunk mask (C new queries after a cache) and the tree mask.

Both pre-render every frame into a ``Stack`` linked to toggles (``widgets.nested_stack``), so the
buttons work on the static site too. Colours as in chapter 6's cache explorer: keys read from
the cache blue-grey, keys of this step's new tokens orange, blocked cells grey.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from .. import inputs
from ..chunked_prefill import chunk_mask, top_left_mask
from ..i18n import tr
from ..tree_speculation import check_branching, check_parents, tree_depths, tree_mask, tree_shape
from .plotting import BLOCKED_GREY, wrap_text
from .png import figure_png
from .widgets import image_frame, nested_stack, toggle

BLOCKED, CACHED, NEW, CHOSEN = 0, 1, 2, 3
COLOURS = ListedColormap([BLOCKED_GREY, "#8fb3d9", "#e08214", "#b35806"])
MAX_CHUNK, MAX_CACHE, MAX_ENTRIES = 8, 12, 12


def mask_cells(allowed: np.ndarray, cache_len: int, row: int | None = None) -> np.ndarray:
    """Colour codes of a [T_q, cache_len + T_q] mask: cached keys, new keys, blocked; the chosen row darker."""
    cells = np.where(allowed, NEW, BLOCKED)
    cells[:, :cache_len] = np.where(allowed[:, :cache_len], CACHED, BLOCKED)
    if row is not None:
        cells[row] = np.where(allowed[row], CHOSEN, BLOCKED)
        cells[row, :cache_len] = np.where(allowed[row, :cache_len], CACHED, BLOCKED)
    return cells


def draw_mask(ax, allowed: np.ndarray, cache_len: int, row_labels: Sequence[str], col_labels: Sequence[str],
              row: int | None = None) -> None:
    ax.imshow(mask_cells(allowed, cache_len, row), cmap=COLOURS, vmin=0, vmax=CHOSEN, aspect="equal")
    T_q, T_kv = allowed.shape
    ax.set_xticks(range(T_kv), col_labels, fontsize=8)
    ax.set_yticks(range(T_q), row_labels, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_xticks(np.arange(-0.5, T_kv), minor=True)
    ax.set_yticks(np.arange(-0.5, T_q), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.2)
    if cache_len:
        ax.axvline(cache_len - 0.5, color="#1a1a1a", linewidth=1.6)  # where the cache ends
    ax.tick_params(which="both", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if row is not None:
        ax.add_patch(_outline(row, T_kv))


def _outline(row: int, width: int):
    from matplotlib.patches import Rectangle

    return Rectangle((-0.5, row - 0.5), width, 1, fill=False, edgecolor="#1a1a1a", linewidth=1.6)


def chunk_figure(C: int, cache_len: int, aligned: str = "lower_right", width: float | None = None,
                 rows: int | None = None) -> Figure:
    """The mask of a chunk of ``C`` new queries after ``cache_len`` cached positions: the chunk
    mask (``aligned="lower_right"``) or the top-left mistake of ``is_causal=True``. ``width`` (inches)
    and ``rows`` (the height of so many queries) give every frame of an explorer the same size."""
    C = inputs.whole_number("C", C, 1, MAX_CHUNK)
    cache_len = inputs.whole_number("cache_len", cache_len, 0, MAX_CACHE)
    if aligned not in ("lower_right", "top_left"):
        raise ValueError(tr("error.config_choice", name="aligned", options="'lower_right', 'top_left'", got=repr(aligned)))
    allowed = (chunk_mask if aligned == "lower_right" else top_left_mask)(C, cache_len).numpy()
    T_kv, cell = cache_len + C, 0.36  # inches per cell
    width = max(width or 0.0, 1.0 + cell * T_kv)
    if aligned == "lower_right":
        caption = tr("ch12.chunk_caption", C=C, cache_len=cache_len, first=cache_len, last=cache_len + C - 1)
    else:
        missed = int((chunk_mask(C, cache_len).numpy() & ~allowed).sum())
        caption = tr("ch12.chunk_caption_top_left", C=C, cache_len=cache_len, missed=missed)
    caption = wrap_text(caption, 72 * width - 40, 8.5)
    height = 0.6 + cell * max(rows or C, C) + 0.35 + 0.16 * (caption.count("\n") + 1)
    fig = Figure(figsize=(width, height))  # a fixed layout: one draw per frame
    ax = fig.add_axes((0.75 / width, 1 - (0.6 + cell * C) / height, cell * T_kv / width, cell * C / height))
    draw_mask(ax, allowed, cache_len, [str(cache_len + i) for i in range(C)], [str(j) for j in range(T_kv)])
    ax.set_aspect("auto")
    ax.set_ylabel(tr("ch12.explorer_query_positions"), fontsize=8)
    ax.set_xlabel(tr("ch12.explorer_key_positions"), fontsize=8)
    ax.xaxis.set_label_position("top")
    fig.text(0.02, 0.03, caption, ha="left", va="bottom", fontsize=8.5)
    return fig


class ChunkMaskExplorer(widgets.VBox):
    """Toggles for C, the cache length and the alignment; one pre-rendered mask per combination."""

    def __init__(self, chunk_sizes: Sequence[int] = (1, 2, 4), cache_lens: Sequence[int] = (0, 3, 6)):
        self.chunk_sizes = _choices("chunk_sizes", chunk_sizes, 1, MAX_CHUNK)
        self.cache_lens = _choices("cache_lens", cache_lens, 0, MAX_CACHE)
        width, rows = 1.0 + 0.36 * (max(self.chunk_sizes) + max(self.cache_lens)), max(self.chunk_sizes)
        controls = [toggle([f"C={c}" for c in self.chunk_sizes], tr("ch12.explorer_chunk")),
                    toggle([str(n) for n in self.cache_lens], tr("ch12.explorer_cached")),
                    toggle([tr("ch12.explorer_lower_right"), tr("ch12.explorer_top_left")], tr("ch12.explorer_mask"))]

        def frame(i: int, j: int, a: int) -> widgets.Image:
            aligned = ("lower_right", "top_left")[a]
            return image_frame(figure_png(chunk_figure(self.chunk_sizes[i], self.cache_lens[j], aligned, width, rows)))

        stack, self.links = nested_stack(controls, frame)
        super().__init__([widgets.HTML(f"<b>{tr('ch12.chunk_title')}</b>"), *controls, stack,
                          widgets.HTML(f"<small>{tr('ch12.explorer_legend')}</small>")])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"ChunkMaskExplorer(chunk_sizes={self.chunk_sizes}, cache_lens={self.cache_lens})"


def _choices(name: str, values, low: int, high: int) -> list[int]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        values = [values]
    values = list(dict.fromkeys(inputs.whole_number(name, v, low, high) for v in values))
    if not values:
        raise ValueError(tr("ch12.err_no_choices", name=name))
    return values


def tree_figure(parents: Sequence[int], cache_len: int, entry: int, width: float = 7.2) -> Figure:
    """The tree (left) and its mask (right); ``entry`` and its ancestors are marked."""
    parents = check_parents(parents)
    N = len(parents)
    if not 1 <= N <= MAX_ENTRIES:
        raise ValueError(tr("ch12.err_tree_size", max=MAX_ENTRIES, n=N))
    cache_len = inputs.whole_number("cache_len", cache_len, 0, MAX_CACHE)
    entry = inputs.whole_number("entry", entry, 0, N - 1)
    depths = tree_depths(parents)
    allowed = tree_mask(parents, cache_len).numpy()
    ancestors = set(np.flatnonzero(allowed[entry, cache_len:]).tolist())
    siblings = [i for i in range(N) if i != entry and parents[i] == parents[entry]]
    caption = tr("ch12.tree_caption", entry=entry, depth=depths[entry], cache_len=cache_len,
                 path=tr("error.list_separator").join(str(i) for i in sorted(ancestors)))
    caption += " " + (tr("ch12.tree_siblings", others=tr("error.list_separator").join(map(str, siblings))) if siblings
                      else tr("ch12.tree_no_siblings"))
    caption = wrap_text(caption, 72 * width - 40, 8.5)
    lines = caption.count("\n") + 1
    height = 1.4 + 0.34 * N + 0.16 * lines
    fig = Figure(figsize=(width, height))  # a fixed layout: one draw per frame (21 frames per explorer)
    bottom = (0.62 + 0.16 * lines) / height  # room for the depth axis and the caption
    top = 1 - 0.5 / height
    ax_tree = fig.add_axes((0.02, bottom, 0.30, top - bottom))
    ax_mask = fig.add_axes((0.45, bottom, 0.53, top - bottom))
    draw_tree(ax_tree, parents, depths, ancestors, entry)
    labels = [f"{i} (t+{depths[i]})" for i in range(N)]
    draw_mask(ax_mask, allowed, cache_len, labels, [f"c{j}" for j in range(cache_len)] + [str(i) for i in range(N)], entry)
    ax_mask.set_aspect("auto")
    ax_mask.set_xlabel(tr("ch12.explorer_tree_columns"), fontsize=8)
    ax_mask.xaxis.set_label_position("top")
    fig.text(0.02, 0.03, caption, ha="left", va="bottom", fontsize=8.5)
    return fig


def draw_tree(ax, parents: list[int], depths: list[int], marked: set[int], entry: int) -> None:
    """Entries as circles, one column per depth (left to right), edges from parent to child."""
    by_depth: dict[int, list[int]] = {}
    for i, t in enumerate(depths):
        by_depth.setdefault(t, []).append(i)
    tallest = max(len(level) for level in by_depth.values())
    where = {i: (t, (len(level) - 1) / 2 - k) for t, level in by_depth.items() for k, i in enumerate(level)}
    for i, p in enumerate(parents):
        if p != -1:
            on_path = i in marked and p in marked
            ax.plot([where[p][0], where[i][0]], [where[p][1], where[i][1]], color="#b35806" if on_path else "#999999",
                    linewidth=2 if on_path else 1, zorder=1)
    order = range(len(parents))
    ax.scatter([where[i][0] for i in order], [where[i][1] for i in order], s=330, zorder=2, edgecolors="#1a1a1a",
               c=["#b35806" if i == entry else "#e08214" if i in marked else "#ffffff" for i in order])
    for i in order:
        ax.text(*where[i], str(i), ha="center", va="center", fontsize=8, zorder=3,
                color="white" if i in marked else "#1a1a1a")
    ax.set_xticks(sorted(by_depth), [f"t+{t}" for t in sorted(by_depth)], fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.5, max(by_depth) + 0.5)
    ax.set_ylim(-(tallest - 1) / 2 - 0.7, (tallest - 1) / 2 + 0.7)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel(tr("ch12.explorer_depth"), fontsize=8)


class TreeMaskExplorer(widgets.VBox):
    """Toggles for the tree's shape and an entry; one pre-rendered tree and mask per combination."""

    def __init__(self, shapes: Sequence[Sequence[int]] = ((2, 2), (3, 1)), cache_len: int = 3):
        if (isinstance(shapes, (str, bytes)) or not isinstance(shapes, (list, tuple)) or not shapes
                or not all(isinstance(shape, (list, tuple)) for shape in shapes)):
            raise TypeError(tr("ch12.err_shapes", got=inputs.describe(shapes)))
        self.shapes = [tuple(check_branching(shape, high=4)) for shape in shapes]
        self.cache_len = inputs.whole_number("cache_len", cache_len, 0, MAX_CACHE)
        trees = [tree_shape(shape) for shape in self.shapes]
        for parents in trees:
            if len(parents) > MAX_ENTRIES:
                raise ValueError(tr("ch12.err_tree_size", max=MAX_ENTRIES, n=len(parents)))
        most = max(len(parents) for parents in trees)
        shape_control = toggle(["×".join(map(str, shape)) for shape in self.shapes], tr("ch12.explorer_shape"))
        entry_control = toggle([str(i) for i in range(most)], tr("ch12.explorer_entry"))

        def frame(s: int, e: int) -> widgets.Image:
            parents = trees[s]
            return image_frame(figure_png(tree_figure(parents, self.cache_len, min(e, len(parents) - 1))))

        stack, self.links = nested_stack([shape_control, entry_control], frame)
        super().__init__([widgets.HTML(f"<b>{tr('ch12.tree_title')}</b>"), shape_control, entry_control, stack,
                          widgets.HTML(f"<small>{tr('ch12.tree_legend')}</small>")])

    def __repr__(self) -> str:
        return f"TreeMaskExplorer(shapes={self.shapes}, cache_len={self.cache_len})"


def chunk_mask_explorer(chunk_sizes: Sequence[int] = (1, 2, 4), cache_lens: Sequence[int] = (0, 3, 6)) -> ChunkMaskExplorer:
    return ChunkMaskExplorer(chunk_sizes, cache_lens)


def tree_mask_explorer(shapes: Sequence[Sequence[int]] = ((2, 2), (3, 1)), cache_len: int = 3) -> TreeMaskExplorer:
    return TreeMaskExplorer(shapes, cache_len)
