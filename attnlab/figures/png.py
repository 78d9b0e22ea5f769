"""Every figure of the course as a compact PNG: palette-quantized, so the static site stays small."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure
from PIL import Image

from .. import inputs
from ..i18n import tr


def _encode_png(rgb: np.ndarray, colours: int = 96, palette: Image.Image | None = None) -> bytes:
    image = Image.fromarray(np.ascontiguousarray(rgb))
    if palette is None:
        quantized = image.quantize(colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    else:
        quantized = image.quantize(palette=palette, dither=Image.Dither.NONE)
    out = io.BytesIO()
    quantized.save(out, format="png")
    return out.getvalue()


def figure_png(fig: Figure, dpi: int = 100, colours: int = 96) -> bytes:
    """PNG bytes of a figure, palette-quantized to stay small on the static site."""
    if not isinstance(fig, Figure):
        raise TypeError(tr("error.figure", got=inputs.describe(fig)))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor="white")
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    return _encode_png(np.asarray(image), colours)
