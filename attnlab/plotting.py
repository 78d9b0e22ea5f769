"""Heatmaps of attention matrices, drawn with matplotlib's object API.

Figures are built with ``matplotlib.figure.Figure`` (not pyplot), so nothing
is displayed behind the reader's back; a notebook shows a figure by making it
the value of a cell. Colours stay readable for colour-blind readers: scores
use the diverging PuOr map, weights the single-hue Blues map, and every
special cell also carries a text or a hatch, never colour alone.
"""

from __future__ import annotations

import io
import math

import matplotlib
import numpy as np
import torch
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image

from .i18n import tr

BLOCKED_GREY = "#d4d4d4"
NAN_COLOUR = "#3b3b3b"
LEAK_EDGE = "#b35806"
SCORE_CMAP = "PuOr_r"
WEIGHT_CMAP = "Blues"


def _as_array(matrix) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().to("cpu", torch.float64).numpy()
    return np.asarray(matrix, dtype=np.float64)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "−∞" if value < 0 else "+∞"
    return f"{value:.2f}".replace("-", "−")


def draw_matrix(ax, matrix, tokens, *, kind: str = "scores", allowed=None,
                highlight_row: int | None = None, leaked=None, title: str = "",
                values: bool = True) -> None:
    """Draw one [T_q, T_kv] matrix on ``ax``.

    kind: "scores" (any real numbers, -inf shown grey), "weights" (0..1) or
    "allowed" (bool table, ✓ / ✗). ``allowed`` greys out cells a mask blocks;
    ``leaked`` hatches cells whose weight comes from the future; with
    ``highlight_row`` the other rows fade and the row's sources are framed.
    """
    data = _as_array(matrix)
    n_rows, n_cols = data.shape
    blocked = np.zeros_like(data, dtype=bool) if allowed is None else ~_as_array(allowed).astype(bool)
    if kind == "allowed":
        blocked = ~data.astype(bool)
    finite = np.isfinite(data) & ~blocked
    if kind == "scores":
        span = float(np.abs(data[finite]).max()) if finite.any() else 1.0
        norm, cmap = TwoSlopeNorm(0.0, -span, span), SCORE_CMAP
    else:
        norm, cmap = Normalize(0.0, 1.0), WEIGHT_CMAP
    shown = np.where(finite, data, np.nan)
    if kind == "allowed":
        shown = np.where(blocked, np.nan, 0.75)
    cmap = matplotlib.colormaps[cmap].with_extremes(bad=BLOCKED_GREY)
    ax.imshow(shown, cmap=cmap, norm=norm, aspect="equal")
    for i in range(n_rows):
        for j in range(n_cols):
            value = data[i, j]
            if np.isnan(value) and kind != "allowed":
                ax.add_patch(Rectangle((j - .5, i - .5), 1, 1, color=NAN_COLOUR))
            if not values:
                continue
            if kind == "allowed":
                label, colour = ("✗", "#555555") if blocked[i, j] else ("✓", "white")
            elif np.isnan(value):
                label, colour = "NaN", "white"
            else:
                label = "0" if (blocked[i, j] and kind == "weights" and value == 0) else _fmt(value)
                colour = "#333333"
                if finite[i, j]:
                    red, green, blue, _ = cmap(norm(value))
                    luminance = 0.2126 * red + 0.7152 * green + 0.0722 * blue
                    colour = "white" if luminance < 0.5 else "#1a1a1a"
            ax.text(j, i, label, ha="center", va="center", fontsize=7.5, color=colour)
    if leaked is not None:
        for i, j in zip(*np.nonzero(_as_array(leaked).astype(bool))):
            ax.add_patch(Rectangle((j - .5, i - .5), 1, 1, fill=False, hatch="////",
                                   edgecolor=LEAK_EDGE, linewidth=1.2))
    if highlight_row is not None:
        for i in range(n_rows):
            if i != highlight_row:
                ax.add_patch(Rectangle((-.5, i - .5), n_cols, 1, color="white", alpha=0.78, zorder=3))
        ax.add_patch(Rectangle((-.5, highlight_row - .5), n_cols, 1, fill=False,
                               edgecolor="black", linewidth=2.0, zorder=4))
    labels = [f"{i} {tok}" for i, tok in enumerate(tokens)]
    ax.set_xticks(range(n_cols), labels[-n_cols:] if len(labels) >= n_cols else labels, rotation=60,
                  ha="left", rotation_mode="anchor", fontsize=8)
    ax.set_yticks(range(n_rows), labels[-n_rows:], fontsize=8)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(tr("axis.key"), fontsize=8)
    ax.set_ylabel(tr("axis.query"), fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title:
        ax.set_title(title, fontsize=9.5, pad=6, loc="left", y=-0.13 if n_rows > 3 else -0.2)


def matrix_figure(panels: list[dict], tokens, *, width_per_panel: float = 3.2,
                  height: float = 3.4, axes_rects: list | None = None) -> Figure:
    """A row of heatmaps; each panel is a dict of :func:`draw_matrix` keywords.

    Without ``axes_rects`` matplotlib's constrained layout places the axes
    (two draws per save); with the rects of an earlier figure it skips that,
    which is how widgets render many frames of one layout quickly.
    """
    size = (width_per_panel * len(panels), height)
    if axes_rects is None:
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
    else:
        fig = Figure(figsize=size)
        axes = [fig.add_axes(rect) for rect in axes_rects]
    for ax, panel in zip(axes, panels):
        draw_matrix(ax, tokens=tokens, **panel)
    return fig


def frozen_layout(fig: Figure) -> list:
    """The axes rects constrained layout chose for ``fig`` (for :func:`matrix_figure`)."""
    fig.draw_without_rendering()
    return [ax.get_position().bounds for ax in fig.axes]


def figure_png(fig: Figure, dpi: int = 100, colours: int = 96) -> bytes:
    """PNG bytes of a figure, palette-quantized to stay small on the static site."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor="white")
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    out = io.BytesIO()
    image.quantize(colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        out, format="png", optimize=True)
    return out.getvalue()


TILE_COLOURS = {"full": "#4477AA", "diagonal": "#CCBB44", "skipped": "#EEEEEE"}  # Paul Tol's bright


def tile_figure(T: int, block: int, title: str = "") -> Figure:
    """The [T, T] score matrix cut into tiles: computed in full, masked on the
    diagonal (the blocked elements inside are hatched), or skipped."""
    from .blocked import tile_map

    kinds = tile_map(T, block)
    fig = Figure(figsize=(4.7, 4.6), layout="constrained")
    ax = fig.add_subplot()
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            q0, k0 = i * block, j * block
            h, w = min(block, T - q0), min(block, T - k0)
            ax.add_patch(Rectangle((k0, q0), w, h, facecolor=TILE_COLOURS[kind], edgecolor="white", linewidth=1.5))
            if kind == "diagonal":
                for q in range(q0, q0 + h):
                    for k in range(max(k0, q + 1), k0 + w):
                        ax.add_patch(Rectangle((k, q), 1, 1, facecolor="#EEEEEE", edgecolor="#999999",
                                               hatch="////", linewidth=0))
    ax.set_xlim(0, T)
    ax.set_ylim(T, 0)
    ax.set_aspect("equal")
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(tr("axis.key"), fontsize=8)
    ax.set_ylabel(tr("axis.query"), fontsize=8)
    ax.tick_params(labelsize=7)
    handles = [Rectangle((0, 0), 1, 1, facecolor=TILE_COLOURS[k], edgecolor="#999999") for k in TILE_COLOURS]
    fig.legend(handles, [tr(f"tiles.{k}") for k in TILE_COLOURS], loc="outside lower center", ncols=3,
               fontsize=7.5, frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig
