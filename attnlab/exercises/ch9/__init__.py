"""Exercise 9 (exercises/src/09-ring-attention.md): the token -> rank layouts, the tiles each
rank computes at each ring step under the causal mask, folding an arriving K/V block
into the online softmax (pure tensor math in one process), and ``pass_on`` on a real ring:
graded by starting 2 or 3 gloo processes that run the course's ring attention with it.

One module per group of tasks that share code:

* :mod:`.layouts` — tasks 1 and 2, ``shard_positions`` and ``tiles_per_step``;
* :mod:`.folding` — task 3, ``fold_block``;
* :mod:`.passing` — task 4, ``pass_on`` on a gloo ring.
"""

from __future__ import annotations

from .folding import FOLD_BLOCK, FOLD_SIZES, fold_block, fold_cases
from .layouts import (EXERCISE, LAYOUT_CASES, SHARD_POSITIONS, TILE_CASES, TILES_PER_STEP, layout_cases,
                      shard_positions, tile_cases, tiles_per_step)
from .passing import (EDITED_MARK, PASS_ON, RING_CASES, RING_TIMEOUT_S, k_and_v_swapped, keeps_its_own, pass_on,
                      receives_first, ring_cases, taking_turns, wrong_direction)

TASKS = [SHARD_POSITIONS, TILES_PER_STEP, FOLD_BLOCK, PASS_ON]
