"""The KV cache growing token by token (chapter 6).

Each frame shows one decode step t: the cached keys of positions 0..t-1 are
reused (grey-blue), the key of the new token t is computed (orange), the
slots after t are empty, and the one new query row reads every filled slot.
``cache_explorer(tokens)`` puts all frames in a pre-rendered ``Stack`` linked
to a toggle, so it responds on the static site too.
"""

from __future__ import annotations

import textwrap
from typing import Sequence

import ipywidgets as widgets
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from .i18n import tr
from .plotting import figure_png
from .widgets import image_frame, nested_stack, toggle

EMPTY, REUSED, NEW, READ = 0, 1, 2, 3
CACHE_COLOURS = ListedColormap(["#f2f2f2", "#8fb3d9", "#e08214", "#2166ac"])


def cache_state(T: int, step: int) -> np.ndarray:
    """[T] slot states at decode step ``step`` (0-based): REUSED before it, NEW at it, EMPTY after."""
    if not 0 <= step < T:
        raise ValueError(tr("cache.bad_step", step=step, T=T))
    state = np.full(T, EMPTY)
    state[:step] = REUSED
    state[step] = NEW
    return state


def cache_figure(tokens: Sequence[str], step: int, prefill: int = 1) -> Figure:
    """Keys and values in the cache at ``step``, and the new query's row of attention."""
    tokens = list(tokens)
    T = len(tokens)
    state = cache_state(T, step)
    if step < prefill:  # the prompt's keys and values are all written by one prefill pass
        state[:prefill] = NEW
        state[prefill:] = EMPTY
    fig = Figure(figsize=(1.0 + 0.62 * T, 2.9), layout="constrained")
    ax = fig.subplots()
    read = np.where(state != EMPTY, READ, EMPTY)  # the new query reads every filled slot
    ax.imshow(np.stack([state, state, read]), cmap=CACHE_COLOURS, vmin=0, vmax=READ, aspect="auto")
    for j in range(T):
        for i, label in enumerate(("K", "V")):
            text = {EMPTY: "", REUSED: label, NEW: label}[state[j]]
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if state[j] == NEW else "#1a1a1a")
        if state[j] != EMPTY:
            ax.text(j, 2, "✓", ha="center", va="center", fontsize=8, color="white")
    ax.set_xticks(range(T), [f"{j} {tok}" for j, tok in enumerate(tokens)], rotation=60, ha="left",
                  rotation_mode="anchor", fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(3), [tr("cache.keys"), tr("cache.values"), tr("cache.query_row")], fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    title = tr("cache.caption", step=step, new=int((state == NEW).sum()), reused=int((state == REUSED).sum()),
               empty=int((state == EMPTY).sum()))
    ax.set_title(textwrap.fill(title, width=int(9 * fig.get_figwidth())), fontsize=9, loc="left", y=-0.34)
    return fig


class CacheExplorer(widgets.VBox):
    """A toggle over decode steps; one pre-rendered picture per step."""

    def __init__(self, tokens: Sequence[str], prefill: int = 1):
        self.tokens = list(tokens)
        if not 2 <= len(self.tokens) <= 16:
            raise ValueError(tr("cache.bad_tokens", n=len(self.tokens)))
        if not 1 <= prefill <= len(self.tokens):
            raise ValueError(tr("cache.bad_prefill", prefill=prefill, T=len(self.tokens)))
        steps = list(range(prefill - 1, len(self.tokens)))
        control = toggle([f"t={s}" for s in steps], tr("cache.step"))
        stack, self.links = nested_stack(
            [control], lambda i: image_frame(figure_png(cache_figure(self.tokens, steps[i], prefill))))
        super().__init__([widgets.HTML(f"<b>{tr('cache.title')}</b>"), control, stack,
                          widgets.HTML(f"<small>{tr('cache.legend')}</small>")])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"CacheExplorer(tokens={self.tokens})"


def cache_explorer(tokens: Sequence[str], prefill: int = 1) -> CacheExplorer:
    return CacheExplorer(tokens, prefill)
