"""Every mask type of :mod:`attnlab.mask_builder` side by side (chapter 7).

``mask_gallery(tokens)`` is a widget: a toggle picks the mask type and the
pre-rendered picture changes in the browser (ipywidgets ``Stack`` + ``jslink``,
so it responds on the static site too). ``mask_gallery_figure(tokens)`` draws
all types in one static figure.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
from matplotlib.figure import Figure

from .i18n import tr
from .mask_builder import build_mask
from .plotting import draw_matrix, figure_png
from .widgets import image_frame, nested_stack, toggle

GALLERY = (  # (kind, parameters) in the order the chapter tells them
    ("causal", {}),
    ("bidirectional", {}),
    ("prefix_lm", {"prefix": 3}),
    ("sliding_window", {"window": 3}),
    ("strict", {}),
    ("cross", {}),
)
DECODER_TOKENS = 4  # queries of the cross-attention panel


def gallery_title(kind: str, params: dict) -> str:
    return tr(f"gallery.{kind}", **params)


def draw_gallery_panel(ax, kind: str, params: dict, tokens: Sequence[str]) -> None:
    """One mask on ``ax``; the cross panel has decoder queries y0.. and the tokens as encoder keys."""
    T = len(tokens)
    if kind == "cross":
        allowed = build_mask("cross", DECODER_TOKENS, T)
        draw_matrix(ax, allowed, list(tokens), kind="allowed", title=gallery_title(kind, params))
        ax.set_yticks(range(DECODER_TOKENS), [f"y{i}" for i in range(DECODER_TOKENS)], fontsize=8)
        return
    draw_matrix(ax, build_mask(kind, T, **params), list(tokens), kind="allowed",
                title=gallery_title(kind, params))


def _check_tokens(tokens: Sequence[str]) -> list[str]:
    tokens = list(tokens)
    if not 4 <= len(tokens) <= 12 or not all(isinstance(tok, str) for tok in tokens):
        raise ValueError(tr("gallery.bad_tokens", n=len(tokens)))
    return tokens


def mask_gallery_figure(tokens: Sequence[str]) -> Figure:
    """All mask types in a 2 x 3 grid."""
    tokens = _check_tokens(tokens)
    fig = Figure(figsize=(10.5, 7.6), layout="constrained")
    for ax, (kind, params) in zip(fig.subplots(2, 3).flat, GALLERY):
        draw_gallery_panel(ax, kind, params, tokens)
    return fig


class MaskGallery(widgets.VBox):
    """A toggle over the mask types; one pre-rendered picture per type."""

    def __init__(self, tokens: Sequence[str]):
        self.tokens = _check_tokens(tokens)
        control = toggle([gallery_title(kind, params).split(":")[0] for kind, params in GALLERY],
                         tr("gallery.show"))

        def render(i: int) -> widgets.Widget:
            kind, params = GALLERY[i]
            fig = Figure(figsize=(4.6, 4.2), layout="constrained")
            draw_gallery_panel(fig.subplots(), kind, params, self.tokens)
            return image_frame(figure_png(fig))

        stack, self.links = nested_stack([control], render)
        super().__init__([widgets.HTML(f"<b>{tr('gallery.title')}</b>"), control, stack])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"MaskGallery(tokens={self.tokens})"


def mask_gallery(tokens: Sequence[str]) -> MaskGallery:
    return MaskGallery(tokens)
