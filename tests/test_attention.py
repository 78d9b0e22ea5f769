import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab import attention, masks


@pytest.fixture
def qkv():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(3, 2, 3, 7, 8, generator=gen).unbind(0)  # [B, H, T, d] each


def test_scores_are_scaled_dot_products(qkv):
    q, k, _ = qkv
    scores = attention.attention_scores(q, k)
    assert scores.shape == (2, 3, 7, 7)
    assert torch.allclose(scores[1, 2, 3, 4], q[1, 2, 3] @ k[1, 2, 4] / math.sqrt(8))


def test_rows_sum_to_one_and_future_weights_are_exactly_zero(qkv):
    q, k, _ = qkv
    allowed = masks.causal_allowed(7)
    weights = attention.masked_softmax(attention.attention_scores(q, k), allowed)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 7))
    assert (weights[..., ~allowed] == 0).all()  # exactly 0, not merely small
    assert (weights[..., allowed] > 0).all()


def test_zero_instead_of_minus_inf_leaks_probability(qkv):
    q, k, _ = qkv
    allowed = masks.causal_allowed(7)
    scores = attention.attention_scores(q, k)
    leaked = attention.mask_scores(scores, allowed, fill=0.0).softmax(-1)
    assert (leaked[..., ~allowed] > 0).all()


def test_blocking_the_diagonal_gives_nan_in_row_zero(qkv):
    q, k, v = qkv
    out = attention.attention(q, k, v, masks.strictly_causal_allowed(7))
    assert torch.isnan(out[..., 0, :]).all()
    assert not torch.isnan(out[..., 1:, :]).any()


def test_explicit_causal_attention_equals_sdpa_and_prefix_loop(qkv):
    q, k, v = qkv
    explicit = attention.causal_attention(q, k, v)
    sdpa = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
    assert torch.allclose(explicit, sdpa, atol=1e-6)
    assert torch.allclose(explicit, attention.prefix_by_prefix_attention(q, k, v), atol=1e-6)


def test_output_at_t_ignores_later_positions(qkv):
    q, k, v = qkv
    k2, v2 = k.clone(), v.clone()
    k2[..., 4:, :] += 10.0
    v2[..., 4:, :] -= 3.0
    a = attention.causal_attention(q, k, v)
    b = attention.causal_attention(q, k2, v2)
    assert torch.equal(a[..., :4, :], b[..., :4, :])
    assert not torch.allclose(a[..., 4:, :], b[..., 4:, :])


def test_sdpa_boolean_mask_true_means_may_attend(qkv):
    q, k, v = qkv
    allowed = masks.causal_allowed(7)
    with_mask = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.allclose(with_mask, attention.causal_attention(q, k, v), atol=1e-6)


def test_multihead_attention_boolean_mask_true_means_blocked():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 1, batch_first=True, bias=False).eval()
    x = torch.randn(1, 6, 8)
    allowed = masks.causal_allowed(6)
    with torch.no_grad():
        _, right = mha(x, x, x, attn_mask=masks.to_blocked(allowed))
        _, copied = mha(x, x, x, attn_mask=allowed)  # the SDPA convention, wrongly
    assert (right[0][~allowed] == 0).all() and torch.allclose(right.sum(-1), torch.ones(1, 6))
    # the copied mask lets rows read only the future; the last row has nothing left -> NaN
    assert (copied[0, :-1][allowed[:-1]] == 0).all()
    assert torch.isnan(copied[0, -1]).all()


def test_additive_mask_means_the_same_in_both_apis():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(8, 2, batch_first=True, bias=False).eval()
    x = torch.randn(2, 5, 8)
    allowed = masks.causal_allowed(5)
    bias = masks.additive_mask(allowed)
    assert torch.equal(bias, nn.Transformer.generate_square_subsequent_mask(5))
    with torch.no_grad():
        a, _ = mha(x, x, x, attn_mask=bias)
        b, _ = mha(x, x, x, attn_mask=masks.to_blocked(allowed))
    assert torch.allclose(a, b, atol=1e-6)


def test_half_precision_softmax_is_computed_in_float32():
    scores = (torch.randn(4, 4096) * 4).to(torch.bfloat16)
    weights = attention.masked_softmax(scores, None)
    assert weights.dtype == torch.bfloat16
    reference = scores.float().softmax(-1).to(torch.bfloat16)
    assert torch.equal(weights, reference)


def test_minus_1e9_overflows_float16_and_finfo_min_gives_uniform_rows():
    assert torch.isneginf(torch.tensor(-1e9, dtype=torch.float16))
    row = torch.tensor([[0.5, 1.5, -0.3]])
    everything = torch.ones(1, 3, dtype=torch.bool)
    assert torch.isnan(row.masked_fill(everything, float("-inf")).softmax(-1)).all()
    uniform = row.masked_fill(everything, torch.finfo(torch.float32).min).softmax(-1)
    assert torch.allclose(uniform, torch.full((1, 3), 1 / 3))
