import pytest
import torch

from attnlab.multihead import (AttentionConfig, MultiHeadAttention, hand_built_heads, merge_heads,
                               merge_heads_without_transpose, split_heads, split_heads_without_transpose,
                               to_torch_mha)


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


def test_config_rejects_a_head_count_that_does_not_divide_d_model():
    with pytest.raises(ValueError, match=r"D = 128 .* H = 3"):
        AttentionConfig(d_model=128, n_heads=3)
    with pytest.raises(ValueError, match="H = 0"):
        AttentionConfig(d_model=128, n_heads=0)


def test_hand_built_heads_explains_what_it_cannot_build():
    with pytest.raises(ValueError, match="exactly 4 heads.*n_heads = 8"):
        hand_built_heads(6, AttentionConfig(d_model=128, n_heads=8))
    with pytest.raises(ValueError, match=r"T = 40 with head dimension d = 32"):
        hand_built_heads(40, AttentionConfig(d_model=128, n_heads=4))
    with pytest.raises(ValueError, match="T = 0"):
        hand_built_heads(0)


def test_hand_built_heads_error_is_in_the_readers_language():
    from attnlab import set_language

    try:
        set_language("de")
        with pytest.raises(ValueError, match="genau 4 Köpfe"):
            hand_built_heads(6, AttentionConfig(d_model=128, n_heads=8))
        set_language("zh")
        with pytest.raises(ValueError, match="只构造 4 个头"):
            hand_built_heads(6, AttentionConfig(d_model=128, n_heads=8))
    finally:
        set_language("en")


@pytest.mark.parametrize("T", [1, 2, 12, 40])
def test_hand_built_heads_grow_with_a_longer_sentence(T):
    module, x = hand_built_heads(T)  # no config: the head dimension grows to fit T
    with torch.no_grad():
        w = module.weights(x)[0]
    assert x.shape == (1, T, 4 * max(32, T))
    assert torch.equal(w[1].argmax(-1), torch.arange(T))
    assert (w.triu(1) == 0).all()


def future_leaks(forward, x):
    """leaks[t, p] is True when output t changes although only the later token p changed."""
    B, T, D = x.shape
    leaks = torch.zeros(T, T, dtype=torch.bool)
    with torch.no_grad():
        out = forward(x)
        for p in range(T):
            changed = x.clone()
            changed[:, p] = torch.randn(D)
            leaks[:, p] = (forward(changed) != out).any(dim=-1).any(dim=0)
    return leaks.triu(1)


def forward_with_bug(module, x, split_bug=False, merge_bug=False):
    import torch.nn.functional as F

    H = module.n_heads
    projected = [proj(x) for proj in (module.q_proj, module.k_proj, module.v_proj)]
    split = (lambda p: split_heads_without_transpose(p, H)) if split_bug else (lambda p: split_heads(p, H))
    out = F.scaled_dot_product_attention(*map(split, projected), is_causal=True)
    return module.out_proj(merge_heads_without_transpose(out) if merge_bug else merge_heads(out))


def leaking_rows(heads, T=6, **bug):
    torch.manual_seed(heads)
    module = MultiHeadAttention(AttentionConfig(d_model=32, n_heads=heads)).eval()
    x = torch.randn(2, T, 32)
    leaks = future_leaks(lambda x: forward_with_bug(module, x, **bug), x)
    return leaks.any(dim=1).nonzero().flatten().tolist(), leaks


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_the_correct_module_has_no_leak_at_all(heads):
    found, leaks = leaking_rows(heads)
    assert found == [] and not leaks.any()


@pytest.mark.parametrize("heads, rows", [(1, []), (2, [0, 1, 2]), (4, [0, 1, 2, 4]), (8, [0, 1, 2, 3, 4])])
def test_merge_bug_leak_pattern_depends_on_the_number_of_heads(heads, rows):
    found, leaks = leaking_rows(heads, merge_bug=True)
    assert found == rows
    # row t of the merged output holds (head, time) rows t*H ... t*H+H-1: it reads up to time ((t+1)*H-1) % T
    T = 6
    for t in range(T):
        times = [(t * heads + i) % T for i in range(heads)]
        assert leaks[t].nonzero().flatten().tolist() == [p for p in range(t + 1, T) if p <= max(times)]


def test_the_last_token_test_sees_only_leaks_from_the_last_token():
    _, leaks = leaking_rows(2, merge_bug=True)
    assert leaks[:, -1].nonzero().flatten().tolist() == [2]  # what changing only the last token reports
    assert leaks.any(dim=1).nonzero().flatten().tolist() == [0, 1, 2]  # what is really there


@pytest.mark.parametrize("heads", [2, 4, 8])
def test_split_bug_leaks_and_split_plus_merge_bug_is_causal_but_wrong(heads):
    assert leaking_rows(heads, split_bug=True)[0] != []
    assert leaking_rows(heads, split_bug=True, merge_bug=True)[0] == []
    torch.manual_seed(0)
    module = MultiHeadAttention(AttentionConfig(d_model=32, n_heads=heads)).eval()
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        assert not torch.allclose(forward_with_bug(module, x, split_bug=True, merge_bug=True), module(x))


def test_merge_without_transpose_reads_rows_of_the_head_time_grid():
    out = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)  # [B, H, T, d]
    wrong = merge_heads_without_transpose(out)
    assert wrong.shape == merge_heads(out).shape == (2, 4, 15)
    assert torch.equal(wrong[0, 1], out[0].reshape(12, 5)[3:6].flatten())  # rows t*H .. t*H+H-1
