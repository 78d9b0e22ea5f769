import pytest
import torch

from attnlab.multihead import (AttentionConfig, MultiHeadAttention, hand_built_heads, merge_heads,
                               split_heads, split_heads_without_transpose, to_torch_mha)


def test_split_and_merge_shapes_and_round_trip():
    x = torch.randn(2, 6, 128)  # [B, T, D]
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 6, 32)
    assert torch.equal(heads[1, 2, 3], x[1, 3, 64:96])  # head 2 of token 3 = features 64..96
    assert torch.equal(merge_heads(heads), x)


def test_split_without_transpose_has_the_right_shape_and_the_wrong_rows():
    x = torch.randn(1, 6, 128)
    wrong = split_heads_without_transpose(x, 4)
    assert wrong.shape == split_heads(x, 4).shape
    assert torch.equal(wrong[0, 0, 1], x[0, 0, 32:64])  # "time step 1" holds token 0's features
    assert not torch.equal(wrong, split_heads(x, 4))


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16])
def test_parameter_count_does_not_depend_on_the_number_of_heads(heads):
    module = MultiHeadAttention(AttentionConfig(d_model=128, n_heads=heads))
    assert sum(p.numel() for p in module.parameters()) == 4 * 128 * 128


def test_matches_torch_multihead_attention_with_copied_weights():
    torch.manual_seed(0)
    for bias in (False, True):
        module = MultiHeadAttention(AttentionConfig(d_model=64, n_heads=8, bias=bias)).eval()
        x = torch.randn(3, 9, 64)
        blocked = ~torch.ones(9, 9, dtype=torch.bool).tril()  # MHA: True = blocked
        with torch.no_grad():
            theirs, _ = to_torch_mha(module)(x, x, x, attn_mask=blocked, need_weights=False)
            assert (module(x) - theirs).abs().max() < 1e-6


def test_module_is_causal_and_weights_are_consistent():
    torch.manual_seed(1)
    module = MultiHeadAttention(AttentionConfig(d_model=32, n_heads=4)).eval()
    x = torch.randn(1, 7, 32)
    x2 = x.clone()
    x2[0, 5:] = torch.randn(2, 32)
    with torch.no_grad():
        assert torch.equal(module(x)[0, :5], module(x2)[0, :5])
        weights = module.weights(x)
    assert weights.shape == (1, 4, 7, 7)
    assert (weights.triu(1) == 0).all() and torch.allclose(weights.sum(-1), torch.ones(1, 4, 7))


def test_hand_built_heads_look_where_they_say():
    module, x = hand_built_heads(6)
    with torch.no_grad():
        w = module.weights(x)[0]  # [H, T, T]
    T = 6
    assert torch.allclose(w[0, 1:].argmax(-1), torch.arange(T - 1))  # previous token
    assert torch.equal(w[1].argmax(-1), torch.arange(T))  # itself
    assert torch.equal(w[2].argmax(-1), torch.zeros(T, dtype=torch.long))  # first token
    assert torch.allclose(w[3], torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None])  # even spread
    assert w[:3].max(-1).values.min() > 0.99
