"""The tile figure of chapter 3: the [T, T] score matrix cut into tiles that are computed in full,
masked on the diagonal, or skipped."""

from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.patches import Polygon, Rectangle

from .. import inputs
from ..i18n import tr
from .plotting import wrap_text


TILE_COLOURS = {"full": "#4477AA", "diagonal": "#CCBB44", "skipped": "#EEEEEE"}  # Paul Tol's bright
MAX_TILE_T = 4096
MAX_TILES_PER_SIDE = 64
MAX_TILE_NUMBERS = 9  # numbers per axis


def check_tiles(T, block) -> tuple[int, int]:
    """T and a block size for the tile figures: whole numbers, at most 64 tiles per side."""
    T = inputs.whole_number("T", T, 1, MAX_TILE_T)
    block = inputs.whole_number("block", block, 1)
    if math.ceil(T / block) > MAX_TILES_PER_SIDE:
        raise ValueError(tr("error.tiles_per_side", T=T, block=block, n=math.ceil(T / block),
                            max=MAX_TILES_PER_SIDE, smallest=math.ceil(T / MAX_TILES_PER_SIDE)))
    return T, block


def tile_ticks(T: int, block: int) -> list[int]:
    """Tile boundaries to number on an axis: every one for up to 8 tiles, else every k-th."""
    bounds = list(range(0, T, block)) + [T]
    step = math.ceil((len(bounds) - 1) / (MAX_TILE_NUMBERS - 1))
    shown = bounds[::step]
    if shown[-1] != T:
        if T - shown[-1] < step * block / 2:
            shown[-1] = T
        else:
            shown.append(T)
    return shown


def _staircase(q0: int, k0: int, h: int, w: int) -> Polygon | None:
    """The cells (q, k) with k > q inside a diagonal tile, as one polygon (None if there are none)."""
    corners = []
    for q in range(q0, q0 + h):
        first = max(k0, q + 1)  # first blocked key of row q
        if first < k0 + w:
            corners += [(first, q), (first, q + 1)]
    if not corners:
        return None
    top, bottom = corners[0][1], corners[-1][1]
    points = [(k0 + w, top)] + corners + [(k0 + w, bottom)]
    return Polygon(points, closed=True, facecolor=TILE_COLOURS["skipped"], edgecolor="#999999",
                   hatch="////", linewidth=0)


def tile_figure(T: int, block: int, title: str = "") -> Figure:
    """The [T, T] score matrix cut into tiles: computed in full, masked on the
    diagonal (the blocked elements inside are hatched), or skipped."""
    from ..blocked import tile_map

    T, block = check_tiles(T, block)
    kinds = tile_map(T, block)
    fig = Figure(figsize=(4.7, 5.0), layout="constrained")
    ax = fig.add_subplot()
    tile_points = 250 * min(block, T) / T  # the axes are about 250 points wide
    edge = min(1.5, 0.08 * tile_points)
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            q0, k0 = i * block, j * block
            h, w = min(block, T - q0), min(block, T - k0)
            ax.add_patch(Rectangle((k0, q0), w, h, facecolor=TILE_COLOURS[kind], edgecolor="white", linewidth=edge))
            if kind == "diagonal" and (stairs := _staircase(q0, k0, h, w)) is not None:
                ax.add_patch(stairs)
    ax.set_xlim(0, T)
    ax.set_ylim(T, 0)
    ax.set_aspect("equal")
    ticks = tile_ticks(T, block)
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(tr("axis.key"), fontsize=8)
    ax.set_ylabel(tr("axis.query"), fontsize=8)
    ax.tick_params(labelsize=7)
    handles = [Rectangle((0, 0), 1, 1, facecolor=TILE_COLOURS[k], edgecolor="#999999") for k in TILE_COLOURS]
    fig.legend(handles, [tr(f"tiles.{k}") for k in TILE_COLOURS], loc="outside lower left", ncols=1,
               fontsize=7.5, frameon=False)
    if title:
        fig.suptitle(wrap_text(title, 72 * 4.7 - 30, 9), fontsize=9)
    return fig
