"""The KV cache growing token by token (chapter 6).

Each frame shows one step of generation. Step ``prefill - 1`` is the prefill:
the prompt's ``prefill`` tokens are processed in one pass, with the causal
mask inside the prompt. Every later step ``t`` is a decode step: one new query
row (position t) and one new key/value column are computed; the keys and
values of positions 0..t-1 are read from the cache, and the rows of earlier
steps are never computed again. The top panel is the attention table (rows =
queries, columns = keys), the bottom panel the cache itself.

``cache_explorer(tokens)`` puts all frames in a pre-rendered ``Stack`` linked
to a toggle, so it responds on the static site too.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from .. import inputs
from ..i18n import tr
from .plotting import BLOCKED_GREY, wrap_text
from .png import figure_png
from .widgets import image_frame, nested_stack, toggle

# Slot states of the cache strip: empty, reused from the cache, computed in this step.
EMPTY, REUSED, NEW = 0, 1, 2
# Cell states of the attention table (the same colours where they mean the same thing).
NOT_YET, READS_CACHED, READS_NEW, EARLIER, BLOCKED = 0, 1, 2, 3, 4
CACHE_COLOURS = ListedColormap(["#f5f5f5", "#8fb3d9", "#e08214", "#c7dfbf", BLOCKED_GREY])
MIN_TOKENS, MAX_TOKENS = 2, 16


def cache_state(T: int, step: int, prefill: int = 1) -> np.ndarray:
    """[T] slot states at ``step`` (0-based): REUSED before it, NEW at it, EMPTY after.

    The prefill step (``step == prefill - 1``) computes all ``prefill`` slots at once.
    """
    T = inputs.whole_number("T", T, low=1)
    prefill = inputs.whole_number("prefill", prefill, 1, T)
    step = inputs.whole_number("step", step)
    if not prefill - 1 <= step < T:
        raise ValueError(tr("cache.bad_step", step=step, first=prefill - 1, last=T - 1))
    state = np.full(T, EMPTY)
    first_new = 0 if step == prefill - 1 else step
    state[:first_new] = REUSED
    state[first_new:step + 1] = NEW
    return state


def attention_state(T: int, step: int, prefill: int = 1) -> np.ndarray:
    """[T, T] cell states of the attention table at ``step``: which rows and columns are new."""
    slots = cache_state(T, step, prefill)
    first_new = int(np.argmax(slots == NEW))  # the first row (and column) computed in this step
    table = np.full((T, T), NOT_YET)
    rows, cols = np.indices((T, T))
    causal = cols <= rows
    table[(rows < first_new) & causal] = EARLIER  # rows of earlier steps: done, not computed again
    table[(rows < first_new) & ~causal] = BLOCKED
    now = (rows >= first_new) & (rows <= step)
    table[now & causal] = np.where(slots[cols] == NEW, READS_NEW, READS_CACHED)[now & causal]
    table[now & ~causal] = BLOCKED
    return table


def cache_figure(tokens: Sequence[str], step: int, prefill: int = 1) -> Figure:
    """The attention table and the cache at ``step``: new rows and columns in orange, reused ones blue-grey."""
    tokens = check_tokens(tokens)
    T = len(tokens)
    slots = cache_state(T, step, prefill)
    table = attention_state(T, step, prefill)
    fig = Figure(figsize=(1.6 + 0.5 * T, 1.9 + 0.36 * (T + 2)), layout="constrained")
    ax_table, ax_cache = fig.subplots(2, 1, height_ratios=[T, 2])
    ax_table.imshow(table, cmap=CACHE_COLOURS, vmin=0, vmax=BLOCKED, aspect="auto")
    ax_table.set_xticks(range(T), [f"{j} {tok}" for j, tok in enumerate(tokens)], rotation=60, ha="left",
                        rotation_mode="anchor", fontsize=8)
    ax_table.xaxis.tick_top()
    ax_table.set_yticks(range(T), [f"{i} {tok}" for i, tok in enumerate(tokens)], fontsize=8)
    ax_table.set_ylabel(tr("cache.queries"), fontsize=8)
    ax_table.set_xlabel(tr("cache.keys_axis"), fontsize=8)
    ax_table.xaxis.set_label_position("top")
    ax_table.set_xticks(np.arange(-0.5, T), minor=True)
    ax_table.set_yticks(np.arange(-0.5, T), minor=True)
    ax_table.grid(which="minor", color="white", linewidth=1)

    ax_cache.imshow(np.stack([slots, slots]), cmap=CACHE_COLOURS, vmin=0, vmax=BLOCKED, aspect="auto")
    for j in range(T):
        for i, label in enumerate(("K", "V")):
            if slots[j] != EMPTY:
                ax_cache.text(j, i, label, ha="center", va="center", fontsize=8,
                              color="white" if slots[j] == NEW else "#1a1a1a")
    ax_cache.set_yticks(range(2), [tr("cache.keys"), tr("cache.values")], fontsize=8)
    ax_cache.set_xticks(np.arange(-0.5, T), minor=True)
    ax_cache.grid(which="minor", axis="x", color="white", linewidth=1)
    for ax in (ax_table, ax_cache):
        ax.tick_params(which="both", length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
    ax_cache.set_xticks([])
    ax_cache.set_xlim(ax_table.get_xlim())
    if step == prefill - 1:
        caption = tr("cache.caption_prefill", step=step, new=prefill, empty=T - prefill)
    else:
        caption = tr("cache.caption", step=step, reused=step, earlier=step, empty=T - step - 1)
    fig.supxlabel(wrap_text(caption, 72 * fig.get_figwidth() - 20, 8.5), x=0.02, ha="left", fontsize=8.5)
    return fig


def check_tokens(tokens) -> list[str]:
    """2 to 16 token strings; a sentence is split into tokens."""
    tokens = inputs.as_tokens(tokens)
    if not MIN_TOKENS <= len(tokens) <= MAX_TOKENS:
        raise ValueError(tr("cache.bad_tokens", low=MIN_TOKENS, high=MAX_TOKENS, n=len(tokens)))
    return tokens


class CacheExplorer(widgets.VBox):
    """A toggle over the steps of generation; one pre-rendered picture per step."""

    def __init__(self, tokens: Sequence[str], prefill: int = 1):
        self.tokens = check_tokens(tokens)
        self.prefill = inputs.whole_number("prefill", prefill, 1, len(self.tokens))
        steps = list(range(self.prefill - 1, len(self.tokens)))
        control = toggle([f"t={s}" for s in steps], tr("cache.step"))
        stack, self.links = nested_stack(
            [control], lambda i: image_frame(figure_png(cache_figure(self.tokens, steps[i], self.prefill))))
        super().__init__([widgets.HTML(f"<b>{tr('cache.title')}</b>"), control, stack,
                          widgets.HTML(f"<small>{tr('cache.legend')}</small>")])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"CacheExplorer(tokens={self.tokens}, prefill={self.prefill})"


def cache_explorer(tokens: Sequence[str], prefill: int = 1) -> CacheExplorer:
    return CacheExplorer(tokens, prefill)
