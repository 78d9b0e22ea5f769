"""One mask builder: every kind against a hand-written loop, and against FlexAttention."""

import pytest
import torch

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


def test_clear_errors():
    with pytest.raises(ValueError, match="unknown mask kind 'casual'"):
        build_mask("casual", 4)
    with pytest.raises(ValueError, match="prefix"):
        build_mask("prefix_lm", 4)
    with pytest.raises(ValueError, match="window"):
        build_mask("sliding_window", 4, window=0)
    with pytest.raises(ValueError, match="T_q <= T_kv"):
        build_mask("causal", 5, 3)


@pytest.mark.parametrize("kind", ["causal", "prefix_lm", "sliding_window", "bidirectional"])
def test_the_same_rule_drives_flex_attention(kind):
    from torch.nn.attention.flex_attention import create_block_mask

    extra = dict(prefix=40) if kind == "prefix_lm" else dict(window=48) if kind == "sliding_window" else {}
    T = 256
    block_mask = create_block_mask(mask_mod(kind, **extra), B=None, H=None, Q_LEN=T, KV_LEN=T, device="cpu")
    dense = build_mask(kind, T, **extra)
    assert torch.equal(block_mask.to_dense()[0, 0].bool(), dense.view(2, 128, 2, 128).any(-1).any(1))
