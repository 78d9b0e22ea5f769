"""Explorers driven by Python callbacks, for kernels where ``Stack`` + ``jslink`` fail.

The explorers in ``widgets.py`` pre-render every frame and let the browser
switch between them (``Stack`` + ``jslink``), which also works on the static
site. Two live kernels cannot do that:

- ipywidgets 7 (which Colab has shipped) has no ``Stack``;
- Colab loads widget JavaScript through its own manager, where ``jslink``
  has had gaps.

There the explorer shows one frame and a Python callback swaps it when a
control changes; frames are drawn when first asked for and kept. The static
site never sees this mode: the stored notebooks are executed with ipywidgets
8 and ``Stack``.

``ATTNLAB_WIDGETS=callbacks`` (or ``stack``) overrides the choice.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

import ipywidgets as widgets

MODE_VARIABLE = "ATTNLAB_WIDGETS"


def use_callbacks() -> bool:
    """True on Colab, with ipywidgets 7 (no ``Stack``), or when asked for."""
    if not hasattr(widgets, "Stack"):
        return True  # ipywidgets 7: nothing else can work
    mode = os.environ.get(MODE_VARIABLE, "auto")
    if mode in ("callbacks", "stack"):
        return mode == "callbacks"
    return "google.colab" in sys.modules


def callback_stack(controls: Sequence[widgets.Widget], render: Callable[..., widgets.Widget]
                   ) -> tuple[widgets.Box, list]:
    """A box that shows ``render(i0, i1, ...)`` for the controls' current
    ``index`` values and follows them through ``observe`` callbacks.

    Same call as ``widgets.nested_stack``; returns the box and no browser links.
    """
    frames: dict[tuple[int, ...], widgets.Widget] = {}

    def current() -> widgets.Widget:
        key = tuple(control.index for control in controls)
        if key not in frames:
            frames[key] = render(*key)
        return frames[key]

    box = widgets.Box([current()])

    def follow(change) -> None:
        box.children = [current()]

    for control in controls:
        control.observe(follow, names="index")
    return box, []
