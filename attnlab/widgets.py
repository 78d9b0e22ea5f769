"""Interactive figures that keep working without a kernel.

Every explorer pre-renders its frames as small PNGs and puts them in an
ipywidgets ``Stack``; each control's ``index`` is ``jslink``-ed to the
``selected_index`` of the stacks it drives. The link runs in the browser, so
the controls respond live in Jupyter, on Colab and Binder, and on the static
site, where no kernel exists. Several controls give a stack of stacks.
"""

from __future__ import annotations

from typing import Callable, Sequence

import ipywidgets as widgets
import torch

from . import live
from .attention import attention_scores, masked_softmax
from .i18n import tr
from .masks import causal_allowed
from .plotting import figure_png, frozen_layout, matrix_figure, tile_figure


def image_frame(png: bytes) -> widgets.Image:
    return widgets.Image(value=png, format="png")


def nested_stack(controls: Sequence[widgets.Widget], render: Callable[..., widgets.Widget]
                 ) -> tuple[widgets.Stack, list[widgets.Link]]:
    """A stack of stacks with one level per control; leaves are ``render(i0, i1, ...)``.

    Each control needs an integer ``index`` trait (ToggleButtons, Dropdown,
    RadioButtons); it is linked in the browser to every stack of its level.
    Returns the outer stack and the links. Where that cannot work (Colab,
    ipywidgets 7), a box driven by Python callbacks instead: see ``live.py``.
    """
    if live.use_callbacks():
        return live.callback_stack(controls, render)
    links: list[widgets.Link] = []

    def build(level: int, chosen: tuple[int, ...]) -> widgets.Widget:
        if level == len(controls):
            return render(*chosen)
        control = controls[level]
        children = [build(level + 1, chosen + (i,)) for i in range(len(control.options))]
        stack = widgets.Stack(children, selected_index=control.index)
        links.append(widgets.jslink((control, "index"), (stack, "selected_index")))
        return stack

    return build(0, ()), links


def toggle(options: Sequence[str], description: str = "") -> widgets.ToggleButtons:
    return widgets.ToggleButtons(options=list(options), index=0, description=description,
                                 style={"button_width": "auto", "description_width": "initial"})


class MaskExplorer(widgets.VBox):
    """Scores -> masked scores -> softmax for one sentence, with a query-row
    picker and a mask on/off switch; all 2 x 3 x (T+1) frames pre-rendered."""

    def __init__(self, tokens: Sequence[str], q: torch.Tensor, k: torch.Tensor):
        self.tokens = list(tokens)
        T = len(self.tokens)
        scores = attention_scores(q, k)  # [T, T]
        allowed = causal_allowed(T)
        self.mask_control = toggle([tr("explorer.mask_on"), tr("explorer.mask_off")], tr("explorer.mask"))
        self.step_control = toggle([tr("step.scores"), tr("step.masked"), tr("step.weights")], tr("explorer.step"))
        self.row_control = toggle([tr("explorer.all_rows")] + [f"{i} {tok}" for i, tok in enumerate(self.tokens)],
                                  tr("explorer.row"))

        def panel(mask_index: int, step: int, row_index: int) -> dict:
            use_mask = mask_index == 0
            row = None if row_index == 0 else row_index - 1
            spec = {"matrix": scores, "kind": "scores", "highlight_row": row,
                    "title": self._caption(step, use_mask, row)}
            if step == 1 and use_mask:
                spec["matrix"] = scores.masked_fill(~allowed, float("-inf"))
            if step == 2:
                weights = masked_softmax(scores, allowed if use_mask else None)
                spec.update(matrix=weights, kind="weights", allowed=allowed if use_mask else None,
                            leaked=None if use_mask else ~allowed)
            return spec

        size = {"width_per_panel": 3.9, "height": 3.9}
        # Lay out the frame with the longest caption once; every frame reuses it.
        rects = frozen_layout(matrix_figure([panel(1, 2, T)], self.tokens, **size))

        def frame(mask_index: int, step: int, row_index: int) -> widgets.Image:
            fig = matrix_figure([panel(mask_index, step, row_index)], self.tokens, axes_rects=rects, **size)
            return image_frame(figure_png(fig))

        stack, self.links = nested_stack([self.mask_control, self.step_control, self.row_control], frame)
        legend = widgets.HTML(f"<small>{tr('explorer.legend')}</small>")
        super().__init__([widgets.HTML(f"<b>{tr('explorer.title')}</b>"), self.step_control,
                          self.row_control, self.mask_control, stack, legend])

    def _caption(self, step: int, use_mask: bool, row: int | None) -> str:
        caption = tr(["step.scores", "step.masked", "step.weights"][step])
        if not use_mask:
            caption += " · " + tr("explorer.unmasked")
        if row is not None:
            sources = " ".join(self.tokens[: row + 1]) if use_mask else " ".join(self.tokens)
            caption += "\n" + tr("explorer.sources", token=self.tokens[row], sources=sources)
        return caption

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"MaskExplorer(tokens={self.tokens})"


def mask_explorer(tokens: Sequence[str], q: torch.Tensor, k: torch.Tensor) -> MaskExplorer:
    """The chapter-1 explorer for ``tokens`` with queries/keys ``q``, ``k``: [T, d]."""
    return MaskExplorer(tokens, q, k)


MAX_OWN_TOKENS = 12


def mask_explorer_for(sentence: str, d: int = 8, seed: int = 0) -> MaskExplorer:
    """The chapter-1 explorer for your own sentence: tokens are separated by
    spaces (also in Chinese), queries and keys are random (seeded)."""
    tokens = sentence.split()
    if not 1 <= len(tokens) <= MAX_OWN_TOKENS:
        raise ValueError(tr("explorer.too_long", n=len(tokens), max=MAX_OWN_TOKENS))
    q, k = torch.randn(2, len(tokens), d, generator=torch.Generator().manual_seed(seed)).unbind(0)
    return MaskExplorer(tokens, q, k)


class HeadExplorer(widgets.VBox):
    """Causal attention weights of every head for one sentence: all heads side by
    side, or one head large; ``weights`` is [H, T, T]."""

    def __init__(self, tokens: Sequence[str], weights: torch.Tensor, head_names: Sequence[str] | None = None):
        self.tokens = list(tokens)
        H, T = weights.shape[0], len(self.tokens)
        allowed = causal_allowed(T)
        labels = [tr("heads.head", n=h) for h in range(H)]
        names = list(head_names) if head_names else labels
        self.head_control = toggle([tr("heads.all")] + labels, tr("heads.show"))

        def panel(h: int) -> dict:
            return {"matrix": weights[h], "kind": "weights", "allowed": allowed, "title": names[h],
                    "values": T <= 8}

        def frame(index: int) -> widgets.Image:
            if index == 0:
                fig = matrix_figure([panel(h) for h in range(H)], self.tokens, width_per_panel=2.9, height=3.2)
            else:
                fig = matrix_figure([panel(index - 1)], self.tokens, width_per_panel=3.9, height=3.9)
            return image_frame(figure_png(fig))

        stack, self.links = nested_stack([self.head_control], frame)
        super().__init__([widgets.HTML(f"<b>{tr('heads.title')}</b>"), self.head_control, stack])

    def __repr__(self) -> str:
        return f"HeadExplorer(tokens={self.tokens}, heads={len(self.head_control.options) - 1})"


class TileExplorer(widgets.VBox):
    """Which tiles of a causal [T, T] score matrix blocked attention computes,
    masks or skips, for several block sizes."""

    def __init__(self, T: int, blocks: Sequence[int]):
        from .blocked import tile_map

        self.T, self.blocks = T, list(blocks)
        self.block_control = toggle([str(b) for b in self.blocks], tr("tiles.block"))

        def frame(index: int) -> widgets.Image:
            block = self.blocks[index]
            kinds = [kind for row in tile_map(T, block) for kind in row]
            title = tr("tiles.caption", T=T, block=block, full=kinds.count("full"),
                      diagonal=kinds.count("diagonal"), skipped=kinds.count("skipped"))
            return image_frame(figure_png(tile_figure(T, block, title)))

        stack, self.links = nested_stack([self.block_control], frame)
        super().__init__([widgets.HTML(f"<b>{tr('tiles.title')}</b>"), self.block_control, stack])

    def __repr__(self) -> str:
        return f"TileExplorer(T={self.T}, blocks={self.blocks})"


def head_explorer(tokens: Sequence[str], weights: torch.Tensor, head_names: Sequence[str] | None = None) -> HeadExplorer:
    """Per-head heatmaps; ``weights`` [H, T, T] (for example ``module.weights(x)[0]``)."""
    return HeadExplorer(tokens, weights.detach(), head_names)


def tile_explorer(T: int = 32, blocks: Sequence[int] = (4, 8, 16)) -> TileExplorer:
    return TileExplorer(T, blocks)
