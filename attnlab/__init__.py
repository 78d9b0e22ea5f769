"""attnlab: the runtime package of the course "Causal Attention, Step by Step".

Small on purpose: what a learner's notebook imports (masks, attention,
figures, widgets, messages in en/de/zh). Chapter notebooks start with
``attnlab.setup("en")`` (or "de", "zh").
"""

from __future__ import annotations

import random

from .numerics import pin_cpu_numerics

pin_cpu_numerics()  # before torch computes anything: the same float sums on every x86-64 CPU

import numpy as np  # noqa: E402
import torch  # noqa: E402

from .i18n import get_language, labeled, number, percent, set_language, tr

__all__ = ["setup", "pick_device", "set_language", "get_language", "tr", "labeled", "number", "percent", "tokens"]
__version__ = "0.1.0"


def pick_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def setup(lang: str = "en", seed: int = 0) -> None:
    """Language, fonts, seeds, one CPU thread and print options for a chapter notebook."""
    from .fonts import register_fonts

    set_language(lang)
    register_fonts()
    # One CPU thread: the same float sums on every machine (stored outputs match), and no
    # waiting for a second thread on a busy machine. The course's models are small enough that
    # more threads gain little; timing cells and benchmarks choose their threads themselves.
    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_printoptions(precision=4, sci_mode=False, linewidth=100)
    import matplotlib

    matplotlib.rcParams["figure.dpi"] = 100
    matplotlib.rcParams["savefig.dpi"] = 100
    show_figures_as_png()


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

    from .plotting import figure_png

    shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def tokens() -> list[str]:
    """The course's example sentence in the notebook's language, split into tokens."""
    return tr("sentence").split()
