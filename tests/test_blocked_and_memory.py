import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.blocked import blocked_attention, tile_kind, tile_map
from attnlab.memory import PeakMemory, peak_bytes  # noqa: F401


@pytest.mark.parametrize("T, block", [(1, 4), (16, 4), (50, 7), (64, 64), (100, 128)])
def test_blocked_causal_equals_sdpa(T, block):
    torch.manual_seed(T)
    q, k, v = torch.randn(3, 2, 3, T, 16).unbind(0)
    out, counts = blocked_attention(q, k, v, block=block)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5)
    n = math.ceil(T / block)
    assert counts.full + counts.diagonal + counts.skipped == n * n


def test_blocked_full_equals_unmasked_sdpa_and_computes_every_tile():
    q, k, v = torch.randn(3, 1, 2, 40, 8).unbind(0)
    out, counts = blocked_attention(q, k, v, block=8, causal=False)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5)
    assert counts.skipped == 0 and counts.full == 25


def test_tile_kinds_and_counts_for_square_tiles():
    assert tile_kind(0, 4, 4, 8) == "skipped"
    assert tile_kind(4, 8, 0, 4) == "full"
    assert tile_kind(4, 8, 4, 8) == "diagonal"
    kinds = tile_map(32, 8)
    flat = [k for row in kinds for k in row]
    assert (flat.count("full"), flat.count("diagonal"), flat.count("skipped")) == (6, 4, 6)
    assert all(kinds[i][i] == "diagonal" for i in range(4))


@pytest.mark.parametrize("n_tiles", [1, 2, 4, 8, 16])
def test_score_flops_ratio_is_n_plus_one_over_two_n(n_tiles):
    T, block, d = 16 * n_tiles, 16, 8
    q, k, v = torch.randn(3, 1, 1, T, d).unbind(0)
    _, causal = blocked_attention(q, k, v, block=block)
    _, full = blocked_attention(q, k, v, block=block, causal=False)
    assert full.score_flops == 2 * T * T * d
    assert causal.score_flops / full.score_flops == pytest.approx((n_tiles + 1) / (2 * n_tiles))


def row_block_attention(q, k, v, block=64):
    """A mutant that keeps the tiling of the queries but builds each query tile's
    whole [block, T] row block of scores: the thing flash attention never does."""
    T = q.size(-2)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    out = torch.empty_like(q)
    for start in range(0, T, block):
        scores = q[..., start:start + block, :] @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [..., block, T]
        weights = scores.masked_fill(~allowed[start:start + block], float("-inf")).softmax(dim=-1)
        out[..., start:start + block, :] = weights @ v
    return out


def test_blocked_attention_never_materializes_a_full_score_row():
    T, block, d = 512, 64, 16
    q, k, v = torch.randn(3, 1, 1, T, d).unbind(0)
    row_block_bytes = block * T * 4  # one [64, 512] float32 row block of scores: 128 KiB
    assert torch.allclose(row_block_attention(q, k, v, block), blocked_attention(q, k, v, block)[0], atol=1e-5)
    assert peak_bytes(row_block_attention, q, k, v, block) > row_block_bytes  # the bound catches the mutant
    assert peak_bytes(blocked_attention, q, k, v, block) < row_block_bytes


def test_peak_memory_does_not_count_views_of_inputs():
    x = torch.randn(1000, 1000)  # 4 MB, made before the measurement
    assert peak_bytes(lambda: x[:10]) == 0
    assert peak_bytes(lambda: x.t()) == 0
    assert peak_bytes(lambda: x[:, :10].contiguous()) == 1000 * 10 * 4  # a copy is an allocation
    assert peak_bytes(lambda: x.unbind(0)[3] * 2) == 1000 * 4


def test_peak_memory_keeps_a_storage_alive_while_a_view_of_it_lives():
    def view_outlives_its_base():
        a = torch.ones(256, 256)
        row = a[0]  # a view: the 256 KiB storage stays alive with it
        del a
        b = torch.ones(256, 256)
        return row, b

    assert peak_bytes(view_outlives_its_base) == 2 * 256 * 256 * 4


def test_peak_memory_counts_allocations_exactly():
    def two_matrices():
        a = torch.ones(256, 256)  # 256 KiB
        b = a * 2  # another 256 KiB while a is alive
        del a
        return b.sum()

    assert peak_bytes(two_matrices) == 2 * 256 * 256 * 4


def test_naive_memory_grows_quadratically_and_sdpa_linearly():
    def naive(q, k, v):
        scores = q @ k.transpose(-2, -1)
        return scores.softmax(-1) @ v

    ratios = {}
    for name, fn in (("naive", naive), ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))):
        small = peak_bytes(fn, *torch.randn(3, 1, 2, 512, 32).unbind(0))
        large = peak_bytes(fn, *torch.randn(3, 1, 2, 1024, 32).unbind(0))
        ratios[name] = large / small
    assert ratios["naive"] > 3.6 and ratios["sdpa"] < 2.1  # 4x vs 2x per doubling of T


@pytest.mark.parametrize("block", [0, -3])
def test_blocked_attention_rejects_a_block_size_below_one_clearly(block):
    q, k, v = torch.randn(3, 1, 8, 4).unbind(0)
    with pytest.raises(ValueError, match=f"block must be at least 1; got {block}"):
        blocked_attention(q, k, v, block=block)


@pytest.mark.parametrize("block", [2.5, True, "8"])
def test_blocked_attention_rejects_a_block_size_that_is_not_a_whole_number(block):
    q, k, v = torch.randn(3, 1, 8, 4).unbind(0)
    with pytest.raises(TypeError, match="block must be a whole number"):
        blocked_attention(q, k, v, block=block)


def test_blocked_attention_accepts_integer_like_block_sizes():
    import numpy as np

    q, k, v = torch.randn(3, 1, 8, 4).unbind(0)
    assert torch.allclose(blocked_attention(q, k, v, block=np.int64(3))[0], blocked_attention(q, k, v, block=3)[0])


def test_blocked_attention_rejects_shapes_that_do_not_fit():
    q, k, v = torch.randn(3, 1, 8, 4).unbind(0)
    with pytest.raises(ValueError, match="shapes do not fit"):
        blocked_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="shapes do not fit"):
        blocked_attention(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="at least two dimensions"):
        blocked_attention(q[0, 0], k, v)


def test_blocked_attention_with_more_queries_than_keys_raises_when_causal():
    q = torch.randn(1, 80, 8)
    k, v = torch.randn(2, 1, 50, 8).unbind(0)
    with pytest.raises(ValueError, match=r"T_q = 80 > T_kv = 50"):
        blocked_attention(q, k, v, block=16)
    out, _ = blocked_attention(q, k, v, block=16, causal=False)  # full attention needs no alignment
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5)


@pytest.mark.parametrize("T_q, T_kv, block", [(50, 80, 16), (1, 80, 16), (2, 5, 2), (7, 64, 8), (64, 64, 8)])
def test_blocked_attention_with_fewer_queries_is_lower_right_aligned(T_q, T_kv, block):
    from torch.nn.attention.bias import causal_lower_right

    torch.manual_seed(T_q)
    q_all, k, v = torch.randn(3, 2, 3, T_kv, 8).unbind(0)
    q = q_all[..., -T_q:, :]  # the last T_q positions
    expected = F.scaled_dot_product_attention(q_all, k, v, is_causal=True)[..., -T_q:, :]
    out, counts = blocked_attention(q, k, v, block=block)
    assert torch.allclose(out, expected, atol=1e-5)  # keys 50..79 are not ignored
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T_q, T_kv)),
                          atol=1e-5)
    assert counts.full + counts.diagonal + counts.skipped == math.ceil(T_q / block) * math.ceil(T_kv / block)


@pytest.mark.parametrize("T_q, T_kv", [(1, 1), (1, 9), (3, 9), (9, 9)])
def test_non_square_attention_with_causal_allowed_from_indices_is_right(T_q, T_kv):
    from torch.nn.attention.bias import causal_lower_right

    from attnlab.attention import attention
    from attnlab.masks import causal_allowed, causal_allowed_from_indices

    torch.manual_seed(T_q + T_kv)
    q_all, k, v = torch.randn(3, 2, 4, T_kv, 8).unbind(0)
    q = q_all[..., -T_q:, :]
    allowed = causal_allowed_from_indices(T_q, T_kv)
    assert torch.equal(allowed, causal_allowed(T_kv)[-T_q:])  # the last T_q rows of the square mask
    assert torch.equal(allowed, causal_lower_right(T_q, T_kv)._materialize())
    out = attention(q, k, v, allowed)
    assert torch.allclose(out, attention(q_all, k, v, causal_allowed(T_kv))[..., -T_q:, :], atol=1e-6)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allowed), atol=1e-6)
    if T_q < T_kv:  # is_causal=True is top-left aligned: not the same
        assert not torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-3)


@pytest.mark.parametrize("T_q, T_kv, block, causal", [(64, 64, 16, True), (50, 50, 7, True), (40, 40, 8, False),
                                                       (24, 64, 16, True)])
def test_attend_tiles_is_blocked_attention_with_explicit_positions(T_q, T_kv, block, causal):
    """Chapter 9 folds blocks in with attend_tiles: on one whole sequence it is bit for bit
    chapter 3's blocked_attention (output and counts), also with fewer queries than keys."""
    from attnlab.blocked import attend_tiles, finish_states, start_states

    torch.manual_seed(T_q + T_kv)
    q, k, v = torch.randn(2, 3, T_q, 16), torch.randn(2, 3, T_kv, 16), torch.randn(2, 3, T_kv, 8)
    expected, expected_counts = blocked_attention(q, k, v, block=block, causal=causal)
    states = start_states(q, v.shape[-1], block)
    counts = attend_tiles(states, q, k, v, torch.arange(T_kv - T_q, T_kv), torch.arange(T_kv), block, causal)
    assert torch.equal(finish_states(states, q.dtype), expected)
    assert counts == expected_counts


def test_attend_tiles_in_two_halves_equals_one_pass_and_survives_fully_masked_rows():
    """Keys may arrive in any order, and a tile may hide every key from some row (ring attention)."""
    from attnlab.blocked import attend_tiles, finish_states, start_states

    q, k, v = torch.randn(3, 1, 2, 32, 8).unbind(0)
    positions = torch.arange(32)
    states = start_states(q, 8, 4)
    late, early = slice(16, 32), slice(0, 16)  # the later keys first: rows 0..15 see nothing at first
    attend_tiles(states, q, k[..., late, :], v[..., late, :], positions, positions[late], 4)
    attend_tiles(states, q, k[..., early, :], v[..., early, :], positions, positions[early], 4)
    out = finish_states(states, q.dtype)
    assert not out.isnan().any()
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)


def test_start_states_explains_a_bad_query_tensor_or_block():
    from attnlab.blocked import start_states

    q = torch.randn(1, 2, 8, 4)
    with pytest.raises(TypeError, match=r"start_states takes this rank's queries q as a tensor \[\.\.\., S_q, d\]"):
        start_states(q.tolist(), 4, 2)  # ring.error_states_q
    with pytest.raises(ValueError, match="block must be at least 1; got 0"):
        start_states(q, 4, 0)
    assert len(start_states(q, 4, 3)) == 3  # tiles of 3, 3 and 2 queries
