"""Heatmaps of attention matrices, drawn with matplotlib's object API.

Figures are built with ``matplotlib.figure.Figure`` (not pyplot), so nothing
is displayed behind the reader's back; a notebook shows a figure by making it
the value of a cell. Colours stay readable for colour-blind readers: scores
use the diverging PuOr map, weights the single-hue Blues map, and every
special cell also carries a text or a hatch, never colour alone. Numbers in
the cells shrink to fit them and are left out where they would be too small
to read.
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Rectangle

from .. import inputs
from .fonts import register_fonts
from ..i18n import display_width as _display_width
from ..i18n import tr

register_fonts()  # Chinese labels fall back to the bundled CJK subset, also without attnlab.setup()

BLOCKED_GREY = "#d4d4d4"
NAN_COLOUR = "#3b3b3b"
LEAK_EDGE = "#b35806"
SCORE_CMAP = "PuOr_r"
WEIGHT_CMAP = "Blues"
KINDS = ("scores", "weights", "allowed")
PANEL_KEYS = ("matrix", "kind", "allowed", "highlight_row", "leaked", "title", "values", "value_fontsize",
              "label_fontsize")

VALUE_FONTSIZE = 7.5  # numbers in the cells, at most
MIN_VALUE_FONTSIZE = 5.5  # below this the numbers are left out
LABEL_FONTSIZE = 8.0  # token labels on the axes, at most
MIN_LABEL_FONTSIZE = 5.0
CAPTION_FONTSIZE = 9.5
FADE_ALPHA = 0.78  # rows other than the highlighted one fade to white
MAX_LABEL_WIDTH = 12  # token labels longer than this (CJK counts 2) are shortened with "…"


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "−∞" if value < 0 else "+∞"
    return f"{value:.2f}".replace("-", "−")


# --- measuring text before anything is laid out -------------------------------------------

_RENDERER = None
_TEXT_SIZES: dict[tuple, tuple[float, float]] = {}


def text_size(text: str, fontsize: float) -> tuple[float, float]:
    """Width and height of one line of text in points, with the current fonts (cached)."""
    global _RENDERER
    key = (text, fontsize, tuple(matplotlib.rcParams["font.family"]), tuple(matplotlib.rcParams["font.sans-serif"]))
    if key not in _TEXT_SIZES:
        if _RENDERER is None:
            _RENDERER = RendererAgg(1, 1, 720)  # 10 pixels per point: sizes to 0.1 pt
        width, height, _ = _RENDERER.get_text_width_height_descent(text or " ", FontProperties(size=fontsize),
                                                                   ismath=False)
        _TEXT_SIZES[key] = (width / 10, height / 10)
    return _TEXT_SIZES[key]


def line_pitch(fontsize: float = CAPTION_FONTSIZE) -> float:
    """Distance between the baselines of two lines of text, in points, as matplotlib sets them."""
    global _RENDERER
    if _RENDERER is None:
        _RENDERER = RendererAgg(1, 1, 720)
    _, height, descent = _RENDERER.get_text_width_height_descent("lp", FontProperties(size=fontsize), ismath=False)
    return 1.2 * (height - descent) / 10


def wrap_text(text: str, width: float, fontsize: float = CAPTION_FONTSIZE) -> str:
    """Break each line of ``text`` at spaces so that no line is wider than ``width`` points;
    a word wider than that on its own (a long token, Chinese without spaces) is cut anywhere."""
    space = text_size("a a", fontsize)[0] - text_size("aa", fontsize)[0]
    lines = []
    for paragraph in text.split("\n"):
        line, line_width = "", 0.0
        for word in paragraph.split(" "):
            word_width = text_size(word, fontsize)[0] if word else 0.0
            while word_width > width and len(word) > 1:  # cut the word where the line is full
                room = width - (line_width + space if line else 0.0)
                cut = max((n for n in range(1, len(word)) if text_size(word[:n], fontsize)[0] <= room), default=0)
                if cut == 0 and not line:
                    cut = 1
                if cut:
                    lines.append(f"{line} {word[:cut]}" if line else word[:cut])
                else:
                    lines.append(line)
                line, line_width = "", 0.0
                word = word[cut:]
                word_width = text_size(word, fontsize)[0]
            if line and line_width + space + word_width > width:
                lines.append(line)
                line, line_width = word, word_width
            else:
                line, line_width = (f"{line} {word}", line_width + space + word_width) if line else (word, word_width)
        lines.append(line)
    return "\n".join(lines)


def short_token(token: str, width: int = MAX_LABEL_WIDTH) -> str:
    """``token`` shortened with "…" to at most ``width`` columns (a CJK character counts 2)."""
    if _display_width(token) <= width:
        return token
    while _display_width(token) > width - 1:
        token = token[:-1]
    return token + "…"


def token_labels(tokens) -> list[str]:
    """Axis labels "0 The", "1 cat", ...: position first, so that counting starts at 0."""
    return [f"{i} {short_token(tok)}" for i, tok in enumerate(tokens)]


def matrix_geometry(labels: list[str], n_rows: int, n_cols: int, width: float, height: float,
                    caption_lines: int = 0, label_fontsize: float = LABEL_FONTSIZE) -> dict:
    """Where constrained layout will put a :func:`draw_matrix` panel of ``width`` x ``height``
    inches, estimated from the label sizes: returns the cell size and the margins, in points."""
    label_width = max((text_size(label, label_fontsize)[0] for label in labels), default=0.0)
    label_height = text_size("0 Ag", label_fontsize)[1]
    axis_label = 1.4 * label_fontsize + 4
    sin60, cos60 = math.sqrt(3) / 2, 0.5
    left = label_width + 3.5 + axis_label + 6
    top = label_width * sin60 + label_height * cos60 + 3.5 + axis_label + 6
    bottom = (caption_lines * 1.25 * CAPTION_FONTSIZE + 12) if caption_lines else 6
    last = text_size(labels[-1], label_fontsize)[0] * cos60 if labels else 0.0
    cell = min((72 * width - left - 6) / n_cols, (72 * height - top - bottom) / n_rows)
    right = max(6.0, last - cell / 2 + 4)
    cell = min((72 * width - left - right) / n_cols, (72 * height - top - bottom) / n_rows)
    return {"cell": max(cell, 1.0), "left": left, "right": right, "top": top, "bottom": bottom}


def fit_label_fontsize(labels: list[str], n_rows: int, n_cols: int, width: float, height: float,
                       caption_lines: int = 0) -> float:
    """The largest size (at most 8 pt) at which neighbouring token labels do not overlap:
    the rotated column labels are 0.87 cells apart, a line of text is about 1.2 font sizes."""
    size = LABEL_FONTSIZE
    for _ in range(2):  # smaller labels leave a little more room for the cells
        cell = matrix_geometry(labels, n_rows, n_cols, width, height, caption_lines, size)["cell"]
        size = min(LABEL_FONTSIZE, max(MIN_LABEL_FONTSIZE, math.floor(2 * 0.7 * cell) / 2))
    return size


def fit_value_fontsize(cell: float, texts) -> float | None:
    """The largest font size (at most 7.5 pt) at which ``texts`` fit a ``cell`` of that many
    points, or None when that is below 5.5 pt: then no numbers are drawn."""
    widest = max((text_size(text, VALUE_FONTSIZE)[0] for text in set(texts)), default=0.0)
    scale = min(1.0, 0.86 * cell / max(widest, 1.0), 0.62 * cell / VALUE_FONTSIZE)
    size = math.floor(2 * VALUE_FONTSIZE * scale) / 2
    return size if size >= MIN_VALUE_FONTSIZE else None


def _cell_texts(data: np.ndarray, kind: str, blocked: np.ndarray) -> np.ndarray:
    if kind == "allowed":
        return np.where(blocked, "✗", "✓")
    texts = np.vectorize(_fmt, otypes=[object])(data)
    if kind == "weights":
        texts[blocked & (data == 0)] = "0"
    return texts


def colour_scale(data: np.ndarray, kind: str, blocked: np.ndarray):
    """What :func:`draw_matrix` paints: the values (NaN where grey), the colour map and its norm."""
    finite = np.isfinite(data) & ~blocked
    if kind == "scores":
        span = float(np.abs(data[finite]).max()) if finite.any() else 1.0
        norm, cmap = TwoSlopeNorm(0.0, -span or -1.0, span or 1.0), SCORE_CMAP
    else:
        norm, cmap = Normalize(0.0, 1.0), WEIGHT_CMAP
    shown = np.where(finite, data, np.nan)
    if kind == "allowed":
        shown = np.where(blocked, np.nan, 0.75)
    return shown, matplotlib.colormaps[cmap].with_extremes(bad=BLOCKED_GREY), norm


def cell_numbers(data: np.ndarray, kind: str, blocked: np.ndarray) -> list[tuple[int, int, str, str]]:
    """(row, column, text, colour) of every number :func:`draw_matrix` writes into a cell;
    the colour is white on dark cells and near-black on light ones."""
    shown, cmap, norm = colour_scale(data, kind, blocked)
    texts = _cell_texts(data, kind, blocked)
    rgba = cmap(norm(np.nan_to_num(shown)))  # [n_rows, n_cols, 4]
    dark = rgba[..., :3] @ np.array([0.2126, 0.7152, 0.0722]) < 0.5
    numbers = []
    for i, j in np.ndindex(*data.shape):
        if kind == "allowed":
            colour = "#555555" if blocked[i, j] else "white"
        elif np.isnan(data[i, j]):
            colour = "white"
        elif np.isnan(shown[i, j]):
            colour = "#333333"
        else:
            colour = "white" if dark[i, j] else "#1a1a1a"
        numbers.append((i, j, texts[i, j], colour))
    return numbers


def highlight_patches(row: int, n_rows: int, n_cols: int) -> list[Rectangle]:
    """White veils over every row but ``row``, and a black frame around it."""
    patches = [Rectangle((-.5, i - .5), n_cols, 1, color="white", alpha=FADE_ALPHA, zorder=3)
               for i in range(n_rows) if i != row]
    patches.append(Rectangle((-.5, row - .5), n_cols, 1, fill=False, edgecolor="black", linewidth=2.0, zorder=4))
    return patches


def add_caption(ax, text: str):
    """The caption under a heatmap, left-aligned with it (a text constrained layout makes room for)."""
    return ax.annotate(text, xy=(0, 0), xycoords="axes fraction", xytext=(0, -6), textcoords="offset points",
                       ha="left", va="top", fontsize=CAPTION_FONTSIZE)


def draw_cells(ax, data: np.ndarray, kind: str, blocked: np.ndarray, leaked: np.ndarray | None) -> None:
    """The coloured cells of :func:`draw_matrix`: grey where blocked, dark where NaN, hatched where leaked."""
    shown, cmap, norm = colour_scale(data, kind, blocked)
    ax.imshow(shown, cmap=cmap, norm=norm, aspect="equal")
    if kind != "allowed":
        for i, j in zip(*np.nonzero(np.isnan(data))):
            ax.add_patch(Rectangle((j - .5, i - .5), 1, 1, color=NAN_COLOUR))
    if leaked is not None:
        for i, j in zip(*np.nonzero(leaked)):
            ax.add_patch(Rectangle((j - .5, i - .5), 1, 1, fill=False, hatch="////",
                                   edgecolor=LEAK_EDGE, linewidth=1.2))


def check_panel(panel) -> dict:
    """A panel of :func:`matrix_figure`: a dict of :func:`draw_matrix` keywords with a matrix."""
    if not isinstance(panel, dict):
        raise TypeError(tr("error.panel_type", got=inputs.describe(panel)))
    unknown = [key for key in panel if key not in PANEL_KEYS]
    if unknown:
        raise TypeError(tr("error.panel_key", setting=repr(unknown[0]), options=", ".join(PANEL_KEYS)))
    if "matrix" not in panel:
        raise TypeError(tr("error.panel_matrix"))
    return panel


def _check_same_shape(name: str, value, shape: tuple) -> np.ndarray:
    array = inputs.as_float_array(name, value)
    if array.shape != shape:
        raise ValueError(tr("error.same_shape", name=name, expected=shape, got=tuple(array.shape)))
    return array


def _check_tokens(tokens, n_rows: int, n_cols: int) -> list[str]:
    tokens = inputs.as_tokens(tokens)
    if n_rows > n_cols:
        raise ValueError(tr("error.more_queries", rows=n_rows, cols=n_cols))
    if len(tokens) != n_cols:
        raise ValueError(tr("error.tokens_per_key", shape=(n_rows, n_cols), cols=n_cols, n=len(tokens)))
    return tokens


def draw_matrix(ax, matrix, tokens, *, kind: str = "scores", allowed=None,
                highlight_row: int | None = None, leaked=None, title: str = "",
                values: bool = True, value_fontsize: float | None = None,
                label_fontsize: float | None = None) -> None:
    """Draw one [T_q, T_kv] matrix on ``ax``, with one token per key (column).

    kind: "scores" (any real numbers, -inf shown grey), "weights" (0..1) or
    "allowed" (bool table, ✓ / ✗). ``allowed`` greys out cells a mask blocks;
    ``leaked`` hatches cells whose weight comes from the future; with
    ``highlight_row`` the other rows fade and the row's sources are framed.
    With fewer queries than keys the queries are the last positions.
    ``value_fontsize`` sets the size of the numbers in the cells (default:
    as large as the cells allow, none when they would be unreadable);
    ``label_fontsize`` that of the token labels (default: at most 8 pt, smaller
    when they would overlap).
    """
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(tr("error.kind", options=", ".join(map(repr, KINDS)), got=inputs.describe(kind)))
    data = inputs.as_matrix("matrix", matrix)
    n_rows, n_cols = data.shape
    tokens = _check_tokens(tokens, n_rows, n_cols)
    blocked = np.zeros_like(data, dtype=bool)
    if allowed is not None:
        blocked = ~_check_same_shape("allowed", allowed, data.shape).astype(bool)
    if leaked is not None:
        leaked = _check_same_shape("leaked", leaked, data.shape).astype(bool)
    if highlight_row is not None:
        highlight_row = inputs.whole_number("highlight_row", highlight_row, 0, n_rows - 1)
    if kind == "allowed":
        blocked = ~data.astype(bool)
    draw_cells(ax, data, kind, blocked, leaked)
    labels = token_labels(tokens)
    numbers = cell_numbers(data, kind, blocked)
    if (values and value_fontsize is None) or label_fontsize is None:  # estimate the layout from the axes
        fig_width, fig_height = ax.figure.get_size_inches()
        box = ax.get_position()
        size = (box.width * fig_width / 0.775, box.height * fig_height / 0.77)
        lines = str(title).count("\n") + 1 if title else 0
        if label_fontsize is None:
            label_fontsize = fit_label_fontsize(labels, n_rows, n_cols, *size, caption_lines=lines)
        if values and value_fontsize is None:
            geometry = matrix_geometry(labels, n_rows, n_cols, *size, lines, label_fontsize)
            value_fontsize = fit_value_fontsize(geometry["cell"], [text for _, _, text, _ in numbers])
    if values and value_fontsize is not None:
        for i, j, text, colour in numbers:
            ax.text(j, i, text, ha="center", va="center", fontsize=value_fontsize, color=colour)
    if highlight_row is not None:
        for patch in highlight_patches(highlight_row, n_rows, n_cols):
            ax.add_patch(patch)
    ax.set_xticks(range(n_cols), labels, rotation=60, ha="left", rotation_mode="anchor", fontsize=label_fontsize)
    ax.set_yticks(range(n_rows), labels[n_cols - n_rows:], fontsize=label_fontsize)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(tr("axis.key"), fontsize=8)
    ax.set_ylabel(tr("axis.query"), fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title:
        add_caption(ax, str(title))


def matrix_figure(panels: list[dict], tokens, *, width_per_panel: float = 3.2,
                  height: float = 3.4, axes_rects: list | None = None, ncols: int | None = None) -> Figure:
    """Heatmaps side by side; each panel is a dict of :func:`draw_matrix` keywords.

    ``tokens`` names the keys (one per column; a sentence string is split).
    With ``ncols`` the panels wrap into rows of that many. Captions wrap to
    the panel's width. Without ``axes_rects`` matplotlib's constrained layout
    places the axes (two draws per save); with the rects of an earlier figure
    it skips that, which is how widgets render many frames of one layout quickly.
    """
    if isinstance(panels, dict):
        panels = [panels]
    if not isinstance(panels, (list, tuple)) or not panels:
        raise TypeError(tr("error.panels", got=inputs.describe(panels)))
    panels = [dict(check_panel(panel)) for panel in panels]
    width_per_panel = inputs.positive_number("width_per_panel", width_per_panel)
    height = inputs.positive_number("height", height)
    tokens = inputs.as_tokens(tokens)
    ncols = len(panels) if ncols is None else inputs.whole_number("ncols", ncols, 1, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    if axes_rects is not None and len(axes_rects) != len(panels):
        raise ValueError(tr("error.axes_rects", n=len(panels), got=len(axes_rects)))
    labels = token_labels(tokens)
    for panel in panels:
        data = inputs.as_matrix("matrix", panel["matrix"])
        _check_tokens(tokens, *data.shape)
        title = str(panel.get("title") or "")
        if title:
            left = matrix_geometry(labels, *data.shape, width_per_panel, height)["left"]
            title = wrap_text(title, 72 * width_per_panel - left - 8)
        panel["title"] = title
        lines = title.count("\n") + 1 if title else 0
        if panel.get("label_fontsize") is None:
            panel["label_fontsize"] = fit_label_fontsize(labels, *data.shape, width_per_panel, height, lines)
        if panel.get("values", True) and panel.get("value_fontsize") is None:
            geometry = matrix_geometry(labels, *data.shape, width_per_panel, height, lines, panel["label_fontsize"])
            texts = _cell_texts(data, panel.get("kind", "scores"), np.zeros(data.shape, dtype=bool))
            panel["value_fontsize"] = fit_value_fontsize(geometry["cell"], texts.ravel())
            panel["values"] = panel["value_fontsize"] is not None
    size = (width_per_panel * ncols, height * nrows)
    if axes_rects is None:
        fig = Figure(figsize=size, layout="constrained")
        axes = list(fig.subplots(nrows, ncols, squeeze=False).ravel())
        for ax in axes[len(panels):]:
            ax.set_visible(False)
    else:
        fig = Figure(figsize=size)
        axes = [fig.add_axes(rect) for rect in axes_rects]
    for ax, panel in zip(axes, panels):
        draw_matrix(ax, tokens=tokens, **panel)
    return fig


def frozen_layout(fig: Figure) -> list:
    """The axes rects constrained layout chose for ``fig`` (for :func:`matrix_figure`)."""
    fig.draw_without_rendering()
    return [ax.get_position().bounds for ax in fig.axes if ax.get_visible()]
