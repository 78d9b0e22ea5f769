"""Rotary position embeddings: rotation, relative scores, the position offset of a decode step."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.gpt import GPT, GPTConfig
from attnlab.rope import apply_rope, rope_angles


def test_position_0_is_the_identity_and_rotation_keeps_the_length():
    x = torch.randn(2, 3, 5, 8)
    assert torch.equal(apply_rope(x, torch.zeros(5, dtype=torch.long)), x)
    rotated = apply_rope(x, torch.arange(5))
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    assert rope_angles(torch.arange(3), 8).shape == (3, 4)


def test_scores_depend_only_on_the_distance():
    q, k = torch.randn(2, 1, 1, 6, 16).unbind(0)
    pos = torch.arange(6)
    scores = apply_rope(q, pos) @ apply_rope(k, pos).transpose(-2, -1)
    shifted = apply_rope(q, pos + 37) @ apply_rope(k, pos + 37).transpose(-2, -1)
    assert torch.allclose(scores, shifted, atol=1e-4)
    unrotated = q @ k.transpose(-2, -1)
    assert not torch.allclose(scores, unrotated, atol=1e-2)


def test_per_row_positions_broadcast_over_heads():
    x = torch.randn(2, 3, 4, 8)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    rows = apply_rope(x, positions)
    assert torch.equal(rows[1], apply_rope(x[1:], torch.arange(5, 9))[0])


def rope_model(**overrides):
    torch.manual_seed(0)
    config = dict(vocab_size=40, block_size=32, n_layer=2, n_head=4, n_embd=32, positions="rope")
    config.update(overrides)
    return GPT(GPTConfig(**config)).eval()


@pytest.mark.parametrize("n_kv_head", [None, 2])
def test_the_rope_gpt_decodes_with_a_cache_like_recomputation(n_kv_head):
    model = rope_model(n_kv_head=n_kv_head)
    assert model.position_embedding is None
    prompt = torch.randint(0, 40, (2, 5))
    assert torch.equal(model.generate(prompt, 10), model.generate(prompt, 10, use_cache=False))


def test_a_decode_step_that_restarts_positions_at_0_is_caught():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 9, 16).unbind(0)  # [B, H, T, d]
    positions = torch.arange(9)
    full = F.scaled_dot_product_attention(apply_rope(q, positions), apply_rope(k, positions), v, is_causal=True)
    k_cache = apply_rope(k[:, :, :8], positions[:8])  # stored already rotated

    def decode_last(position):  # one new token (position 8) over the cached keys 0..7
        new = torch.tensor([position])
        keys = torch.cat([k_cache, apply_rope(k[:, :, 8:], new)], dim=2)
        return F.scaled_dot_product_attention(apply_rope(q[:, :, 8:], new), keys, v)

    assert torch.allclose(decode_last(8), full[:, :, 8:], atol=1e-5)  # the right offset
    assert not torch.allclose(decode_last(0), full[:, :, 8:], atol=1e-2)  # positions restarted at 0


def test_odd_head_size_is_refused():
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.randn(1, 1, 2, 5), torch.arange(2))
    with pytest.raises(ValueError, match="even"):
        GPTConfig(vocab_size=10, n_embd=12, n_head=4, positions="rope")


def test_wrong_positions_or_inputs_are_explained():
    x = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match="one per token"):
        apply_rope(x, torch.arange(5))
    with pytest.raises(TypeError, match="float tensor"):
        apply_rope([[1.0, 2.0]], torch.arange(1))
    assert torch.equal(apply_rope(x, [0, 1, 2]), apply_rope(x, torch.arange(3)))  # a list of positions is fine


def test_float_positions_are_named_with_their_dtype():
    with pytest.raises(ValueError, match=r"one per token: \[T\] or \[B, T\] with T=3; got Tensor \(3,\) torch.float32"):
        apply_rope(torch.randn(1, 1, 3, 4), torch.tensor([0.0, 1.0, 2.0]))
