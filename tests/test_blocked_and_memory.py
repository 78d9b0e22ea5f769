import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.blocked import blocked_attention, tile_kind, tile_map
from attnlab.memory import PeakMemory, peak_bytes


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


def test_blocked_attention_never_materializes_a_full_score_row():
    T, block = 512, 64
    q, k, v = torch.randn(3, 1, 1, T, 16).unbind(0)
    with PeakMemory() as mem:
        blocked_attention(q, k, v, block=block)
    assert mem.peak < T * T * 4 / 4  # far below one [T, T] float32 matrix


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
