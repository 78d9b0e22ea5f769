"""Interactive figures that keep working without a kernel.

Every explorer pre-renders its frames as small PNGs and puts them in an
ipywidgets ``Stack``; each control's ``index`` is ``jslink``-ed to the
``selected_index`` of the stacks it drives. The link runs in the browser, so
the controls respond live in Jupyter, on Colab and Binder, and on the static
site, where no kernel exists. Several controls give a stack of stacks.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import ipywidgets as widgets
import torch

from .. import inputs

from . import live
from ..attention import attention_scores, masked_softmax
from ..i18n import tr
from ..masks import causal_allowed
from .frames import HeatmapFrames
from .plotting import fit_value_fontsize, matrix_figure, matrix_geometry, token_labels, wrap_text
from .png import figure_png
from .tiles import check_tiles, tile_figure


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



MAX_OWN_TOKENS = 12  # the explorers pre-render every frame: 2 x 3 x (T + 1) for the mask explorer
MAX_HEADS = 16
MAX_HEAD_TOKENS = 16
STEP_KEYS = ("step.scores", "step.masked", "step.weights")


def _query_key_matrix(name: str, value) -> torch.Tensor:
    """q or k as [T, d]; a batch or head of one ([1, T, d], [1, 1, T, d]) is read as [T, d]."""
    value = inputs.drop_leading_ones(inputs.as_float_tensor(name, value), 2)
    if value.dim() != 2:
        raise ValueError(tr("error.qk_shape", name=name, shape=tuple(value.shape)))
    return value


def _check_token_count(tokens: list[str], high: int) -> None:
    if not 1 <= len(tokens) <= high:
        raise ValueError(tr("error.explorer_tokens", max=high, n=len(tokens)))


def _check_positions(tokens: list[str], name: str, value: torch.Tensor, T: int) -> None:
    if len(tokens) != T:
        raise ValueError(tr("error.tokens_positions", n=len(tokens), name=name, T=T, shape=tuple(value.shape)))


class MaskExplorer(widgets.VBox):
    """Scores -> masked scores -> softmax for one sentence, with a query-row
    picker and a mask on/off switch; all 2 x 3 x (T+1) frames pre-rendered.

    The frames share four heatmaps (scores, masked scores, masked weights,
    unmasked weights); each is drawn once and every frame adds only its row
    highlight and caption (:class:`attnlab.figures.frames.HeatmapFrames`), which is
    what makes 78 frames for 12 tokens take about a second, not half a minute.
    """

    CELL = 29.0  # points per cell: room for "−0.00" at 7.5 pt

    def __init__(self, tokens: Sequence[str], q: torch.Tensor, k: torch.Tensor):
        self.tokens = inputs.as_tokens(tokens)
        _check_token_count(self.tokens, MAX_OWN_TOKENS)
        q, k = _query_key_matrix("q", q), _query_key_matrix("k", k)
        if q.shape != k.shape:
            raise ValueError(tr("error.qk_mismatch", q=tuple(q.shape), k=tuple(k.shape)))
        _check_positions(self.tokens, "q", q, q.shape[0])
        T = len(self.tokens)
        scores = attention_scores(q, k)  # [T, T]
        allowed = causal_allowed(T)
        self.heatmaps = {  # what each step shows; frames differ only in row highlight and caption
            "scores": {"matrix": scores, "kind": "scores"},
            "masked": {"matrix": scores.masked_fill(~allowed, float("-inf")), "kind": "scores"},
            "weights": {"matrix": masked_softmax(scores, allowed), "kind": "weights", "allowed": allowed},
            "leaked": {"matrix": masked_softmax(scores, None), "kind": "weights", "leaked": ~allowed},
        }
        self.mask_control = toggle([tr("explorer.mask_on"), tr("explorer.mask_off")], tr("explorer.mask"))
        self.step_control = toggle([tr(key) for key in STEP_KEYS], tr("explorer.step"))
        self.row_control = toggle([tr("explorer.all_rows")] + [f"{i} {tok}" for i, tok in enumerate(self.tokens)],
                                  tr("explorer.row"))
        self.size = self._size()
        combinations = [(m, s, r) for m in (0, 1) for s in (0, 1, 2) for r in range(T + 1)]
        heatmaps = {name: {**panel, "value_fontsize": self._value_fontsize(name)}
                    for name, panel in self.heatmaps.items()}
        self.frames = HeatmapFrames(heatmaps, self.tokens, [self.caption(*c) for c in combinations],
                                    width=self.size[0], height=self.size[1])

        def frame(mask_index: int, step: int, row_index: int) -> widgets.Image:
            png = self.frames.png(self.heatmap(mask_index, step), None if row_index == 0 else row_index - 1,
                                  self.caption(mask_index, step, row_index))
            return image_frame(png)

        stack, self.links = nested_stack([self.mask_control, self.step_control, self.row_control], frame)
        legend = widgets.HTML(f"<small>{tr('explorer.legend')}</small>")
        super().__init__([widgets.HTML(f"<b>{tr('explorer.title')}</b>"), self.step_control,
                          self.row_control, self.mask_control, stack, legend])

    def _size(self) -> tuple[float, float]:
        """Figure size in inches: 3.9 x 3.9 for short sentences, larger so that
        the numbers stay at 7.5 pt for longer ones."""
        T, labels = len(self.tokens), token_labels(self.tokens)
        geometry = matrix_geometry(labels, T, T, 3.9, 3.9)
        width = max(3.9, (geometry["left"] + geometry["right"] + T * self.CELL + 4) / 72)
        self._caption_width = 72 * width - geometry["left"] - 8
        self._caption_lines = max(self.caption(m, s, r).count("\n") + 1 for m in (0, 1) for s in (0, 1, 2)
                                  for r in range(T + 1))
        geometry = matrix_geometry(labels, T, T, width, 3.9, caption_lines=self._caption_lines)
        height = max(3.9, (geometry["top"] + geometry["bottom"] + T * self.CELL + 4) / 72)
        return width, height

    def _value_fontsize(self, name: str) -> float | None:
        T = len(self.tokens)
        geometry = matrix_geometry(token_labels(self.tokens), T, T, *self.size, caption_lines=self._caption_lines)
        widest = "−0.00" if self.heatmaps[name]["kind"] == "scores" else "0.00"
        return fit_value_fontsize(geometry["cell"], [widest])

    @staticmethod
    def heatmap(mask_index: int, step: int) -> str:
        """Which of :attr:`heatmaps` the frame (mask, step) shows; mask 0 = on."""
        if mask_index == 0:
            return ("scores", "masked", "weights")[step]
        return ("scores", "scores", "leaked")[step]  # without a mask step 2 changes nothing

    def caption(self, mask_index: int, step: int, row_index: int) -> str:
        """The caption of a frame, wrapped to the figure (row_index 0 = all rows)."""
        use_mask, row = mask_index == 0, None if row_index == 0 else row_index - 1
        if step == 1 and not use_mask:
            caption = tr("step.unmasked")
        else:
            caption = tr(STEP_KEYS[step]) + ("" if use_mask else " · " + tr("explorer.unmasked"))
        if row is not None:
            sources = " ".join(self.tokens[: row + 1] if use_mask else self.tokens)
            caption += "\n" + tr("explorer.sources", token=self.tokens[row], sources=sources)
        return wrap_text(caption, self._caption_width)

    def panel(self, mask_index: int, step: int, row_index: int) -> dict:
        """The frame (mask, step, row) as a :func:`matrix_figure` panel."""
        return {**self.heatmaps[self.heatmap(mask_index, step)], "title": self.caption(mask_index, step, row_index),
                "highlight_row": None if row_index == 0 else row_index - 1}

    def figure(self, mask_index: int, step: int, row_index: int):
        """The frame (mask, step, row) drawn as an ordinary matplotlib figure (slower than the frames)."""
        return matrix_figure([self.panel(mask_index, step, row_index)], self.tokens,
                             width_per_panel=self.size[0], height=self.size[1])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"MaskExplorer(tokens={self.tokens})"


def mask_explorer(tokens: Sequence[str], q: torch.Tensor, k: torch.Tensor) -> MaskExplorer:
    """The chapter-1 explorer for ``tokens`` with queries/keys ``q``, ``k``: [T, d]."""
    return MaskExplorer(tokens, q, k)


def mask_explorer_for(sentence: str, d: int = 8, seed: int = 0) -> MaskExplorer:
    """The chapter-1 explorer for your own sentence, with random (seeded) queries and keys.

    Tokens are separated by spaces; a Chinese sentence without spaces is split
    into words (with jieba if it is installed, else into characters). A list
    of tokens works too.
    """
    tokens = inputs.split_sentence(sentence) if isinstance(sentence, str) else inputs.as_tokens(sentence, "sentence")
    if not 1 <= len(tokens) <= MAX_OWN_TOKENS:
        raise ValueError(tr("explorer.too_long", n=len(tokens), max=MAX_OWN_TOKENS))
    d = inputs.whole_number("d", d, 1)
    seed = inputs.whole_number("seed", seed)
    q, k = torch.randn(2, len(tokens), d, generator=torch.Generator().manual_seed(seed)).unbind(0)
    return MaskExplorer(tokens, q, k)


class HeadExplorer(widgets.VBox):
    """Causal attention weights of every head for one sentence: all heads in a
    grid, or one head large; ``weights`` is [H, T, T]."""

    def __init__(self, tokens: Sequence[str], weights: torch.Tensor, head_names: Sequence[str] | None = None):
        self.tokens = inputs.as_tokens(tokens)
        weights = inputs.as_float_tensor("weights", weights)
        weights = inputs.drop_leading_ones(weights, 3) if weights.dim() != 2 else weights[None]  # one head
        if weights.dim() != 3 or weights.shape[1] != weights.shape[2]:
            raise ValueError(tr("error.weights_shape", shape=tuple(weights.shape)))
        H, T = weights.shape[0], weights.shape[1]
        if not 1 <= H <= MAX_HEADS:
            raise ValueError(tr("error.heads_range", max=MAX_HEADS, n=H))
        _check_token_count(self.tokens, MAX_HEAD_TOKENS)
        _check_positions(self.tokens, "weights", weights, T)
        labels = [tr("heads.head", n=h) for h in range(H)]
        if head_names is None:
            names = labels
        elif isinstance(head_names, str) or not isinstance(head_names, Sequence):
            raise TypeError(tr("error.tokens_type", name="head_names", got=inputs.describe(head_names)))
        else:
            names = [str(name) for name in head_names]
            if len(names) != H:
                raise ValueError(tr("error.head_names", H=H, n=len(names)))
        allowed = causal_allowed(T)
        self.head_control = toggle([tr("heads.all")] + labels, tr("heads.show"))
        panels = [{"matrix": weights[h], "kind": "weights", "allowed": allowed, "title": names[h],
                   "values": T <= 8} for h in range(H)]
        token_rows = token_labels(self.tokens)
        side = max(2.9, 1.25 + 0.19 * T)  # panels grow with the sentence so the labels stay readable
        grid = matrix_figure(panels, self.tokens, width_per_panel=side, height=side + 0.3, ncols=min(H, 4))
        width = height = max(3.9, 1.5 + 0.25 * T)
        geometry = matrix_geometry(token_rows, T, T, width, height, caption_lines=1)
        singles = {str(h): {**panel, "value_fontsize": fit_value_fontsize(geometry["cell"], ["0.00"]) if T <= 8
                            else None} for h, panel in enumerate(panels)}
        captions = [wrap_text(name, 72 * width - geometry["left"] - 8) for name in names]
        self.frames = HeatmapFrames(singles, self.tokens, captions, width=width, height=height)

        def frame(index: int) -> widgets.Image:
            if index == 0:
                return image_frame(figure_png(grid))
            return image_frame(self.frames.png(str(index - 1), None, captions[index - 1]))

        stack, self.links = nested_stack([self.head_control], frame)
        super().__init__([widgets.HTML(f"<b>{tr('heads.title')}</b>"), self.head_control, stack])

    def __repr__(self) -> str:
        return f"HeadExplorer(tokens={self.tokens}, heads={len(self.head_control.options) - 1})"


def _block_sizes(T: int, blocks) -> list[int]:
    """Block sizes as a list without repeats; one whole number counts as a list of one."""
    if isinstance(blocks, (str, bytes)) or not isinstance(blocks, Iterable) or getattr(blocks, "ndim", 1) == 0:
        blocks = [blocks]  # check_tiles says what is wrong with it, if anything
    blocks = list(blocks)
    if not blocks:
        raise ValueError(tr("error.blocks_empty"))
    return list(dict.fromkeys(check_tiles(T, block)[1] for block in blocks))


class TileExplorer(widgets.VBox):
    """Which tiles of a causal [T, T] score matrix blocked attention computes,
    masks or skips, for several block sizes (or one)."""

    def __init__(self, T: int, blocks: Sequence[int] | int):
        from ..blocked import tile_map

        self.T = inputs.whole_number("T", T, 1)
        self.blocks = _block_sizes(self.T, blocks)
        self.block_control = toggle([str(b) for b in self.blocks], tr("tiles.block"))

        def frame(index: int) -> widgets.Image:
            block = self.blocks[index]
            kinds = [kind for row in tile_map(self.T, block) for kind in row]
            title = tr("tiles.caption", T=self.T, block=block, full=kinds.count("full"),
                      diagonal=kinds.count("diagonal"), skipped=kinds.count("skipped"))
            return image_frame(figure_png(tile_figure(self.T, block, title)))

        stack, self.links = nested_stack([self.block_control], frame)
        super().__init__([widgets.HTML(f"<b>{tr('tiles.title')}</b>"), self.block_control, stack])

    def __repr__(self) -> str:
        return f"TileExplorer(T={self.T}, blocks={self.blocks})"


def head_explorer(tokens: Sequence[str], weights: torch.Tensor, head_names: Sequence[str] | None = None) -> HeadExplorer:
    """Per-head heatmaps; ``weights`` [H, T, T] (for example ``module.weights(x)[0]``)."""
    return HeadExplorer(tokens, weights, head_names)


def tile_explorer(T: int = 32, blocks: Sequence[int] | int = (4, 8, 16)) -> TileExplorer:
    """Tiles computed, masked and skipped for a causal [T, T] matrix; ``blocks`` is one block size or several."""
    return TileExplorer(T, blocks)
