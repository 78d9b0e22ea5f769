"""GPU-only checks: skipped without CUDA, run on the GPU runner by tools/gpu_check.sh.

What chapter 3 says about CUDA, checked where it can be: flash attention takes
``is_causal`` but not an explicit mask, fused attention needs a fraction of the
memory (``torch.cuda.max_memory_allocated``) and beats the explicit version in
bfloat16. ``ATTNLAB_REQUIRE_GPU=1`` turns the skip into a failure (the GPU
script sets it, so a machine without a working GPU cannot pass silently).
"""

import os

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.attention import causal_attention
from attnlab.blocked import blocked_attention
from attnlab.masks import causal_allowed


@pytest.fixture(autouse=True)
def cuda():
    if not torch.cuda.is_available():
        if os.environ.get("ATTNLAB_REQUIRE_GPU"):
            pytest.fail("ATTNLAB_REQUIRE_GPU is set, but torch sees no CUDA GPU")
        pytest.skip("no CUDA GPU here: the GPU runner runs these (tools/gpu_check.sh)")
    torch.manual_seed(0)


def qkv(T: int, dtype: torch.dtype, B: int = 1, H: int = 8, d: int = 64):
    return torch.randn(3, B, H, T, d, device="cuda", dtype=dtype).unbind(0)  # [B, H, T, d] each


def test_notebooks_choose_the_gpu():
    assert attnlab.pick_device().type == "cuda"


def test_sdpa_and_blocked_attention_on_the_gpu_equal_the_explicit_mask():
    q, k, v = qkv(256, torch.float32)
    expected = causal_attention(q, k, v)
    assert torch.allclose(F.scaled_dot_product_attention(q, k, v, is_causal=True), expected, atol=1e-4)
    out, counts = blocked_attention(q, k, v, block=64)
    assert torch.allclose(out, expected, atol=1e-4)


def test_flash_attention_takes_is_causal_but_not_an_explicit_mask():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip(f"{torch.cuda.get_device_name()}: flash attention needs compute capability 8.0+")
    q, k, v = qkv(1024, torch.float16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, attn_mask=causal_allowed(1024, device="cuda"))
    expected = causal_attention(q.float(), k.float(), v.float())
    assert (out.float() - expected).abs().max() < 5e-3


def peak_bytes(fn, *args) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak


def test_fused_attention_needs_a_fraction_of_the_gpu_memory():
    q, k, v = qkv(4096, torch.float16)
    explicit = peak_bytes(causal_attention, q, k, v)
    fused = peak_bytes(lambda *x: F.scaled_dot_product_attention(*x, is_causal=True), q, k, v)
    print(f"T=4096, 8 heads, float16: explicit {explicit / 2**20:.0f} MiB, SDPA {fused / 2**20:.1f} MiB")
    assert explicit > 10 * fused


def milliseconds(fn, *args, repeat: int = 10) -> float:
    for _ in range(3):
        fn(*args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


def test_fused_attention_in_bfloat16_is_faster_than_the_explicit_mask():
    q, k, v = qkv(4096, torch.bfloat16)
    explicit = milliseconds(causal_attention, q, k, v)
    fused = milliseconds(lambda *x: F.scaled_dot_product_attention(*x, is_causal=True), q, k, v)
    print(f"T=4096, 8 heads, bfloat16: explicit {explicit:.2f} ms, SDPA {fused:.2f} ms per call")
    assert fused < explicit
