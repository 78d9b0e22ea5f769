"""GPU-only checks: skipped without CUDA, run on the GPU runner by tools/gpu_check.sh.

What chapters 3, 6 and 8 say about CUDA, checked where it can be: flash attention takes
``is_causal`` but not an explicit mask, fused attention needs a fraction of the
memory (``torch.cuda.max_memory_allocated``) and beats the explicit version in
bfloat16 (chapter 3); a float32 decode step runs on the memory-efficient backend, named
by its kernel in the profiler, and deterministic mode runs cuBLAS without
CUBLAS_WORKSPACE_CONFIG (chapter 6); a row with nothing to read is finite on every CUDA
backend that takes a mask, zero on the math and memory-efficient ones, and on cuDNN
attention over all keys (or zero, where a later torch fills with -inf); a varlen kernel
keeps packed documents apart; transformers' compiled flex_attention path keeps packed
documents apart only with use_cache=False and no attention_mask; and the block mask
compiled FlexAttention runs on leaves the empty blocks out while its result equals SDPA
with the dense mask (chapter 8; which blocks the kernel visits is counted from the block
mask, not measured).
``ATTNLAB_REQUIRE_GPU=1`` turns the skip into a failure (the GPU script sets it,
so a machine without a working GPU cannot pass silently).
"""

import os

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.attention import causal_attention
from attnlab.blocked import blocked_attention
from attnlab.masks import causal_allowed
from attnlab.memory import cuda_peak_bytes


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


def test_fused_attention_needs_a_fraction_of_the_gpu_memory():
    q, k, v = qkv(4096, torch.float16)
    explicit = cuda_peak_bytes(causal_attention, q, k, v)
    fused = cuda_peak_bytes(lambda *x: F.scaled_dot_product_attention(*x, is_causal=True), q, k, v)
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


# What chapter 8 says only for the CPU backends, checked on every CUDA backend
# that takes a boolean mask: a row with nothing to read (left padding) is never
# NaN, every other row equals the explicit softmax, and the row is zero on the
# math and memory-efficient backends. cuDNN's is finite but not zero (the first
# GPU run, an H200 with torch 2.11.0+cu130: chapter 8 says so); harmless for the
# same reason as Hugging Face's unmasked rows: no real query reads a pad.
MASKED_BACKENDS = {"MATH": True, "EFFICIENT_ATTENTION": True, "CUDNN_ATTENTION": False}  # backend: row is zero


def left_padded_mask(lengths: list[int], T: int) -> torch.Tensor:
    """[B, 1, T, T] bool: causal, and each row's padding keys (its first T - length slots) are hidden."""
    keys = torch.arange(T, device="cuda")
    real_key = keys[None, :] >= (T - torch.tensor(lengths, device="cuda"))[:, None]  # [B, T]
    return causal_allowed(T, device="cuda")[None, None] & real_key[:, None, None, :]


@pytest.mark.parametrize("backend_name", MASKED_BACKENDS)
def test_a_fully_masked_row_is_finite_and_on_math_and_efficient_zero(backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    T, lengths = 64, [64, 40, 9]
    allowed = left_padded_mask(lengths, T)  # [3, 1, T, T]
    q, k, v = qkv(T, torch.float16, B=len(lengths))
    try:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    except RuntimeError as error:  # no kernel of this backend for these inputs on this GPU
        pytest.skip(f"{backend_name} has no kernel for a bool mask in float16 here: {error}")
    real = allowed.any(-1).expand(-1, q.shape[1], -1)  # [B, H, T]: queries with something to read
    assert (~real).sum() > 0, "the test needs rows with nothing to read"
    assert torch.isfinite(out).all(), f"{backend_name} returns NaN or inf for a fully masked row"
    zero = bool((out[~real] == 0).all())
    print(f"{backend_name}: the rows with nothing to read are {'zero' if zero else 'finite, not zero'}")
    if MASKED_BACKENDS[backend_name]:
        assert zero, f"{backend_name}: a fully masked row is not zero"
    scores = (q.float() @ k.float().transpose(-2, -1)) / q.shape[-1] ** 0.5
    explicit = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v.float()
    assert torch.allclose(out[real].float(), explicit[real], atol=5e-3)


# Chapter 8 explains cuDNN's fully masked rows from PyTorch's source: for cuDNN, SDPA turns a
# boolean mask into an additive one with the finite -65504 (convert_boolean_attn_mask_cudnn in
# aten/src/ATen/native/transformers/attention.cpp, torch 2.11), so every score of a row with nothing
# to read drops by the same amount and the row becomes attention over all its keys. The first GPU
# run recorded only "finite, not zero"; this measures the inference. A version that fills with -inf
# instead returns zero; the chapter advises relying on neither value, so either passes, and the test
# prints which one this torch gives.
def test_cudnn_turns_a_fully_masked_row_into_attention_over_all_keys_or_zero():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    T, lengths = 64, [64, 40, 9]
    allowed = left_padded_mask(lengths, T)  # [3, 1, T, T]
    q, k, v = qkv(T, torch.float16, B=len(lengths))
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    except RuntimeError as error:
        pytest.skip(f"cuDNN has no kernel for a bool mask in float16 here: {error}")
    empty = ~allowed.any(-1).expand(-1, q.shape[1], -1)  # [B, H, T]: queries with nothing to read
    unmasked = F.scaled_dot_product_attention(q.float(), k.float(), v.float())  # every key, no mask
    as_unmasked = torch.allclose(out[empty].float(), unmasked[empty], atol=5e-3)
    zero = bool((out[empty] == 0).all())
    print(f"cuDNN, torch {torch.__version__}: rows with nothing to read are "
          f"{'attention over all keys' if as_unmasked else 'zero' if zero else 'neither'}")
    assert as_unmasked or zero, "cuDNN's fully masked rows are neither unmasked attention nor zero: update chapter 8"


# Chapter 6 explains why its GPU decode rows slow down from context 2048 to 4096: the model is
# float32, which rules out the flash kernel (and cuDNN's), so SDPA runs the memory-efficient backend
# for the decode step's one query per head (the cache's keys are a slice of a longer buffer).
def test_a_float32_decode_step_runs_on_the_memory_efficient_backend():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    heads, d, context = 6, 64, 4096
    q = torch.randn(1, heads, 1, d, device="cuda")  # [B, H, 1, d]: one new token
    cache = torch.randn(2, 1, heads, context + 32, d, device="cuda")  # [K/V, B, H, max_len, d]
    k, v = cache[0, :, :, :context], cache[1, :, :, :context]  # what KVCache.update returns
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel(backend), pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        efficient = F.scaled_dot_product_attention(q, k, v)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as recorded:
        default = F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
    kernels = sorted({event.name for event in recorded.events() if event.device_type.name == "CUDA"})
    assert any("fmha_cutlassF" in name for name in kernels), kernels  # the memory-efficient forward kernel, by name
    assert torch.equal(default, efficient)  # the default picks it


# Chapter 6: PyTorch's reproducibility promise on CUDA is deterministic mode. torch 2.13's documentation no
# longer asks for CUBLAS_WORKSPACE_CONFIG (PyTorch gives every cuBLAS handle and stream its own workspace,
# pytorch/pytorch#161749), so cuBLAS calls run in deterministic mode without the variable, and the same
# call twice gives the same bits. A fresh interpreter, because cuBLAS reads the variable when CUDA starts.
def test_deterministic_mode_runs_cublas_without_cublas_workspace_config():
    import subprocess
    import sys

    script = ("import torch\n"
              "torch.use_deterministic_algorithms(True)\n"
              "a, b = torch.randn(2, 512, 512, device='cuda', generator=torch.Generator(device='cuda').manual_seed(0))\n"
              "print(torch.equal(a @ b, a @ b), torch.__version__)\n")
    env = {key: value for key, value in os.environ.items() if key != "CUBLAS_WORKSPACE_CONFIG"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]  # an older torch raises here: set CUBLAS_WORKSPACE_CONFIG=:4096:8
    assert done.stdout.split()[0] == "True", done.stdout
    print("deterministic mode without CUBLAS_WORKSPACE_CONFIG, torch", done.stdout.split()[1])


# Chapter 8: transformers' flex_attention path builds its BlockMask through the same create_causal_mask as
# sdpa, so a packed row keeps its documents apart only with use_cache=False and no attention_mask. Through
# model(...), compiled as transformers compiles it (on the CPU tests/test_chapters_3_6_8_claims.py runs the
# same path eagerly).
def test_transformers_flex_attention_keeps_packed_documents_apart_only_with_use_cache_false():
    transformers = pytest.importorskip("transformers")

    documents = [[5, 6, 7, 8, 9], [10, 11, 12, 13], [14, 15, 16]]
    tokens = torch.tensor([sum(documents, [])], device="cuda")
    position_ids = torch.tensor([[p for doc in documents for p in range(len(doc))]], device="cuda")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config).cuda().eval()
    model.set_attn_implementation("flex_attention")
    with torch.no_grad():
        alone = torch.cat([model(torch.tensor([doc], device="cuda")).logits[0] for doc in documents])
        atol = 64 * torch.finfo(alone.dtype).eps * alone.abs().max().item()
        apart = {name: torch.allclose(model(tokens, position_ids=position_ids, **call).logits[0], alone, rtol=0, atol=atol)
                 for name, call in {"default": {}, "use_cache=False": {"use_cache": False},
                                    "all-ones mask": {"use_cache": False, "attention_mask": torch.ones_like(tokens)}}.items()}
    assert apart == {"default": False, "use_cache=False": True, "all-ones mask": False}, apart


# Chapter 8's fast path for packed rows: a varlen kernel takes the documents as cumulative lengths
# (cu_seqlens) and never computes a pair across a boundary; causal inside each document, it equals
# SDPA on each document alone. torch.nn.attention.varlen.varlen_attn takes window_size=(-1, 0) for
# causal in torch 2.12 and 2.13 (is_causal=True in the first versions).
def test_varlen_attention_keeps_packed_documents_apart():
    import inspect
    import itertools

    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen")
    lengths, heads, d = [200, 120, 56], 4, 64
    T = sum(lengths)
    q, k, v = torch.randn(3, T, heads, d, device="cuda", dtype=torch.bfloat16).unbind(0)  # [T, H, d]: one packed row
    cu_seqlens = torch.tensor([0, *itertools.accumulate(lengths)], device="cuda", dtype=torch.int32)
    causal = ({"window_size": (-1, 0)} if "window_size" in inspect.signature(varlen_attn).parameters
              else {"is_causal": True})
    out = varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max(lengths), max(lengths), **causal)
    for start, end in itertools.pairwise(cu_seqlens.tolist()):
        alone = F.scaled_dot_product_attention(*(t[start:end].transpose(0, 1)[None] for t in (q, k, v)), is_causal=True)
        assert torch.allclose(out[start:end].float(), alone[0].transpose(0, 1).float(), atol=2e-2), (start, end)


# What chapter 8 says about compiled FlexAttention on a CUDA GPU: the fused
# kernel equals SDPA with the dense mask, and the block mask it runs on leaves
# the empty blocks out: for a causal rule, n(n-1)/2 of the n*n blocks.
def test_compiled_flex_attention_skips_the_empty_blocks_and_equals_sdpa():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 256)

    T, block = 2048, 128
    n = T // block
    q, k, v = qkv(T, torch.float16)
    compiled = torch.compile(flex_attention)
    for rule, dense, empty_blocks in (
        (causal, causal_allowed(T, device="cuda"), n * (n - 1) // 2),
        (window, causal_allowed(T, device="cuda") & ~causal_allowed(T, device="cuda").tril(-256), None),
    ):
        block_mask = create_block_mask(rule, B=None, H=None, Q_LEN=T, KV_LEN=T, BLOCK_SIZE=block, device="cuda")
        visited = int(block_mask.kv_num_blocks.sum()) + int(block_mask.full_kv_num_blocks.sum())
        if empty_blocks is not None:
            assert n * n - visited == empty_blocks
        else:  # the window of 256 = 2 blocks: its own block (partial), the one before (full), the one before that
            assert visited == n + (n - 1) + (n - 2)  # (partial; the first two query blocks have fewer)
        out = compiled(q, k, v, block_mask=block_mask)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
        assert torch.allclose(out, expected, atol=5e-3), rule.__name__
        print(f"{rule.__name__}: {visited} of {n * n} blocks visited, sparsity {block_mask.sparsity():.1f} %")


# Chapter 5's tests and the grader's chapter 4 block task on a model that lives on the GPU:
# the changed tokens and the random directions are drawn on the CPU (the same on every
# device) and moved to the model's device; the maps come back on the CPU.
def test_the_causality_tests_run_on_a_model_on_the_gpu():
    from attnlab.causality import assert_causal, assert_causal_jacobian, find_leaks
    from attnlab.gpt import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32)).cuda().eval()
    assert assert_causal(model, T=12) < 1e-5
    assert_causal_jacobian(model, T=12)
    assert find_leaks(model, T=12) == {"prefix": None, "cut": None, "jacobian": None}
    unmasked = GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32, causal=False)).cuda()
    assert find_leaks(unmasked, T=12) == {"prefix": (0, 1), "cut": (0, 1), "jacobian": (0, 1)}


# The grader's command line on the GPU: a fresh kernel (nbclient, which the GPU stack must bring)
# that picks CUDA, and chapter 4's block task, whose causality tests run on the GPU's model. The
# first GPU run found both missing: nbclient was not in requirements/gpu.txt, and the prefix test
# added a CPU shift to CUDA token ids.
def test_the_grader_grades_chapter_4s_solution_from_the_command_line_on_the_gpu(tmp_path):
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "attnlab.grader", "grade", "solutions/en/04-teacher-forcing.ipynb",
                           "--out", str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "✗" not in done.stdout and "Total: 19/19 points" in done.stdout, done.stdout
