"""Figures and the explorer of chapters 4 and 5: loss curves of the leak, and [T, T] dependence maps.

Drawn with ``matplotlib.figure.Figure`` (never pyplot); every word comes from
the message catalog. Colour is never the only signal: the two loss curves
differ in line style, leaking cells of a map are hatched, and cells without
any dependence are grey.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..causality import TESTS, cut_map, dependence_map, first_leak, jacobian_map
from ..i18n import display_width as _width
from ..i18n import tr
from ..inputs import describe
from .plotting import BLOCKED_GREY, LEAK_EDGE
from .png import figure_png
from .widgets import image_frame, nested_stack, toggle

CAUSAL_COLOUR = "#4477AA"  # Paul Tol's bright blue
LEAKY_COLOUR = "#EE6677"  # Paul Tol's bright red
HONEST_COLOUR = "#228833"  # Paul Tol's bright green


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """Mean of each run of ``window`` values (shorter at the start)."""
    values = np.asarray(values, dtype=np.float64)
    sums = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return (sums[1:] - sums[np.arange(1, len(values) + 1) - counts]) / counts


def loss_curves_figure(causal: Sequence[float], unmasked: Sequence[float], honest: float | None = None,
                       window: int = 20) -> Figure:
    """Training loss per step of the causal and the unmasked model (thin: every step;
    thick: moving average), and, dashed, the unmasked model's loss when it must
    predict without the answer (``honest``)."""
    causal, unmasked = _losses("causal", causal), _losses("unmasked", unmasked)
    if len(causal) != len(unmasked):
        raise ValueError(tr("error.loss_curves_length", causal=len(causal), unmasked=len(unmasked)))
    fig = Figure(figsize=(7.0, 3.8), layout="constrained")
    ax = fig.add_subplot()
    steps = np.arange(1, len(causal) + 1)
    for losses, colour, style, label in ((causal, CAUSAL_COLOUR, "-", tr("ch4.curve_causal")),
                                         (unmasked, LEAKY_COLOUR, "--", tr("ch4.curve_unmasked"))):
        ax.plot(steps, losses, color=colour, alpha=0.25, linewidth=0.8, linestyle=style)
        ax.plot(steps, moving_average(losses, window), color=colour, linewidth=2.0, linestyle=style, label=label)
    if honest is not None:
        ax.axhline(honest, color=HONEST_COLOUR, linestyle=":", linewidth=2.0,
                   label=tr("ch4.curve_honest", loss=f"{honest:.2f}"))
    ax.set_xlabel(tr("ch4.xlabel"))
    ax.set_ylabel(tr("ch4.ylabel"))
    ax.set_title(tr("ch4.curve_title"), fontsize=10, loc="left")
    ax.set_xlim(0, len(causal))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8.5, loc="lower left")
    return fig


def _losses(name: str, values) -> list[float]:
    """One loss per training step (a list of numbers or a 1-D tensor), or a clear error."""
    if isinstance(values, torch.Tensor):
        values = values.tolist() if values.dim() == 1 else values
    if (isinstance(values, (str, bytes)) or not isinstance(values, Sequence)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
        raise TypeError(tr("error.loss_curves_values", name=name, got=describe(values)))
    return [float(v) for v in values]


MAP_RECT = (0.16, 0.16, 0.66, 0.66)  # axes [left, bottom, width, height]: one fixed layout for every frame
COLOURBAR_RECT = (0.85, 0.16, 0.03, 0.66)


def leak_map_figure(leak_map: torch.Tensor, title: str = "", atol: float = 0.0) -> Figure:
    """A [T, T] dependence map: row = output position t, column = input position s.

    Entries above ``atol`` are coloured on a log scale relative to the largest;
    the rest are grey (no dependence), NaN entries white (not measured). Entries above the diagonal that exceed
    ``atol`` are leaks: hatched and framed in orange. The diagonal is outlined.
    """
    data = leak_map.detach().to(torch.float64).numpy()
    T = data.shape[0]
    measured = ~np.isnan(data)
    data = np.nan_to_num(data, nan=0.0)
    fig = Figure(figsize=(4.6, 4.6))
    ax = fig.add_axes(MAP_RECT)
    top = float(data.max()) if data.max() > atol else 1.0
    shown = np.where(data > atol, data, np.nan)
    cmap = matplotlib.colormaps["Blues"].with_extremes(bad=BLOCKED_GREY)
    image = ax.imshow(shown, cmap=cmap, norm=LogNorm(top * 1e-4, top), aspect="equal")
    ax.imshow(np.where(measured, np.nan, 1.0), cmap=matplotlib.colors.ListedColormap(["white"]), aspect="equal")
    for t, s in zip(*np.nonzero((data > atol) & np.triu(np.ones((T, T), dtype=bool), k=1))):
        ax.add_patch(Rectangle((s - .5, t - .5), 1, 1, fill=False, hatch="////", edgecolor=LEAK_EDGE, linewidth=1.0))
    ax.plot([-.5, T - .5], [-.5, T - .5], color="black", linewidth=0.8)
    ticks = list(range(0, T, 2 if T > 10 else 1))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.tick_params(labelsize=7, length=0)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(tr("ch5.axis_input"), fontsize=8.5)
    ax.set_ylabel(tr("ch5.axis_output"), fontsize=8.5)
    colourbar = fig.colorbar(image, cax=fig.add_axes(COLOURBAR_RECT))
    colourbar.ax.tick_params(labelsize=7)
    if title:
        fig.text(0.16, 0.035, title, fontsize=8.5, ha="left", va="bottom", wrap=False)
    return fig


MAP_FUNCTIONS = {"prefix": dependence_map, "cut": cut_map, "jacobian": jacobian_map}
TOLERANCE = {"prefix": 1e-5, "cut": 1e-5, "jacobian": 0.0}


def _checked_map(test, leak_map) -> torch.Tensor:
    """``test`` one of TESTS and ``leak_map`` a square [T, T] tensor, or a clear error."""
    if test not in TESTS:
        raise ValueError(tr("error.leak_test", tests=", ".join(TESTS), got=describe(test)))
    if not isinstance(leak_map, torch.Tensor) or leak_map.dim() != 2 or leak_map.size(0) != leak_map.size(1):
        raise ValueError(tr("error.leak_map", test=test, got=describe(leak_map)))
    return leak_map


def verdict(test: str, leak_map: torch.Tensor) -> str:
    """One line: which test, and its first leak or that it found none."""
    leak = first_leak(_checked_map(test, leak_map), TOLERANCE[test])
    name = tr(f"ch5.test_{test}")
    if leak is None:
        return tr("ch5.verdict_causal", test=name)
    return tr("ch5.verdict_leak_cut" if test == "cut" else "ch5.verdict_leak", test=name, t=leak[0], s=leak[1])


def leaks_line(leaks: Mapping[str, tuple[int, int] | None]) -> str:
    """What :func:`attnlab.causality.find_leaks` found, in one line of the reader's language:
    every test and the first leaking pair (t, s) it found, ``-`` where it found none."""
    if not isinstance(leaks, Mapping) or set(leaks) != set(TESTS):
        raise ValueError(tr("error.leaks_line", tests=", ".join(TESTS), got=describe(leaks)))
    return tr("ch5.leaks_line", **{test: str(leaks[test]) if leaks[test] is not None else "-" for test in TESTS})


def leak_table(maps: Mapping[str, Mapping[str, torch.Tensor]]) -> str:
    """A text table of ``{model label: {test: map}}``: one row per model, one column per
    test; ``-`` means the test found nothing, ``(t, s)`` is the first leak it found."""
    if not isinstance(maps, Mapping) or not maps or not all(
            isinstance(per_test, Mapping) and set(TESTS) <= set(per_test) for per_test in maps.values()):
        raise ValueError(tr("error.leak_table", tests=", ".join(TESTS), got=describe(maps)))
    maps = {label: {test: _checked_map(test, per_test[test]) for test in TESTS} for label, per_test in maps.items()}
    header = [""] + [tr(f"ch5.test_{test}") for test in TESTS]
    rows = [header] + [[label] + [str(first_leak(per_test[test], TOLERANCE[test]) or "-") for test in TESTS]
                       for label, per_test in maps.items()]
    widths = [max(_width(row[i]) for row in rows) + 2 for i in range(len(header))]
    lines = [row[0] + " " * (widths[0] - _width(row[0]))
             + "".join(" " * (w - _width(cell)) + cell for w, cell in zip(widths[1:], row[1:])) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


class CausalityExplorer(widgets.VBox):
    """Dependence maps of several models under the three tests, every frame pre-rendered.

    ``models`` maps a label to a model; ``idx`` [1, T] is the sequence tested.
    """

    def __init__(self, models: Mapping[str, object], idx: torch.Tensor):
        if not isinstance(models, Mapping) or not models:
            raise ValueError(tr("ch5.explorer_models", got=describe(models)))
        self.labels = list(models)
        self.maps = {label: {test: MAP_FUNCTIONS[test](model, idx) for test in TESTS}
                     for label, model in models.items()}
        self.model_control = toggle(self.labels, tr("ch5.explorer_model"))
        self.test_control = toggle([tr(f"ch5.test_{test}") for test in TESTS], tr("ch5.explorer_test"))

        def frame(model_index: int, test_index: int) -> widgets.Image:
            label, test = self.labels[model_index], TESTS[test_index]
            leak_map = self.maps[label][test]
            fig = leak_map_figure(leak_map, f"{label}\n{verdict(test, leak_map)}", TOLERANCE[test])
            return image_frame(figure_png(fig))

        stack, self.links = nested_stack([self.model_control, self.test_control], frame)
        legend = widgets.HTML(f"<small>{tr('ch5.explorer_legend')}</small>")
        super().__init__([widgets.HTML(f"<b>{tr('ch5.explorer_title')}</b>"), self.model_control,
                          self.test_control, stack, legend])

    def __repr__(self) -> str:  # what nbval compares: short and deterministic
        return f"CausalityExplorer(models={self.labels}, tests={list(TESTS)})"


def causality_explorer(models: Mapping[str, object], idx: torch.Tensor) -> CausalityExplorer:
    """The chapter-5 explorer: ``{label: model}`` and one sequence ``idx`` [1, T]."""
    return CausalityExplorer(models, idx)
