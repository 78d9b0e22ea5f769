"""Exercise 7, tasks 1 and 2: the prefix-LM mask and the three masks of an encoder-decoder."""

from __future__ import annotations

import torch

from ...grader import Case, Contract, Task
from .. import square_rule

EXERCISE = "07-bidirectional-attention"


# --------------------------------------------------------------------------
# 1. prefix_lm_mask(T, prefix) -> [T, T] bool: j <= i or j < prefix
#    (prefix = 0: the causal mask; prefix = T: the bidirectional mask)


def prefix_lm_mask(T, prefix):
    i = torch.arange(T)[:, None]  # [T, 1] query positions
    j = torch.arange(T)[None, :]  # [1, T] key positions
    return (j <= i) | (j < prefix)


def prefix_cases(generator):
    return [Case((T, prefix), label=f"T={T}, prefix={prefix}")
            for T, prefix in [(6, 2), (9, 4), (7, 0), (8, 8), (10, 1), (70, 6)]]  # T = 70: no 64 x 64 mask kept  # the notebook shows T=5, prefix=2


def _block_on_causal(T, prefix):
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    allowed[:prefix, :prefix] = True
    return allowed


def prefix_draw(d):
    T = d.size("T", 1, 200, edges=(1, 2, 65, 300))
    return Case((T, d.size("prefix", 0, T, edges=(0, 1, T))))


def seq2seq_draw(d):
    return Case((d.size("T_enc", 1, 100, edges=(1, 300)), d.size("T_dec", 1, 100, edges=(1, 300))))


PREFIX_LM_MASK = Task(
    id="ch7.prefix_lm_mask", exercise=EXERCISE, reference=prefix_lm_mask, cases=prefix_cases,
    contract=Contract(draw=prefix_draw),
    mutants={
        "prefix_rows_see_all": square_rule(lambda i, j, p: (j <= i) | (i < p)),
        "prefix_only": square_rule(lambda i, j, p: j < p),
        "strict_diagonal": square_rule(lambda i, j, p: (j < i) | (j < p)),
        "off_by_one": square_rule(lambda i, j, p: (j <= i) | (j <= p)),
        "causal_only": square_rule(lambda i, j, p: j <= i),
        "transposed": square_rule(lambda i, j, p: (i <= j) | (i < p)),
    },
    course_copies=("attnlab.mask_builder.build_mask", "attnlab.mask_builder.mask_mod"),
    alternatives=[
        _block_on_causal,
        lambda T, prefix: torch.ones(T, T, dtype=torch.bool).tril() | (torch.arange(T) < prefix),
        lambda T, prefix: torch.tensor([[j <= i or j < prefix for j in range(T)] for i in range(T)],
                                       dtype=torch.bool).reshape(T, T),
        lambda T, prefix: torch.where(torch.arange(T)[None, :] < prefix, True,
                                      torch.ones(T, T, dtype=torch.bool).tril()),
    ],
)


# --------------------------------------------------------------------------
# 2. encoder_decoder_masks(T_enc, T_dec) -> (encoder self [T_enc, T_enc],
#    decoder self [T_dec, T_dec], cross [T_dec, T_enc]), bool, True = may read


def encoder_decoder_masks(T_enc, T_dec):
    encoder = torch.ones(T_enc, T_enc, dtype=torch.bool)  # bidirectional: the whole input is known
    decoder = torch.ones(T_dec, T_dec, dtype=torch.bool).tril()  # causal: the output is written in order
    cross = torch.ones(T_dec, T_enc, dtype=torch.bool)  # every output position reads the whole input
    return encoder, decoder, cross


def seq2seq_cases(generator):
    return [Case((T_enc, T_dec), label=f"T_enc={T_enc}, T_dec={T_dec}")
            for T_enc, T_dec in [(6, 3), (4, 7), (9, 2), (5, 5), (2, 6)]]  # the notebook shows (3, 2)


def _seq2seq(encoder="bidirectional", decoder="causal", cross="all"):
    def masks(T_enc, T_dec):
        full_enc = torch.ones(T_enc, T_enc, dtype=torch.bool)
        full_dec = torch.ones(T_dec, T_dec, dtype=torch.bool)
        return (full_enc if encoder == "bidirectional" else full_enc.tril(),
                full_dec.tril() if decoder == "causal" else full_dec,
                {"all": torch.ones(T_dec, T_enc, dtype=torch.bool),
                 "causal": torch.ones(T_dec, T_enc, dtype=torch.bool).tril(),
                 "transposed": torch.ones(T_enc, T_dec, dtype=torch.bool)}[cross])

    return masks


ENCODER_DECODER_MASKS = Task(
    id="ch7.encoder_decoder_masks", exercise=EXERCISE, reference=encoder_decoder_masks, cases=seq2seq_cases,
    contract=Contract(draw=seq2seq_draw), output_names=("encoder", "decoder", "cross"),
    mutants={
        "encoder_causal": _seq2seq(encoder="causal"),
        "decoder_bidirectional": _seq2seq(decoder="bidirectional"),
        "cross_causal": _seq2seq(cross="causal"),
        "cross_transposed": _seq2seq(cross="transposed"),
    },
    course_copies=("attnlab.mask_builder.build_mask", "attnlab.mask_builder.mask_mod"),
    alternatives=[
        lambda T_enc, T_dec: [torch.full((T_enc, T_enc), True),
                              torch.arange(T_dec)[None, :] <= torch.arange(T_dec)[:, None],
                              torch.full((T_dec, T_enc), True)],
    ],
)
