"""attnlab: the runtime package of the course "Causal Attention, Step by Step".

Small on purpose: what a learner's notebook imports (masks, attention,
figures, widgets, messages in en/de/zh). Chapter notebooks start with
``attnlab.setup("en")`` (or "de", "zh").
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from .i18n import get_language, labeled, number, percent, set_language, tr

__all__ = ["setup", "pick_device", "set_language", "get_language", "tr", "labeled", "number", "percent", "tokens"]
__version__ = "0.1.0"


def pick_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def setup(lang: str = "en", seed: int = 0) -> None:
    """Language, fonts, seeds, one CPU thread and print options for a chapter notebook.

    ``ATTNLAB_TORCH_THREADS`` sets another thread count (the test suite runs the notebooks
    with two threads too, to prove that no stored output depends on it).
    """
    from .figures.fonts import register_fonts

    set_language(lang)
    register_fonts()
    # One CPU thread: no waiting for a second thread that a busy machine has descheduled (two
    # notebooks on two cores), and the course's models are small enough that more threads gain
    # little. Nothing printed depends on it (docs/decisions.md); timing cells and benchmarks
    # choose their threads themselves.
    torch.set_num_threads(torch_threads())
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_printoptions(precision=4, sci_mode=False, linewidth=100)
    import matplotlib

    matplotlib.rcParams["figure.dpi"] = 100
    matplotlib.rcParams["savefig.dpi"] = 100
    show_figures_as_png()


def torch_threads(environ=os.environ) -> int:
    """The CPU threads a notebook uses: 1, or ``ATTNLAB_TORCH_THREADS`` (a whole number >= 1)."""
    value = environ.get("ATTNLAB_TORCH_THREADS", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"ATTNLAB_TORCH_THREADS must be a whole number of at least 1, got {value!r}")
    return int(value)


def show_figures_as_png() -> None:
    """In IPython, a ``matplotlib.figure.Figure`` that ends a cell is shown as a
    compact PNG (the course draws with Figure, not pyplot, so no backend is
    involved and nothing is shown twice)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure

    from .figures.png import figure_png

    shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def tokens() -> list[str]:
    """The course's example sentence in the notebook's language, split into tokens."""
    return tr("sentence").split()
