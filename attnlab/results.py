"""The committed benchmark results (``make bench`` writes them), for chapters to quote.

``measured()`` returns the dictionary in ``attnlab/data/benchmarks.json``: the
machine it ran on, attention times and peak memory, FLOP ratios, decode
tokens/s with and without the KV cache, and the cache's memory. A chapter
prints numbers from here instead of typing them, so text and measurement
cannot drift apart.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from .i18n import tr


@lru_cache(maxsize=1)
def measured() -> dict:
    path = resources.files("attnlab").joinpath("data", "benchmarks.json")
    if not path.is_file():
        raise FileNotFoundError("attnlab/data/benchmarks.json is missing: run `make bench` (it writes it)")
    return json.loads(path.read_text("utf-8"))


def machine_line() -> str:
    """One line naming the machine the committed numbers come from."""
    m = measured()["machine"]
    gpu = f", {m['gpu']}" if m.get("gpu") else ""
    return tr("bench.machine", cpu=f"{m['cpu']}{gpu}", cores=m["cores"], torch=m["torch"], device=m["device"],
              date=measured()["date"])
