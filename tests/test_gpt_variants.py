"""Chapter 8's options of the small GPT: grouped-query / multi-query attention, RoPE, a sliding window."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.gpt import GPT, GPTConfig, KVCache
from small_models import small_gpt


def small(**overrides) -> GPT:
    return small_gpt(**{"block_size": 48, **overrides})  # longer windows for the RoPE and window tests


def test_enable_gqa_equals_repeat_interleave_and_not_repeat():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 8, 10, 16), torch.randn(2, 2, 10, 16), torch.randn(2, 2, 10, 16)
    grouped = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), is_causal=True)
    tiled = F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), is_causal=True)
    assert torch.allclose(grouped, repeated, atol=1e-6)
    assert not torch.allclose(grouped, tiled, atol=1e-2)  # head h must read K/V head h // G, not h % H_kv


@pytest.mark.parametrize("n_kv_head", [1, 2, 4])
def test_fewer_kv_heads_shrink_the_cache_and_the_projections(n_kv_head):
    model = small(n_kv_head=n_kv_head)
    cache = KVCache(model.config, batch_size=3, max_len=40)
    assert cache.k.shape == (2, 3, n_kv_head, 40, 8)
    assert cache.nbytes == 2 * 2 * 3 * n_kv_head * 40 * 8 * 4
    assert model.blocks[0].attn.k_proj.weight.shape == (n_kv_head * 8, 32)


@pytest.mark.parametrize("n_kv_head", [1, 2])
def test_gqa_explicit_equals_sdpa_and_cache_equals_recomputation(n_kv_head):
    a, b = small(n_kv_head=n_kv_head), small(n_kv_head=n_kv_head, attention="explicit")
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 50, (2, 12))
    assert torch.allclose(a(idx)[0], b(idx)[0], atol=1e-5)
    prompt = idx[:, :4]
    assert torch.equal(a.generate(prompt, 12), a.generate(prompt, 12, use_cache=False))


def test_default_config_has_the_same_parameters_as_before():
    assert small().num_parameters() == small(n_kv_head=4).num_parameters()
    assert small(n_kv_head=1).num_parameters() < small().num_parameters()


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_window_limits_what_the_last_position_depends_on(attention):
    model = small(window=3, n_layer=2, attention=attention)
    idx = torch.randint(0, 50, (1, 12))
    base = model(idx)[0][0, -1]
    depends = []
    for p in range(12):
        changed = idx.clone()
        changed[0, p] = (changed[0, p] + 1) % 50
        depends.append(not torch.allclose(model(changed)[0][0, -1], base, atol=1e-6))
    assert depends == [p >= 11 - 2 * (3 - 1) for p in range(12)]  # receptive field: L (W - 1) + 1


def test_window_model_with_a_full_cache_equals_recomputation():
    model = small(window=4, positions="rope", n_kv_head=2)
    prompt = torch.randint(0, 50, (2, 6))
    assert torch.equal(model.generate(prompt, 20), model.generate(prompt, 20, use_cache=False))


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="multiple of n_kv_head"):
        GPTConfig(vocab_size=10, n_head=4, n_kv_head=3)
    with pytest.raises(ValueError, match="positions"):
        GPTConfig(vocab_size=10, positions="alibi")
    with pytest.raises(ValueError, match="causal"):
        GPTConfig(vocab_size=10, window=4, causal=False)


def test_config_errors_speak_the_readers_language():
    import attnlab

    with pytest.raises(TypeError, match="n_kv_head must be a whole number"):
        GPTConfig(vocab_size=10, n_kv_head=2.0)
    with pytest.raises(TypeError, match="window must be a whole number"):
        GPTConfig(vocab_size=10, window="4")
    try:
        attnlab.set_language("de")
        with pytest.raises(ValueError, match="Vielfaches von n_kv_head=3"):
            GPTConfig(vocab_size=10, n_head=4, n_kv_head=3)
    finally:
        attnlab.set_language("en")
