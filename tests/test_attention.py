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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_softmax_accumulates_in_float32_and_rounds_only_the_weights(dtype):
    gen = torch.Generator().manual_seed(0)
    scores = (torch.randn(4, 4096, generator=gen) * 4).to(dtype)
    reference = scores.float().softmax(-1)  # float32 from start to end
    # chapter 1: PyTorch already accumulates in float32; the result is the float32 softmax, rounded
    assert torch.equal(scores.softmax(-1), reference.to(dtype))
    assert torch.equal(attention.masked_softmax(scores, None), reference.to(dtype))
    # dtype=torch.float32 changes only the output: the weights are not rounded
    assert torch.equal(scores.softmax(-1, dtype=torch.float32), reference)
    # a softmax whose running sum is kept in half precision gives other weights, so the checks above can fail
    exps = torch.exp(scores - scores.max(-1, keepdim=True).values)  # [4, 4096] in dtype
    running = torch.zeros(4, dtype=dtype)
    for column in exps.unbind(-1):
        running = running + column
    assert not torch.equal(exps / running[:, None], reference.to(dtype))
    if dtype == torch.float16:  # rounding the output costs the smallest weights
        assert (reference == 0).sum() == 0 and (reference.to(dtype) == 0).sum() > 0


def test_non_square_attention_with_index_mask_equals_the_last_rows_of_full_causal_attention(qkv):
    q, k, v = qkv  # [B, H, 7, d]: 4 cached positions, then 3 new queries
    allowed = masks.causal_allowed_from_indices(3, 7)  # [3, 7], diagonal in the lower-right corner
    new_rows = attention.attention(q[..., 4:, :], k, v, allowed)
    assert new_rows.shape == (2, 3, 3, 8)
    assert torch.allclose(new_rows, attention.causal_attention(q, k, v)[..., 4:, :], atol=1e-6)
    lower_right = F.scaled_dot_product_attention(q[..., 4:, :], k, v, attn_mask=allowed)
    assert torch.allclose(new_rows, lower_right, atol=1e-6)
    top_left = F.scaled_dot_product_attention(q[..., 4:, :], k, v, is_causal=True)  # not the same mask
    assert not torch.allclose(new_rows, top_left, atol=1e-3)


def test_minus_1e9_overflows_float16_and_finfo_min_gives_uniform_rows():
    assert torch.isneginf(torch.tensor(-1e9, dtype=torch.float16))
    row = torch.tensor([[0.5, 1.5, -0.3]])
    everything = torch.ones(1, 3, dtype=torch.bool)
    assert torch.isnan(row.masked_fill(everything, float("-inf")).softmax(-1)).all()
    uniform = row.masked_fill(everything, torch.finfo(torch.float32).min).softmax(-1)
    assert torch.allclose(uniform, torch.full((1, 3), 1 / 3))
