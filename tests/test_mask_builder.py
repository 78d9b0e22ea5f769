"""One mask builder: every kind against a hand-written loop, and against FlexAttention."""

import pytest
import torch

import attnlab
from attnlab.mask_builder import MASK_KINDS, build_mask, mask_mod
from attnlab.masks import causal_allowed, causal_allowed_from_indices
from language_checks import assert_message_in_languages


def by_hand(kind, T_q, T_kv, prefix=None, window=None):
    offset = 0 if kind == "cross" else T_kv - T_q
    rule = {"causal": lambda i, j: j <= i, "strict": lambda i, j: j < i, "bidirectional": lambda i, j: True,
            "cross": lambda i, j: True, "prefix_lm": lambda i, j: j <= i or j < prefix,
            "sliding_window": lambda i, j: i - window < j <= i}[kind]
    return torch.tensor([[rule(offset + i, j) for j in range(T_kv)] for i in range(T_q)])


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("T_q,T_kv", [(1, 1), (5, 5), (1, 7), (3, 8), (6, 6)])
def test_every_kind_matches_its_rule(kind, T_q, T_kv):
    extra = dict(prefix=3) if kind == "prefix_lm" else dict(window=2) if kind == "sliding_window" else {}
    assert torch.equal(build_mask(kind, T_q, T_kv, **extra), by_hand(kind, T_q, T_kv, **extra))


def test_causal_agrees_with_chapter_1():
    assert torch.equal(build_mask("causal", 6), causal_allowed(6))
    assert torch.equal(build_mask("causal", 2, 5), causal_allowed_from_indices(2, 5))
    assert not build_mask("strict", 4)[0].any()  # row 0 reads nothing


def test_natural_readings_are_accepted():
    assert torch.equal(build_mask("causal", torch.tensor(4)), causal_allowed(4))  # a 0-d integer tensor
    assert torch.equal(build_mask("prefix_lm", 4, prefix=9), build_mask("bidirectional", 4))  # prefix beyond T


CASES = [  # (exception, call, English words, German words)
    (ValueError, lambda: build_mask("casual", 4), ["kind must be one of causal, strict", "got 'casual'"],
     ["kind muss einer dieser Werte sein"]),
    (ValueError, lambda: build_mask("prefix_lm", 4), ["A prefix_lm mask needs prefix", 'build_mask("prefix_lm", 8, prefix=3)'],
     ["Eine prefix_lm-Maske braucht prefix"]),
    (ValueError, lambda: build_mask("causal", 4, window=2), ["window only applies to the sliding_window mask",
                                                             'kind="sliding_window"'], ["window gilt nur für"]),
    (ValueError, lambda: build_mask("sliding_window", 4, window=0), ["window must be at least 1; got 0"],
     ["window muss mindestens 1 sein"]),
    (TypeError, lambda: build_mask("sliding_window", 4, window=2.0), ["window must be a whole number; got 2.0"],
     ["window muss eine ganze Zahl sein"]),
    (ValueError, lambda: build_mask("prefix_lm", 4, prefix=-1), ["prefix must be at least 0; got -1"],
     ["prefix muss mindestens 0 sein"]),
    (ValueError, lambda: build_mask("causal", 0), ["T_q must be at least 1; got 0"], ["T_q muss mindestens 1 sein"]),
    (TypeError, lambda: build_mask("causal", 4.0), ["T_q must be a whole number; got 4.0"],
     ["T_q muss eine ganze Zahl sein"]),
    (ValueError, lambda: build_mask("causal", 5, 3), ["more queries than keys (T_q = 5 > T_kv = 3)", 'kind="cross"'],
     ["nicht mehr Queries als Keys"]),
]


@pytest.mark.parametrize("exception, call, english, german", CASES)
def test_bad_input_gets_a_clear_message_in_the_readers_language(exception, call, english, german):
    assert_message_in_languages(exception, call, {"en": english, "de": german})


def test_cross_may_have_more_queries_than_keys():
    assert build_mask("cross", 5, 3).all()


@pytest.mark.parametrize("kind", ["causal", "prefix_lm", "sliding_window", "bidirectional"])
def test_the_same_rule_drives_flex_attention(kind):
    from torch.nn.attention.flex_attention import create_block_mask

    extra = dict(prefix=40) if kind == "prefix_lm" else dict(window=48) if kind == "sliding_window" else {}
    T = 256
    block_mask = create_block_mask(mask_mod(kind, **extra), B=None, H=None, Q_LEN=T, KV_LEN=T, device="cpu")
    dense = build_mask(kind, T, **extra)
    assert torch.equal(block_mask.to_dense()[0, 0].bool(), dense.view(2, 128, 2, 128).any(-1).any(1))


# Chapter 8: masks that differ per row of a batch, combined with and / or.

from attnlab.mask_builder import (and_masks, batch_mask, document_mod, keep_from_lengths,  # noqa: E402
                                  or_masks, padding_mod)


def test_keep_from_lengths_puts_the_padding_right_or_left():
    assert keep_from_lengths([3, 1], 4).tolist() == [[True, True, True, False], [True, False, False, False]]
    assert keep_from_lengths([3, 1], 4, "left").tolist() == [[False, True, True, True],
                                                              [False, False, False, True]]


def test_causal_and_padding_is_kv_le_q_and_a_real_key():
    keep = keep_from_lengths([5, 3, 2], 5, "left")
    dense = batch_mask(and_masks(mask_mod("causal"), padding_mod(keep)), 3, 5)
    expected = torch.tensor([[[[j <= i and bool(keep[b, j]) for j in range(5)] for i in range(5)]] for b in range(3)])
    assert dense.shape == (3, 1, 5, 5) and torch.equal(dense, expected)
    assert (~dense[2, 0, :3]).all()  # left padding: the three pad queries of row 2 read nothing


def test_document_mask_is_block_diagonal_and_or_masks_unions():
    docs = torch.tensor([[0, 0, 0, 1, 1, 2]])
    dense = batch_mask(and_masks(mask_mod("causal"), document_mod(docs)), 1, 6)[0, 0]
    expected = torch.tensor([[j <= i and docs[0, i] == docs[0, j] for j in range(6)] for i in range(6)])
    assert torch.equal(dense, expected)
    union = batch_mask(or_masks(mask_mod("causal"), mask_mod("prefix_lm", prefix=3)), 1, 6)[0, 0]
    assert torch.equal(union, build_mask("prefix_lm", 6, prefix=3))


def test_batch_mask_with_fewer_queries_than_keys_is_lower_right():
    keep = keep_from_lengths([7, 4], 7, "left")
    rule = and_masks(mask_mod("causal"), padding_mod(keep))
    assert torch.equal(batch_mask(rule, 2, 2, 7), batch_mask(rule, 2, 7)[:, :, -2:])


def explicit(q, k, v, allowed):
    weights = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~allowed, float("-inf")).softmax(-1)
    return weights @ v


def test_sdpa_with_the_dense_batch_mask_matches_explicit_attention_and_zeroes_empty_rows():
    torch.manual_seed(0)
    keep = keep_from_lengths([8, 5, 2], 8, "left")
    allowed = batch_mask(and_masks(mask_mod("causal"), padding_mod(keep)), 3, 8)  # [B, 1, T, T]
    q, k, v = torch.randn(3, 3, 2, 8, 16).unbind(0)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    reference = explicit(q, k, v, allowed)
    empty = ~allowed.any(-1)  # [B, 1, T]: pad queries of left padding
    assert empty.sum() == 3 + 6 and torch.isnan(reference[empty.expand(3, 2, 8)]).all()
    assert torch.allclose(out[~empty.expand(3, 2, 8)], reference[~empty.expand(3, 2, 8)], atol=1e-6)
    assert (out[empty.expand(3, 2, 8)] == 0).all()  # torch >= 2.5: a fully masked row gives 0, not NaN


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_runs_the_same_batched_rules():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(1)
    B, T, block = 2, 32, 8
    keep = keep_from_lengths([32, 20], T, "right")
    docs = torch.tensor([[0] * 12 + [1] * 14 + [2] * 6, [0] * 20 + [1] * 12])
    rule = and_masks(mask_mod("causal"), padding_mod(keep), document_mod(docs))
    dense = batch_mask(rule, B, T)  # [B, 1, T, T]
    block_mask = create_block_mask(rule, B=B, H=None, Q_LEN=T, KV_LEN=T, device="cpu", BLOCK_SIZE=block)
    tiles = dense.view(B, 1, T // block, block, T // block, block)
    assert torch.equal(block_mask.to_dense().bool(), tiles.any(-1).any(-2))  # blocks with any allowed pair
    q, k, v = torch.randn(3, B, 2, T, 16).unbind(0)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    assert torch.allclose(flex_attention(q, k, v, block_mask=block_mask), sdpa, atol=1e-5)


def test_batched_rules_answer_bad_input_clearly():
    with pytest.raises(ValueError, match="left"):
        keep_from_lengths([2], 4, "middle")
    with pytest.raises(ValueError, match="T=4"):
        keep_from_lengths([5], 4)
    with pytest.raises(ValueError, match=r"\[B, T\] bool"):
        padding_mod(torch.ones(4))
    with pytest.raises(ValueError, match="integer"):
        document_mod(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="T_q <= T_kv"):
        batch_mask(mask_mod("causal"), 1, 5, 3)
    with pytest.raises(ValueError, match="at least one"):
        and_masks()


def test_batched_rule_errors_speak_the_readers_language():
    import attnlab

    try:
        attnlab.set_language("de")
        with pytest.raises(ValueError, match="muss 'right' oder 'left' sein"):
            keep_from_lengths([2], 4, "middle")
        with pytest.raises(ValueError, match="ganzzahliger"):
            document_mod(torch.zeros(1, 4))
    finally:
        attnlab.set_language("en")


@pytest.mark.parametrize("call, error, match", [
    (lambda: keep_from_lengths([3.5, 2], 5), ValueError, "lengths"),
    (lambda: keep_from_lengths([3, 2], "5"), TypeError, "T must be a whole number"),
    (lambda: padding_mod([[True, False]]), TypeError, r"\[B, T\] bool"),
    (lambda: document_mod([[0, 1]]), TypeError, "document_ids"),
    (lambda: batch_mask(mask_mod("causal"), 1.5, 3), TypeError, "B must be a whole number"),
    (lambda: batch_mask("causal", 1, 3), TypeError, "mask_mod function"),
    (lambda: and_masks(mask_mod("causal"), "padding"), TypeError, "mask_mod function"),
    (lambda: batch_mask(padding_mod(torch.ones(2, 4, dtype=torch.bool)), 2, 6), ValueError, "T_kv=6"),
    (lambda: batch_mask(padding_mod(torch.ones(2, 4, dtype=torch.bool)), 3, 4), ValueError, "B=3"),
], ids=["float-lengths", "T-str", "keep-list", "docs-list", "B-float", "kind-name", "and-str", "keep-short",
        "keep-few-rows"])
def test_what_a_reader_gets_wrong_is_explained_not_a_torch_traceback(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_an_all_padding_row_and_a_window_wider_than_the_text_are_fine():
    keep = keep_from_lengths([3, 0], 3)
    allowed = batch_mask(and_masks(mask_mod("causal"), padding_mod(keep)), 2, 3)
    assert allowed[0].any() and not allowed[1].any()
    assert torch.equal(build_mask("sliding_window", 4, window=10), build_mask("causal", 4))
