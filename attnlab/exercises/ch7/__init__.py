"""Exercise 7 (exercises/src/07-bidirectional-attention.md): the prefix-LM mask, the three
masks of an encoder-decoder, BERT's 80/10/10 rule (graded by its statistics, since it
is random) and the MLM loss on the chosen positions only.

One module per group of tasks that share code:

* :mod:`.masks` — tasks 1 and 2, ``prefix_lm_mask`` and ``encoder_decoder_masks``;
* :mod:`.masked_lm` — tasks 3 and 4, ``bert_corrupt`` and ``mlm_loss`` (the label -100 they share).
"""

from __future__ import annotations

from .masked_lm import (BERT_CORRUPT, BERT_SIZES, IGNORE, LARGE, MLM_LOSS, MUTANT, RATE, SHARES, SOME, Z, bert_cases,
                        bert_corrupt, loss_cases, mlm_loss)
from .masks import (ENCODER_DECODER_MASKS, EXERCISE, PREFIX_LM_MASK, encoder_decoder_masks, prefix_cases,
                    prefix_lm_mask, seq2seq_cases)

TASKS = [PREFIX_LM_MASK, ENCODER_DECODER_MASKS, BERT_CORRUPT, MLM_LOSS]
