"""The committed benchmark results (``make bench`` writes them), for chapters to quote.

``measured()`` returns the dictionary in ``attnlab/data/benchmarks.json``: the
machine it ran on, attention times and peak memory, FLOP ratios, decode
tokens/s with and without the KV cache, and the cache's memory.
``measured("cuda")`` returns the GPU run's (``attnlab/data/benchmarks_cuda.json``,
written by ``BENCH=1 bash tools/gpu_check.sh`` on a GPU machine), which adds the
bfloat16 rows of flash attention and compiled FlexAttention. A chapter prints
numbers from here instead of typing them, so text and measurement cannot drift
apart.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from .i18n import tr
from .inputs import describe

FILES = {"cpu": "benchmarks.json", "cuda": "benchmarks_cuda.json"}
WRITTEN_BY = {"cpu": "run `make bench`", "cuda": "run `BENCH=1 bash tools/gpu_check.sh` on a GPU machine"}


@lru_cache(maxsize=2)
def measured(device: str = "cpu") -> dict:
    if device not in FILES:
        raise ValueError(tr("error.bench_device", got=describe(device)))
    path = resources.files("attnlab").joinpath("data", FILES[device])
    if not path.is_file():
        raise FileNotFoundError(f"attnlab/data/{FILES[device]} is missing: {WRITTEN_BY[device]} (it writes it)")
    return json.loads(path.read_text("utf-8"))


def machine_line(device: str = "cpu") -> str:
    """One line naming the machine the committed numbers come from."""
    result = measured(device)
    m = result["machine"]
    cpu = tr("bench.cpu_and_gpu", cpu=m["cpu"], gpu=m["gpu"]) if m.get("gpu") else m["cpu"]
    return tr("bench.machine", cpu=cpu, cores=m["cores"], torch=m["torch"], device=m["device"], date=result["date"])
