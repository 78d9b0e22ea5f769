"""One mask builder: every kind against a hand-written loop, and against FlexAttention."""

import pytest
import torch

import attnlab
from attnlab.mask_builder import MASK_KINDS, build_mask, mask_mod
from attnlab.masks import causal_allowed, causal_allowed_from_indices


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
    for lang, words in (("en", english), ("de", german)):
        attnlab.setup(lang)
        try:
            with pytest.raises(exception) as error:
                call()
        finally:
            attnlab.setup("en")
        for word in words:
            assert word in str(error.value), (lang, str(error.value))


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
