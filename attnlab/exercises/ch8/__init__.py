"""Exercise 8 (exercises/src/08-masks-in-real-models.md): the causal + key-padding mask of a
left-padded batch, the packed-document mask, the sliding-window mask, grouped-query
attention compared with SDPA's ``enable_gqa``, and a decode step with RoPE and a KV cache.
Masks follow SDPA: True = may attend.

One module per group of tasks that share code:

* :mod:`.masks` — tasks 1 to 3, the padded, packed-document and sliding-window masks;
* :mod:`.attention` — tasks 4 and 5, grouped-query attention and the RoPE decode step.
"""

from __future__ import annotations

from .attention import GQA_ATTENTION, ROPE_DECODE_STEP, gqa_attention, rope_decode_step
from .masks import (DOCUMENT_MASK, EXERCISE, PADDED_CAUSAL_MASK, SLIDING_WINDOW_MASK, document_mask,
                    padded_causal_mask, sliding_window_mask)

TASKS = [PADDED_CAUSAL_MASK, DOCUMENT_MASK, SLIDING_WINDOW_MASK, GQA_ATTENTION, ROPE_DECODE_STEP]
