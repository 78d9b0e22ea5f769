"""Figures and the explorer of chapter 8: masks of a whole batch, FlexAttention's
block mask beside chapter 3's tiles, the receptive field of a sliding window.

Drawn with ``matplotlib.figure.Figure`` (nothing is shown behind the reader's
back); the explorer pre-renders its frames like every explorer of the course
(:mod:`attnlab.figures.widgets`), so it also responds on the static site.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..blocked import tile_map
from .. import inputs
from ..i18n import tr
from ..mask_builder import and_masks, batch_mask, document_mod, keep_from_lengths, mask_mod, or_masks, padding_mod
from .plotting import draw_matrix, frozen_layout
from .png import figure_png
from .tiles import TILE_COLOURS
from .widgets import image_frame, nested_stack, toggle

BLOCK_KINDS = {"full": "full", "partial": "diagonal", "empty": "skipped"}  # BlockMask -> chapter 3's names


def block_kinds(block_mask, b: int = 0, h: int = 0) -> list[list[str]]:
    """Kind of every (query block, key block) of a FlexAttention ``BlockMask``:
    "full" (every pair allowed), "partial" (the mask_mod decides per pair) or
    "empty" (nothing allowed: the block is skipped)."""
    if not hasattr(block_mask, "kv_indices"):
        raise TypeError(tr("ch8.err_block_mask", got=inputs.describe(block_mask)))
    n_q, n_kv = block_mask.kv_indices.shape[-2:]
    kinds = [["empty"] * n_kv for _ in range(n_q)]
    listed = [(block_mask.kv_num_blocks, block_mask.kv_indices, "partial"),
              (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, "full")]
    for counts, indices, kind in listed:
        if counts is None:
            continue
        for i in range(n_q):
            for j in indices[b, h, i, : counts[b, h, i]].tolist():
                kinds[i][j] = kind
    return kinds


def _draw_blocks(ax, kinds: list[list[str]], block: int, allowed: torch.Tensor, title: str) -> None:
    T = allowed.size(-1)
    colours = {kind: matplotlib.colors.to_rgb(colour) for kind, colour in TILE_COLOURS.items()}
    picture = np.zeros((T, T, 3))
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            picture[i * block:(i + 1) * block, j * block:(j + 1) * block] = colours[BLOCK_KINDS.get(kind, kind)]
    inside_partial = np.kron(np.array([[BLOCK_KINDS.get(k, k) == "diagonal" for k in row] for row in kinds]),
                             np.ones((block, block), dtype=bool))[:T, :T]
    picture[inside_partial & ~allowed.numpy()] = colours["skipped"]  # a partial block's forbidden pairs
    ax.imshow(picture, extent=(0, T, T, 0), interpolation="nearest")
    for edge in range(0, T + 1, block):  # white lines between the blocks
        ax.axhline(edge, color="white", linewidth=1.2)
        ax.axvline(edge, color="white", linewidth=1.2)
    ax.set_xlim(0, T)
    ax.set_ylim(T, 0)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(tr("axis.key"), fontsize=8)
    ax.tick_params(labelsize=7, length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=8.5, y=-0.04, va="top")


def blocks_figure(panels: Sequence[dict], block: int) -> Figure:
    """One panel per dict ``{"kinds": [[...]], "allowed": [T, T] bool, "title": str}``:
    blocks coloured by kind, the forbidden pairs inside partial blocks in light grey."""
    if isinstance(panels, dict) or not panels or any(
            not isinstance(p, dict) or {"kinds", "allowed", "title"} - set(p) for p in panels):
        raise ValueError(tr("ch8.err_panels", got=inputs.describe(panels)))
    block = inputs.whole_number("block", block, low=1)
    fig = Figure(figsize=(2.9 * len(panels), 3.4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        _draw_blocks(ax, panel["kinds"], block, panel["allowed"], panel["title"])
    axes[0].set_ylabel(tr("axis.query"), fontsize=8)
    handles = [Rectangle((0, 0), 1, 1, facecolor=TILE_COLOURS[k], edgecolor="#999999") for k in TILE_COLOURS]
    fig.legend(handles, [tr("ch8.block_full"), tr("ch8.block_partial"), tr("ch8.block_empty")],
               loc="outside lower center", ncols=3, fontsize=7.5, frameon=False)
    return fig


def reach_figure(reach: Sequence[torch.Tensor], titles: Sequence[str]) -> Figure:
    """Boolean [T, T] reachability matrices side by side (True: the output at the row's
    position depends on the input at the column's position); the last row is framed."""
    if isinstance(reach, torch.Tensor) and reach.dim() == 2:
        reach = [reach]  # one matrix
    if not reach or len(reach) != len(titles):
        raise ValueError(tr("ch8.err_titles", matrices=len(reach), titles=len(titles)))
    reach = [torch.as_tensor(inputs.as_matrix("reach", matrix) != 0) for matrix in reach]  # lists and 0/1 tables too
    fig = Figure(figsize=(2.7 * len(reach), 3.0), layout="constrained")
    axes = fig.subplots(1, len(reach), squeeze=False)[0]
    cmap = matplotlib.colors.ListedColormap(["#EEEEEE", "#4477AA"])
    for ax, matrix, title in zip(axes, reach, titles):
        T = matrix.size(-1)
        ax.imshow(matrix.numpy().astype(np.int8), cmap=cmap, vmin=0, vmax=1)
        ax.add_patch(Rectangle((-0.5, T - 1.5), T, 1, fill=False, edgecolor="black", linewidth=1.6))
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position("top")
        ax.set_xlabel(tr("ch8.input_position"), fontsize=8)
        ax.tick_params(labelsize=7, length=0)
        ax.set_title(title, fontsize=8.5, y=-0.04, va="top")
    axes[0].set_ylabel(tr("ch8.output_position"), fontsize=8)
    return fig


def batch_mask_figure(allowed: torch.Tensor, row_tokens: Sequence[Sequence[str]], titles: Sequence[str],
                      keep: torch.Tensor | None = None, axes_rects: list | None = None,
                      width_per_panel: float = 2.9, height: float = 3.6, values: bool = True) -> Figure:
    """The [B, 1, T, T] mask of a batch, one panel per row: ✓ may read, ✗ blocked; with
    ``keep`` ([B, T], True = real token), allowed pairs whose key is padding are hatched;
    ``values=False`` leaves out the ✓ / ✗ (colour only: blue may read, grey blocked)."""
    B = allowed.size(0)
    size = (width_per_panel * B, height)
    if axes_rects is None:
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(1, B, squeeze=False)[0]
    else:
        fig = Figure(figsize=size)
        axes = [fig.add_axes(rect) for rect in axes_rects]
    for b, ax in enumerate(axes):
        reads_pad = None if keep is None else allowed[b, 0] & ~keep[b][None, :]
        draw_matrix(ax, allowed[b, 0], row_tokens[b], kind="allowed", leaked=reads_pad, values=values,
                    title=titles[b])
    return fig


class MaskCombinationExplorer(widgets.VBox):
    """One small batch, every mask of chapter 8: a rule (causal, packed documents,
    sliding window, prefix-LM) combined with right padding, left padding, or left
    padding whose padding mask was forgotten."""

    RULES = ("causal", "documents", "window", "prefix")
    PADDINGS = ("right", "left", "left_forgotten")

    def __init__(self, lengths: Sequence[int], documents: Sequence[Sequence[int]], window: int = 3,
                 prefix: int = 3):
        self.lengths, self.window, self.prefix = list(lengths), window, prefix
        self.T = max(self.lengths)
        self.documents = [list(doc) for doc in documents]  # document id of each real token, per row
        self.rule_control = toggle([tr("ch8.rule_causal"), tr("ch8.rule_documents"),
                                    tr("ch8.rule_window", W=window), tr("ch8.rule_prefix", P=prefix)],
                                   tr("ch8.explorer_rule"))
        self.padding_control = toggle([tr("ch8.padding_right"), tr("ch8.padding_left"), tr("ch8.padding_forgotten")],
                                      tr("ch8.explorer_padding"))
        rects = frozen_layout(self.figure(1, 2))

        def frame(rule: int, padding: int):
            return image_frame(figure_png(self.figure(rule, padding, axes_rects=rects)))

        stack, self.links = nested_stack([self.rule_control, self.padding_control], frame)
        super().__init__([widgets.HTML(f"<b>{tr('ch8.explorer_title')}</b>"), self.rule_control,
                          self.padding_control, stack, widgets.HTML(f"<small>{tr('ch8.explorer_legend')}</small>")])

    def batch(self, padding: str) -> tuple[torch.Tensor, torch.Tensor, list[list[str]]]:
        """keep [B, T], document ids [B, T] (padding slots get -1) and the token labels of each row."""
        side = "right" if padding == "right" else "left"
        keep = keep_from_lengths(self.lengths, self.T, side)
        docs = torch.full(keep.shape, -1, dtype=torch.long)
        docs[keep] = torch.tensor([d for row in self.documents for d in row])
        labels = []
        for b, row in enumerate(self.documents):
            counts: dict[int, int] = {}
            names = []
            for d in row:
                counts[d] = counts.get(d, 0) + 1
                names.append(f"{'ABCDEFGH'[d]}{counts[d]}")
            pads = ["·"] * (self.T - len(row))
            labels.append(pads + names if side == "left" else names + pads)
        return keep, docs, labels

    def rule(self, rule: str, docs: torch.Tensor):
        causal = mask_mod("causal")
        return {"causal": causal, "documents": and_masks(causal, document_mod(docs)),
                "window": mask_mod("sliding_window", window=self.window),
                "prefix": or_masks(causal, mask_mod("prefix_lm", prefix=self.prefix))}[rule]

    def mask(self, rule: int, padding: int) -> tuple[torch.Tensor, torch.Tensor, list[list[str]]]:
        """The dense [B, 1, T, T] mask of one combination, with keep and the labels."""
        keep, docs, labels = self.batch(self.PADDINGS[padding])
        mod = self.rule(self.RULES[rule], docs)
        if self.PADDINGS[padding] != "left_forgotten":
            mod = and_masks(mod, padding_mod(keep))
        return batch_mask(mod, len(self.lengths), self.T), keep, labels

    def figure(self, rule: int, padding: int, axes_rects: list | None = None) -> Figure:
        allowed, keep, labels = self.mask(rule, padding)
        titles = [tr("ch8.row_caption", b=b, n=int(keep[b].sum()), empty=int((~allowed[b, 0].any(-1)).sum()),
                     pad=int((allowed[b, 0] & ~keep[b][None, :]).sum())) for b in range(allowed.size(0))]
        return batch_mask_figure(allowed, labels, titles, keep=keep, axes_rects=axes_rects)

    def __repr__(self) -> str:  # what nbval compares
        return f"MaskCombinationExplorer(lengths={self.lengths}, window={self.window}, prefix={self.prefix})"


def mask_combination_explorer(lengths: Sequence[int] = (8, 6, 3),
                              documents: Sequence[Sequence[int]] = ((0, 0, 0, 1, 1, 2, 2, 2), (0, 0, 0, 0, 1, 1),
                                                                    (0, 0, 0)),
                              window: int = 3, prefix: int = 3) -> MaskCombinationExplorer:
    """The chapter-8 explorer for a batch of rows of ``lengths`` tokens; ``documents`` gives
    the document id (0, 1, ...) of every real token of each row."""
    lengths = [inputs.whole_number("lengths", n, 1, 12) for n in lengths]
    if len(lengths) != len(documents) or any(n != len(doc) for n, doc in zip(lengths, documents)):
        raise ValueError(tr("ch8.err_explorer", lengths=lengths))
    documents = [[inputs.whole_number("documents", d, 0, 7) for d in doc] for doc in documents]
    window = inputs.whole_number("window", window, 1, max(lengths))
    prefix = inputs.whole_number("prefix", prefix, 0, max(lengths))
    return MaskCombinationExplorer(lengths, documents, window, prefix)


def tile_kinds_as_blocks(T: int, block: int) -> list[list[str]]:
    """Chapter 3's tile map in FlexAttention's words (full, partial, empty)."""
    T, block = inputs.whole_number("T", T, low=1), inputs.whole_number("block", block, low=1)
    back = {v: k for k, v in BLOCK_KINDS.items()}
    return [[back[kind] for kind in row] for row in tile_map(T, block)]
