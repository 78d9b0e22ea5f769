"""Many frames of a few heatmaps, rendered fast for the explorers.

The mask explorer shows four heatmaps, each with any query row highlighted
and a caption: 2 x 3 x (T + 1) = 78 frames for 12 tokens. Drawing each frame
as a new matplotlib figure took about 0.3 s, because matplotlib lays out every
text anew. Here matplotlib draws the axes with the token labels once and each
heatmap's cells once; the frames are composed with numpy and PIL: the numbers
in the cells and the caption lines are drawn by PIL in the same fonts
(DejaVu Sans, with the bundled CJK font for characters it lacks), the other
rows faded and the chosen row framed with numpy. A frame looks like
:func:`attnlab.figures.plotting.draw_matrix` with ``highlight_row`` and ``title`` set.
"""

from __future__ import annotations

import io
import math
from functools import lru_cache

import numpy as np
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from PIL import Image, ImageDraw, ImageFont

from .. import inputs

from . import fonts
from .plotting import CAPTION_FONTSIZE, FADE_ALPHA, add_caption, cell_numbers, check_panel, draw_cells, draw_matrix, line_pitch

FRAME_WIDTH = 2.0  # points: the black frame around the chosen row


@lru_cache(maxsize=None)
def _font(path: str, size_px: float) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size=size_px)


@lru_cache(maxsize=1)
def _latin_font_path() -> str:
    return font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"))


def font_runs(text: str) -> list[tuple[str, str]]:
    """``text`` cut into runs of (font path, characters): DejaVu Sans where it has the
    glyph, else the bundled CJK font (what matplotlib's font fallback does)."""
    latin_path, cjk_path = _latin_font_path(), fonts.font_path()
    latin = font_manager.get_font(latin_path)
    runs: list[tuple[str, str]] = []
    for ch in text:
        path = latin_path if ch.isspace() or latin.get_char_index(ord(ch)) else cjk_path
        if runs and runs[-1][0] == path:
            runs[-1] = (path, runs[-1][1] + ch)
        else:
            runs.append((path, ch))
    return runs


def _cells(panel: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    data = inputs.as_matrix("matrix", panel["matrix"])
    blocked = np.zeros(data.shape, dtype=bool)
    if panel.get("allowed") is not None:
        blocked = ~inputs.as_float_array("allowed", panel["allowed"]).astype(bool)
    if panel.get("kind") == "allowed":
        blocked = ~data.astype(bool)
    leaked = panel.get("leaked")
    return data, blocked, None if leaked is None else inputs.as_float_array("leaked", leaked).astype(bool)


class HeatmapFrames:
    """Frames of several heatmaps that share tokens, size and layout.

    ``heatmaps`` maps a name to a :func:`draw_matrix` panel (matrix, kind,
    allowed, leaked, value_fontsize); ``captions`` lists the captions frames
    will show (the one with most lines sets the room under the heatmap).
    ``png(name, row, caption)`` returns one frame as palette PNG bytes;
    :attr:`axes` holds the matplotlib axes each heatmap's cells were drawn on.
    """

    def __init__(self, heatmaps: dict[str, dict], tokens, captions: list[str], *, width: float, height: float,
                 dpi: int = 100, colours: int = 160):
        self.dpi = dpi
        tokens = inputs.as_tokens(tokens)
        panels = {name: dict(check_panel(panel)) for name, panel in heatmaps.items()}
        first = next(iter(panels.values()))
        fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
        canvas = FigureCanvasAgg(fig)
        chrome = fig.add_subplot()  # axes, token labels, axis titles; the cells come per heatmap
        draw_matrix(chrome, first["matrix"], tokens, kind=first.get("kind", "scores"), values=False)
        longest = max(captions, key=lambda text: (text.count("\n"), len(text)), default="")
        caption = add_caption(chrome, longest)
        fig.draw_without_rendering()  # constrained layout, with room for the longest caption
        fig.set_layout_engine("none")
        rect = chrome.get_position().bounds
        self.caption_left = chrome.bbox.x0
        self.caption_top = fig.bbox.height - caption.get_window_extent(canvas.get_renderer()).y1
        caption.remove()
        for artist in chrome.images + chrome.patches:
            artist.set_visible(False)
        canvas.draw()
        background = canvas.copy_from_bbox(fig.bbox)
        self.axes: dict = {}
        self.bases: dict[str, np.ndarray] = {}
        self.faded: dict[str, np.ndarray] = {}
        for name, panel in panels.items():
            ax = fig.add_axes(rect)
            data, blocked, leaked = _cells(panel)
            draw_cells(ax, data, panel.get("kind", "scores"), blocked, leaked)
            ax.set_axis_off()
            canvas.restore_region(background)
            for artist in ax.images + ax.patches:
                ax.draw_artist(artist)
            base = Image.fromarray(np.asarray(canvas.buffer_rgba())[..., :3].copy())
            if panel.get("value_fontsize"):
                draw = ImageDraw.Draw(base)
                font = _font(_latin_font_path(), panel["value_fontsize"] * dpi / 72)
                for i, j, text, colour in cell_numbers(data, panel.get("kind", "scores"), blocked):
                    x, y = ax.transData.transform((j, i))
                    draw.text((x, fig.bbox.height - y), text, font=font, fill=_rgb(colour), anchor="mm")
            self.axes[name], self.bases[name] = ax, np.asarray(base)
            self.faded[name] = (self.bases[name] * (1 - FADE_ALPHA) + 255 * FADE_ALPHA).round().astype(np.uint8)
        self.n_rows, self.n_cols = data.shape
        height_px = fig.bbox.height
        rows = [height_px - ax.transData.transform((0, i - .5))[1] for i in range(self.n_rows + 1)]
        cols = [ax.transData.transform((j - .5, 0))[0] for j in (0, self.n_cols)]
        # inner edges rounded, outer edges widened to whole pixels so no unfaded line is left
        self.row_edges = [math.floor(rows[0])] + [round(y) for y in rows[1:-1]] + [math.ceil(rows[-1])]
        self.col_edges = [math.floor(cols[0]), math.ceil(cols[1])]
        self.pitch = line_pitch() * dpi / 72
        self._lines: dict[str, np.ndarray] = {}
        self.palettes = {name: _palette(self.bases[name], self.faded[name], colours) for name in self.bases}

    def _highlight(self, frame: np.ndarray, name: str, row: int) -> None:
        """Fade every row but ``row`` and frame it in black, as :func:`highlight_patches` does."""
        (x0, x1), edges = self.col_edges, self.row_edges
        faded = self.faded[name]
        frame[edges[0]:edges[row], x0:x1] = faded[edges[0]:edges[row], x0:x1]
        frame[edges[row + 1]:edges[-1], x0:x1] = faded[edges[row + 1]:edges[-1], x0:x1]
        line = max(1, int(round(FRAME_WIDTH * self.dpi / 72)))
        top, bottom = edges[row], edges[row + 1]
        for y in (top, bottom):
            frame[max(edges[0], y - line // 2):min(edges[-1], y - line // 2 + line), x0:x1] = 0
        for x in (x0, x1):
            frame[top:bottom, max(x0, x - line // 2):min(x1, x - line // 2 + line)] = 0

    def _line(self, text: str) -> np.ndarray:
        """One caption line drawn once (black on white, [height, width, 3]); frames paste it."""
        if text not in self._lines:
            size = CAPTION_FONTSIZE * self.dpi / 72
            ascent, descent = _font(_latin_font_path(), size).getmetrics()
            runs = [(_font(path, size), run) for path, run in font_runs(text)]
            width = int(sum(font.getlength(run) for font, run in runs)) + 2
            image = Image.new("RGB", (max(width, 1), int(self.pitch + descent) + 1), "white")
            draw, x = ImageDraw.Draw(image), 0.0
            for font, run in runs:
                draw.text((x, ascent), run, font=font, fill=(0, 0, 0), anchor="ls")
                x += font.getlength(run)
            self._lines[text] = np.asarray(image)
        return self._lines[text]

    def _caption(self, frame: np.ndarray, caption: str) -> None:
        left, top = int(round(self.caption_left)), self.caption_top
        for n, text in enumerate(caption.split("\n")):
            line = self._line(text)
            y = int(round(top + n * self.pitch))
            h, w = min(line.shape[0], frame.shape[0] - y), min(line.shape[1], frame.shape[1] - left)
            if h > 0 and w > 0:
                region = frame[y:y + h, left:left + w]
                np.minimum(region, line[:h, :w], out=region)  # dark text over the white margin

    def png(self, name: str, row: int | None, caption: str) -> bytes:
        """Frame of heatmap ``name`` with ``row`` highlighted (None: no row) and ``caption`` under it."""
        frame = self.bases[name].copy()
        if row is not None:
            self._highlight(frame, name, row)
        self._caption(frame, caption)
        out = io.BytesIO()
        quantized = Image.fromarray(frame).quantize(palette=self.palettes[name], dither=Image.Dither.NONE)
        quantized.save(out, format="png", compress_level=3)  # fast; level 6 saves ~20 % at 3x the time
        return out.getvalue()


def _palette(base: np.ndarray, faded: np.ndarray, colours: int) -> Image.Image:
    """One palette for every frame of a heatmap: its colours plain and faded, plus 16 greys
    (the black frame and the edges of the caption text)."""
    sample = np.vstack([base[::2, ::2], faded[::2, ::2]])
    palette = Image.fromarray(sample).quantize(colours - 16, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    greys = [round(255 * level / 15) for level in range(16)]
    palette.putpalette(palette.getpalette()[:3 * (colours - 16)] + [g for level in greys for g in (level,) * 3])
    return palette


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(round(255 * c)) for c in to_rgb(colour))
