"""The ring-buffer KV cache of a sliding-window model decodes exactly like recomputation."""

import pytest
import torch

from attnlab.gpt import GPT, GPTConfig, KVCache
from attnlab.window_cache import WindowKVCache, decode_greedy


def windowed(**overrides) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=50, block_size=64, n_layer=2, n_head=4, n_embd=32, window=5)
    config.update(overrides)
    return GPT(GPTConfig(**config)).eval()


@pytest.mark.parametrize("prompt_len", [1, 3, 5, 9])
@pytest.mark.parametrize("options", [{}, {"positions": "rope", "n_kv_head": 2}, {"attention": "explicit"}])
def test_ring_cache_decodes_like_recomputation(prompt_len, options):
    model = windowed(**options)
    prompt = torch.randint(0, 50, (2, prompt_len))
    recomputed = decode_greedy(model, prompt, 25)
    ring = WindowKVCache(model.config, batch_size=2)
    assert torch.equal(decode_greedy(model, prompt, 25, ring), recomputed)
    assert torch.equal(decode_greedy(model, prompt, 25, KVCache(model.config, 2, prompt_len + 25)), recomputed)
    assert ring.pos == prompt_len + 25 and ring.k.shape[3] == 5  # 5 slots, however long the text


def test_every_decode_step_has_the_logits_of_the_full_forward_pass():
    model = windowed(positions="rope")
    idx = torch.randint(0, 50, (1, 30))
    full = model(idx)[0]
    ring = WindowKVCache(model.config, 1)
    steps = [model(idx[:, :7], cache=ring)[0]]  # prefill longer than the window
    steps += [model(idx[:, t:t + 1], cache=ring)[0] for t in range(7, 18)]
    steps.append(model(idx[:, 18:30], cache=ring)[0])  # a chunk of 12 new tokens at once
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_the_ring_holds_the_last_w_positions_in_slot_p_mod_w():
    config = GPTConfig(vocab_size=10, n_layer=1, n_head=1, n_embd=2, window=3)
    ring = WindowKVCache(config, 1)
    for p in range(7):  # key of position p = [p, p]
        ring.update(0, torch.full((1, 1, 1, 2), float(p)), torch.zeros(1, 1, 1, 2))
        ring.advance(1)
    assert ring.k[0, 0, 0, :, 0].tolist() == [6.0, 4.0, 5.0]  # slots 0, 1, 2 hold positions 6, 4, 5


def test_memory_is_constant_and_follows_the_formula():
    config = GPTConfig(vocab_size=10, block_size=128, n_layer=3, n_head=4, n_kv_head=2, n_embd=32, window=16)
    ring = WindowKVCache(config, batch_size=2)
    assert ring.nbytes == 2 * 3 * 2 * 2 * 16 * 8 * 4  # 2 (K and V) x L x B x H_kv x W x d x 4 bytes
    assert ring.nbytes * 8 == KVCache(config, 2, 128).nbytes


def test_clear_errors():
    with pytest.raises(ValueError, match="window"):
        WindowKVCache(GPTConfig(vocab_size=10), 1)
    with pytest.raises(ValueError, match="3"):
        WindowKVCache(GPTConfig(vocab_size=10, window=5), 1, window=3)


def test_a_ring_for_a_model_without_a_window_is_refused_before_it_decodes_wrongly():
    torch.manual_seed(0)
    full_attention = GPT(GPTConfig(vocab_size=50, block_size=64, n_layer=2, n_head=4, n_embd=32)).eval()
    ring = WindowKVCache(full_attention.config, 1, window=4)
    with pytest.raises(ValueError, match="window is None"):
        full_attention(torch.zeros(1, 3, dtype=torch.long), cache=ring)
    with pytest.raises(ValueError, match="batch"):
        windowed()(torch.zeros(2, 3, dtype=torch.long), cache=WindowKVCache(windowed().config, 1))


def test_bad_sizes_and_wrong_objects_are_explained():
    config = GPTConfig(vocab_size=10, window=4)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        WindowKVCache(config, 0)
    with pytest.raises(TypeError, match="GPTConfig"):
        WindowKVCache("config", 1)
    model = windowed()
    prompt = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="steps must be at least 0"):
        decode_greedy(model, prompt, -1)
    with pytest.raises(TypeError, match="KVCache or a WindowKVCache"):
        decode_greedy(model, prompt, 2, "cache")
    with pytest.raises(ValueError, match="vocab_size - 1 = 49"):
        decode_greedy(model, torch.full((1, 3), 50), 2)
    with pytest.raises(ValueError, match="The prompt is empty"):
        decode_greedy(model, torch.zeros(1, 0, dtype=torch.long), 2)


@pytest.mark.parametrize("options", [{}, {"positions": "rope", "n_kv_head": 2}, {"attention": "explicit"}])
@pytest.mark.parametrize("ring_size", [5, 8, 9, 12, 20])
def test_every_step_has_the_recomputed_logits_for_rings_equal_to_and_larger_than_the_window(ring_size, options):
    """Logits, not greedy tokens: a ring larger than the window once attended in slot order under a
    mask that assumes time order, which shifted the logits (by up to 0.05) but rarely the argmax."""
    model = windowed(window=8, **options) if ring_size >= 8 else None
    if model is None:  # a ring smaller than the window would have dropped keys the model still reads
        with pytest.raises(ValueError, match=f"{ring_size}"):
            WindowKVCache(windowed(window=8).config, 1, window=ring_size)
        return
    idx = torch.randint(0, 50, (2, 45))
    full = model(idx)[0]  # [B, T, V]: recomputed with the whole sequence
    ring = WindowKVCache(model.config, 2, window=ring_size)
    steps = [model(idx[:, :3], cache=ring)[0]]  # a short prompt, then one token at a time
    steps += [model(idx[:, t:t + 1], cache=ring)[0] for t in range(3, 30)]  # wraps the ring past 12
    steps.append(model(idx[:, 30:45], cache=ring)[0])  # a chunk longer than the ring
    cached = torch.cat(steps, dim=1)
    assert ring.pos == 45 > 2 * ring_size
    assert torch.allclose(cached, full, atol=1e-5), f"ring {ring_size}, window 8: cached logits differ"
