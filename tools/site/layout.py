"""Where the site is built, and its three languages with their titles."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent  # tools/site/layout.py -> the repository
BUILD = ROOT / "_build"
HTML = BUILD / "html"
TITLES = {"en": "Causal Attention, Step by Step",
          "de": "Kausale Attention, Schritt für Schritt",
          "zh": "一步步读懂因果注意力"}
