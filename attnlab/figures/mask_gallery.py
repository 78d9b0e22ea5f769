"""Every mask type of :mod:`attnlab.mask_builder` side by side (chapter 7).

``mask_gallery(tokens, prefix=..., window=...)`` is a widget: a toggle picks the
mask type and the pre-rendered picture changes in the browser (ipywidgets
``Stack`` + ``jslink``, so it responds on the static site too).
``mask_gallery_figure(tokens)`` draws all types in one static figure.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
from matplotlib.figure import Figure

from .. import inputs
from ..i18n import tr
from ..mask_builder import build_mask
from .plotting import draw_matrix
from .png import figure_png
from .widgets import image_frame, nested_stack, toggle

KINDS = ("causal", "bidirectional", "prefix_lm", "sliding_window", "strict", "cross")  # the chapter's order
DECODER_TOKENS = 4  # queries of the cross-attention panel (at most one per encoder token)
MIN_TOKENS, MAX_TOKENS = 2, 12


def gallery_masks(prefix: int = 3, window: int = 3) -> tuple[tuple[str, dict], ...]:
    """(kind, parameters) of every panel."""
    return tuple((kind, {"prefix_lm": {"prefix": prefix}, "sliding_window": {"window": window}}.get(kind, {}))
                 for kind in KINDS)


GALLERY = gallery_masks()


def gallery_title(kind: str, params: dict) -> str:
    return tr(f"gallery.{kind}", **params)


def short_name(title: str) -> str:
    """The part of a title before its colon (ASCII or full-width): the label of a toggle button."""
    return title.replace("：", ":").split(":")[0]


def draw_gallery_panel(ax, kind: str, params: dict, tokens: Sequence[str]) -> None:
    """One mask on ``ax``; the cross panel has decoder queries y0.. and the tokens as encoder keys."""
    T = len(tokens)
    if kind == "cross":
        T_dec = min(DECODER_TOKENS, T)
        allowed = build_mask("cross", T_dec, T)
        draw_matrix(ax, allowed, list(tokens), kind="allowed", title=gallery_title(kind, params))
        ax.set_yticks(range(T_dec), [f"y{i}" for i in range(T_dec)], fontsize=8)
        return
    draw_matrix(ax, build_mask(kind, T, **params), list(tokens), kind="allowed",
                title=gallery_title(kind, params))


def check_gallery_inputs(tokens, prefix, window) -> tuple[list[str], int, int]:
    """2 to 12 token strings (a sentence is split), a prefix in 0..T and a window in 1..T (default 3 or T)."""
    tokens = inputs.as_tokens(tokens)
    T = len(tokens)
    if not MIN_TOKENS <= T <= MAX_TOKENS:
        raise ValueError(tr("gallery.bad_tokens", low=MIN_TOKENS, high=MAX_TOKENS, n=T))
    prefix = min(3, T) if prefix is None else inputs.whole_number("prefix", prefix, 0, T)
    window = min(3, T) if window is None else inputs.whole_number("window", window, 1, T)
    return tokens, prefix, window


def mask_gallery_figure(tokens: Sequence[str], prefix: int | None = None, window: int | None = None) -> Figure:
    """All mask types in a 2 x 3 grid."""
    tokens, prefix, window = check_gallery_inputs(tokens, prefix, window)
    fig = Figure(figsize=(10.5, 7.6), layout="constrained")
    for ax, (kind, params) in zip(fig.subplots(2, 3).flat, gallery_masks(prefix, window)):
        draw_gallery_panel(ax, kind, params, tokens)
    return fig


class MaskGallery(widgets.VBox):
    """A toggle over the mask types; one pre-rendered picture per type."""

    def __init__(self, tokens: Sequence[str], prefix: int | None = None, window: int | None = None):
        self.tokens, self.prefix, self.window = check_gallery_inputs(tokens, prefix, window)
        masks = gallery_masks(self.prefix, self.window)
        control = toggle([short_name(gallery_title(kind, params)) for kind, params in masks], tr("gallery.show"))

        def render(i: int) -> widgets.Widget:
            kind, params = masks[i]
            fig = Figure(figsize=(4.6, 4.2), layout="constrained")
            draw_gallery_panel(fig.subplots(), kind, params, self.tokens)
            return image_frame(figure_png(fig))

        stack, self.links = nested_stack([control], render)
        super().__init__([widgets.HTML(f"<b>{tr('gallery.title')}</b>"), control, stack])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"MaskGallery(tokens={self.tokens}, prefix={self.prefix}, window={self.window})"


def mask_gallery(tokens: Sequence[str], prefix: int | None = None, window: int | None = None) -> MaskGallery:
    """The widget; ``prefix`` and ``window`` (default 3, at most the number of tokens) set those two masks."""
    return MaskGallery(tokens, prefix, window)
