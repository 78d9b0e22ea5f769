"""Figures and the explorer of chapter 10 (auditing a Hugging Face model)."""

from __future__ import annotations

from typing import Mapping, Sequence

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from ..audit import PADDINGS, Adapter, test_maps
from ..causality import TESTS
from .causality import TOLERANCE, leak_map_figure, verdict
from ..i18n import tr
from ..inputs import describe
from .plotting import draw_matrix, wrap_text
from .png import figure_png
from .widgets import image_frame, nested_stack, toggle


def masks_figure(panels: Sequence[tuple[torch.Tensor, Sequence[str], str]], width_per_panel: float = 2.6,
                 height: float = 3.2) -> Figure:
    """One panel per ``(allowed [T_q, T_kv], key labels, title)``: ✓ may read, ✗ blocked."""
    fig = Figure(figsize=(width_per_panel * len(panels), height), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (allowed, labels, title) in zip(axes, panels):
        draw_matrix(ax, allowed.to(torch.float32), list(labels), kind="allowed", title=title)
    return fig


TITLE_WIDTH = 270.0  # points: the text width under a leak map (4.6 in wide, text from 16 % of it)


class AuditExplorer(widgets.VBox):
    """Dependence maps of Hugging Face models: model × padding × test, every frame pre-rendered.

    ``models`` maps a label to a model (decoder-only); ``idx`` [1, T] is the sequence tested.
    """

    def __init__(self, models: Mapping[str, object], idx: torch.Tensor):
        if not isinstance(models, Mapping) or not models:
            raise ValueError(tr("ch5.explorer_models", got=describe(models)))
        self.labels = list(models)
        self.maps = {(label, padding): test_maps(Adapter(model, padding), idx)
                     for label, model in models.items() for padding in PADDINGS}
        self.model_control = toggle(self.labels, tr("ch5.explorer_model"))
        self.padding_control = toggle([tr(f"ch10.padding_{p}") for p in PADDINGS], tr("audit.col_padding"))
        self.test_control = toggle([tr(f"ch5.test_{test}") for test in TESTS], tr("ch5.explorer_test"))

        def frame(model_index: int, padding_index: int, test_index: int) -> widgets.Image:
            label, padding, test = self.labels[model_index], PADDINGS[padding_index], TESTS[test_index]
            leak_map = self.maps[label, padding][test]
            title = wrap_text(f"{label}, {tr(f'ch10.padding_{padding}')}\n{verdict(test, leak_map)}",
                              TITLE_WIDTH, 8.5)  # the verdict wraps instead of running off the frame
            return image_frame(figure_png(leak_map_figure(leak_map, title, TOLERANCE[test])))

        stack, self.links = nested_stack([self.model_control, self.padding_control, self.test_control], frame)
        legend = widgets.HTML(f"<small>{tr('ch5.explorer_legend')}</small>")
        super().__init__([widgets.HTML(f"<b>{tr('ch10.explorer_title')}</b>"), self.model_control,
                          self.padding_control, self.test_control, stack, legend])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"AuditExplorer(models={self.labels}, paddings={list(PADDINGS)}, tests={list(TESTS)})"


def audit_explorer(models: Mapping[str, object], idx: torch.Tensor) -> AuditExplorer:
    """The chapter-10 explorer: ``{label: model}`` and one sequence ``idx`` [1, T]."""
    return AuditExplorer(models, idx)
