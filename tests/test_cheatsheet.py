"""The mask cheat sheet (chapters/src/cheatsheet.md): its code runs, and every claim of its prose holds.

The claims are about PyTorch 2.13 on the CPU; the Hugging Face rows are checked through
``model(...)`` in tests/test_chapter10_claims.py (docs/library-claims.md lists every row's check).
"""

import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
from torch.nn.attention.flex_attention import create_mask

from tools import notebooks

SOURCE = notebooks.ROOT / "chapters" / "src" / "cheatsheet.md"
LANGS = notebooks.LANGUAGES


def code_blocks(lang):
    page = (notebooks.ROOT / "chapters" / lang / "cheatsheet.md").read_text("utf-8")
    return re.findall(r"^```python\n(.*?)\n```$", page, re.S | re.M)


def test_the_page_exists_in_every_language_after_the_chapters_in_the_toc():
    assert notebooks.parse_source(SOURCE).meta["kind"] == "page"
    toc = [line.split("file:")[1].strip() for line in (notebooks.ROOT / "_toc.yml").read_text("utf-8").splitlines()
           if "file:" in line]
    chapters = [entry for entry in toc if entry.startswith("chapters/en/") and entry.split("/")[-1][:2].isdigit()]
    assert toc.index("chapters/en/cheatsheet") == toc.index(chapters[-1]) + 1  # right after the last chapter


def test_the_code_is_the_same_in_every_language_and_only_comments_differ():
    blocks = {lang: code_blocks(lang) for lang in LANGS}
    assert len(blocks["en"]) >= 4
    assert len({tuple(notebooks.strip_comments(b) for b in blocks[lang]) for lang in LANGS}) == 1
    assert "可以读取" in "".join(blocks["zh"]) and "darf lesen" in "".join(blocks["de"])


@pytest.mark.parametrize("lang", LANGS)
def test_the_code_runs_as_printed_without_warnings(lang):
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n, block in enumerate(code_blocks(lang)):
            exec(compile(block, f"cheatsheet.md ({lang}) block {n}", "exec"), namespace)


def qkv(B=2, H=4, T_q=5, T_kv=5, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T_q, d, generator=g), torch.randn(B, H, T_kv, d, generator=g),
            torch.randn(B, H, T_kv, d, generator=g))


def same(a, b):
    return torch.allclose(a, b, atol=1e-6)


def test_fill_values_per_dtype():
    assert torch.finfo(torch.float16).min == -65504
    assert round(torch.finfo(torch.bfloat16).min / 1e38, 2) == -3.39
    assert round(torch.finfo(torch.float32).min / 1e38, 2) == -3.40
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        smallest = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
        assert smallest + smallest == float("-inf")  # two additive masks
        blocked_row = torch.tensor([0.5, -30.0, 2.0], dtype=dtype).masked_fill(torch.ones(3, dtype=torch.bool), -torch.inf)
        assert torch.softmax(blocked_row, dim=-1).isnan().all()
    # float16: a score of -16 or lower plus the minimum overflows, -15 does not
    smallest = torch.finfo(torch.float16).min
    assert (torch.tensor(-16.0, dtype=torch.float16) + smallest) == float("-inf")
    assert (torch.tensor(-15.0, dtype=torch.float16) + smallest).isfinite()
    assert torch.softmax(torch.tensor([-16.0, -30.0, -17.0], dtype=torch.float16) + smallest, -1).isnan().all()
    # float32 and bfloat16: an additive minimum gives equal weights; -1e9 fits
    for dtype in (torch.float32, torch.bfloat16):
        added = torch.tensor([0.5, -30.0, 2.0], dtype=dtype) + torch.finfo(dtype).min
        assert torch.allclose(torch.softmax(added, -1).float(), torch.full((3,), 1 / 3), atol=1e-2)
        assert torch.tensor([0.5], dtype=dtype).masked_fill(torch.tensor([True]), -1e9).item() < -9e8


def test_sdpa_gives_zeros_for_a_fully_blocked_row_with_bool_and_float_masks():
    q, k, v = qkv()
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    allowed[2] = False
    bias = torch.zeros(5, 5).masked_fill(~allowed, -torch.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
            with sdpa_kernel(backend):
                for mask in (allowed, bias):
                    assert (F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[:, :, 2] == 0).all()


def test_lower_right_with_more_queries_than_keys_leaves_rows_empty_and_warns():
    with pytest.warns(UserWarning, match="Lower right causal bias will produce NaNs in the output when "
                                         "seq_len_q > seq_len_kv"):
        bias = causal_lower_right(5, 3)
    dense = bias._materialize()
    assert not dense[:2].any() and dense[2:].any(dim=-1).all()  # the first T_q - T_kv = 2 queries read nothing


def test_lower_right_with_more_queries_than_keys_gives_zero_rows_not_nan_on_every_cpu_backend():
    """The warning says "will produce NaNs"; in 2.13 on the CPU the rows without a key are zeros."""
    q, k, v = qkv(T_q=5, T_kv=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bias = causal_lower_right(5, 3)
    for backend in (None, SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
        with sdpa_kernel(backend) if backend else warnings.catch_warnings():
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        assert not out.isnan().any(), backend
        assert (out[:, :, :2] == 0).all() and (out[:, :, 2:] != 0).any(dim=-1).all(), backend


def test_sdpa_with_both_attn_mask_and_is_causal_raises_on_math_and_applies_both_on_cpu_flash():
    q, k, v = qkv()
    diagonal = torch.eye(5, dtype=torch.bool)
    everything = torch.ones(5, 5, dtype=torch.bool)
    with sdpa_kernel(SDPBackend.MATH), pytest.raises(RuntimeError, match="Explicit attn_mask should not be set "
                                                                         "when is_causal=True"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=diagonal, is_causal=True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        both = F.scaled_dot_product_attention(q, k, v, attn_mask=everything, is_causal=True)
        assert same(both, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        both = F.scaled_dot_product_attention(q, k, v, attn_mask=diagonal, is_causal=True)
        assert same(both, F.scaled_dot_product_attention(q, k, v, attn_mask=diagonal))


def test_multihead_attention_is_causal_is_only_a_hint():
    torch.manual_seed(0)
    B, T, D, H = 2, 4, 8, 2
    x = torch.randn(B, T, D)
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert nn.MultiheadAttention(D, H).batch_first is False
    for batch_first in (True, False):
        mha = nn.MultiheadAttention(D, H, batch_first=batch_first)
        inputs = x if batch_first else x.transpose(0, 1)
        with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
            mha(inputs, inputs, inputs, is_causal=True)  # training mode, autograd on
    mha = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():  # the fast inference path: the hint alone is ignored
        hint_only, _ = mha(x, x, x, is_causal=True, need_weights=False)
        no_mask, _ = mha(x, x, x, need_weights=False)
        causal, _ = mha(x, x, x, attn_mask=blocked, need_weights=False)
        with_both, _ = mha(x, x, x, attn_mask=blocked, is_causal=True, need_weights=False)
    assert same(hint_only, no_mask) and not same(hint_only, causal)
    assert same(with_both, causal)


def test_multihead_attention_masks_shapes_and_types():
    torch.manual_seed(0)
    B, T, D, H = 2, 4, 8, 2
    mha = nn.MultiheadAttention(D, H, batch_first=True)
    x = torch.randn(B, T, D)
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    reference, _ = mha(x, x, x, attn_mask=blocked, need_weights=False)
    per_head, _ = mha(x, x, x, attn_mask=blocked.expand(B * H, T, T), need_weights=False)
    assert same(per_head, reference)
    with pytest.raises(AssertionError, match="expected `attn_mask` to be `None`, 2-D or 3-D"):
        mha(x, x, x, attn_mask=blocked.expand(B, H, T, T))  # never 4-D
    float_mask = torch.zeros(T, T).masked_fill(blocked, -torch.inf)
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask is deprecated"):
        mha(x, x, x, attn_mask=float_mask, key_padding_mask=torch.zeros(B, T, dtype=torch.bool))
    _, weights = mha(x, x, x, attn_mask=blocked)
    assert weights.shape == (B, T, T)


def test_a_three_dimensional_mask_puts_the_batch_on_the_head_axis():
    B = H = 2
    q, k, v = qkv(B=B, H=H)
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    keep = torch.ones(B, 5, dtype=torch.bool)
    keep[1, -1] = False
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed & keep[:, None, None, :])
    wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed & keep[:, None, :])  # [B, T, T]
    assert not same(right, wrong)  # B == H: silently another sequence's mask
    assert same(right, F.scaled_dot_product_attention(q, k, v, attn_mask=(allowed & keep[:, None, :])[:, None]))
    q, k, v = qkv(B=2, H=4)
    with pytest.raises(RuntimeError, match="must match"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=allowed & keep[:, None, :])  # B != H: a size error


def test_shapes_with_a_value_size_of_its_own():
    q, k, v = qkv(T_q=3, T_kv=6)
    v = torch.randn(2, 4, 6, 5)
    assert F.scaled_dot_product_attention(q, k, v).shape == (2, 4, 3, 5)
    for shape in [(3, 6), (2, 1, 3, 6), (2, 1, 1, 6), (1, 4, 3, 6), (2, 4, 3, 6)]:
        assert F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(shape, dtype=torch.bool)).shape == (2, 4, 3, 5)


def test_flex_attention_top_left_and_lower_right_mask_mods():
    T_q, T_kv = 2, 4
    top_left = create_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, 1, 1, T_q, T_kv, device="cpu")[0, 0]
    lower_right = create_mask(lambda b, h, q_idx, kv_idx: q_idx + (T_kv - T_q) >= kv_idx, 1, 1, T_q, T_kv,
                              device="cpu")[0, 0]
    assert torch.equal(top_left, torch.ones(T_q, T_kv, dtype=torch.bool).tril())
    assert torch.equal(lower_right, causal_lower_right(T_q, T_kv)._materialize())
    assert lower_right.tolist() == [[True, True, True, False], [True, True, True, True]]  # the picture on the page


def test_every_pytorch_mask_argument_adds_a_float_mask_to_the_scores():
    torch.manual_seed(0)
    B, T, D, H = 2, 4, 8, 2
    mha = nn.MultiheadAttention(D, H, batch_first=True)
    x = torch.randn(B, T, D)
    w_q, w_k, _ = mha.in_proj_weight.chunk(3)
    b_q, b_k, _ = mha.in_proj_bias.chunk(3)
    q = (x @ w_q.T + b_q).view(B, T, H, D // H).transpose(1, 2)
    k = (x @ w_k.T + b_k).view(B, T, H, D // H).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / (D // H) ** 0.5  # [B, H, T, T]
    extra, per_key = torch.randn(T, T), torch.randn(B, T)
    _, weights = mha(x, x, x, attn_mask=extra, average_attn_weights=False)
    assert torch.allclose(weights, torch.softmax(scores + extra, -1), atol=1e-5)
    _, weights = mha(x, x, x, key_padding_mask=per_key, average_attn_weights=False)
    assert torch.allclose(weights, torch.softmax(scores + per_key[:, None, None, :], -1), atol=1e-5)
    v = torch.randn(B, H, T, D // H)
    assert torch.allclose(F.scaled_dot_product_attention(q, k, v, attn_mask=extra),
                          torch.softmax(scores + extra, -1) @ v, atol=1e-5)


def test_a_flex_block_mask_with_no_batch_or_head_serves_them_all():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = qkv(B=2, H=4, T_q=8, T_kv=8)
    block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, B=None, H=None, Q_LEN=8, KV_LEN=8,
                                   device="cpu")
    assert block_mask.shape == (1, 1, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        out = flex_attention(q, k, v, block_mask=block_mask)
    assert same(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
