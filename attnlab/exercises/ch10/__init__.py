"""Exercise 10 (exercises/src/10-auditing-a-real-model.md): the adapter of a Hugging Face model with left
padding, the check that finds the leaking models among five, and the check of cached against uncached logits.
The models are tiny ``transformers`` models built from configs (attnlab.audit), nothing is downloaded.

One module per part:

* :mod:`.models` — the models of the cases (leaky attentions, float64 copies, a window of one token);
* :mod:`.adapter` — task 1, ``padded_logits``;
* :mod:`.leaks` — task 2, ``leaky_models``;
* :mod:`.cache` — task 3, ``cache_differs``.
"""

from __future__ import annotations

from ...causality import eval_mode  # noqa: F401 - the tests and the notebook import it from here
from .adapter import PADDED_LOGITS, generate_positions, padded_logits
from .cache import CACHE_DIFFERS, cache_differs
from .leaks import LEAKY_MODELS, LINEUPS, leaky_models
from .models import ATOL, EXERCISE, POOL, build, register_small_leak

TASKS = [PADDED_LOGITS, LEAKY_MODELS, CACHE_DIFFERS]

__all__ = ["ATOL", "CACHE_DIFFERS", "EXERCISE", "LEAKY_MODELS", "LINEUPS", "PADDED_LOGITS", "POOL", "TASKS", "build",
           "cache_differs", "eval_mode", "generate_positions", "leaky_models", "padded_logits", "register_small_leak"]
