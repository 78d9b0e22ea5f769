"""What chapters 3, 6 and 8 say about torch and transformers, checked through the calls a reader makes
(``F.scaled_dot_product_attention``, ``model(...)``, ``generate()``, a data collator), and the GPU numbers
their prose types, checked against the committed GPU measurement. Rows of docs/library-claims.md name
these tests; tests/test_gpu.py holds the checks that need a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
LANGS = ("en", "de", "zh")


# --- chapter 3: which key tiles SDPA's CPU flash kernel computes ---

@pytest.mark.parametrize("T, key", [(1024, 300), (1024, 600), (700, 600), (4096, 3000)])
def test_sdpa_cpu_computes_each_key_tile_that_begins_at_or_before_a_query_tiles_last_query(T, key):
    """Chapter 3: with is_causal=True, a query tile of the CPU flash kernel computes every key tile that begins
    at or before its last query, in full. Seen through SDPA itself: a NaN in one value row turns every output
    row NaN whose query tile computed that key's tile, also rows that may not read the key (their weight 0
    times NaN is NaN in the product with V), and no other row. This relies on the product with V not
    skipping zero weights, which the CPU kernel's BLAS does not."""
    from attnlab.blocked import sdpa_cpu_tiles

    q, k, v = torch.randn(3, 1, 1, T, 16, generator=torch.Generator().manual_seed(0)).unbind(0)  # [B, H, T, d]
    v[0, 0, key] = float("nan")
    nan_rows = torch.isnan(F.scaled_dot_product_attention(q, k, v, is_causal=True)[0, 0]).any(-1)  # [T]
    q_tile, k_tile = sdpa_cpu_tiles(T)
    key_tile_start = key // k_tile * k_tile
    last_query = [min(t // q_tile * q_tile + q_tile, T) - 1 for t in range(T)]  # the last query of each row's tile
    expected = torch.tensor([last >= key_tile_start for last in last_query])
    assert torch.equal(nan_rows, expected), (T, key, int(nan_rows.sum()), int(expected.sum()))


# --- chapter 6: the order of additions follows the shape of the call ---

def test_rows_computed_in_calls_of_different_shapes_can_differ_in_the_last_bits():
    """Chapter 6: a fast kernel chooses the order of its additions by the shape of the call, so the same row
    computed in calls of different shapes can differ in its last bits, while staying within a few ulp. Which
    shapes differ depends on the CPU and the libraries (the chapter reports one machine and prints no such
    count); this checks that it happens at all, for a linear layer and for causal SDPA, and the bound."""
    generator = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(64, 64)
    x = torch.randn(65, 64, generator=generator)  # [T+1, D]
    q, k, v = torch.randn(3, 1, 4, 65, 16, generator=generator).unbind(0)
    with torch.no_grad():
        full = layer(x)
        linear_differs = [m for m in range(1, 66) if not torch.equal(layer(x[:m]), full[:m])]
        bound = 16 * torch.finfo(torch.float32).eps * full.abs().max()
        assert all((layer(x[:m]) - full[:m]).abs().max() <= bound for m in range(1, 66))
        sdpa_full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        sdpa_differs = [T for T in range(1, 65) if not torch.equal(
            F.scaled_dot_product_attention(q[..., :T, :], k[..., :T, :], v[..., :T, :], is_causal=True),
            sdpa_full[..., :T, :])]
    assert linear_differs and sdpa_differs, (linear_differs, sdpa_differs)


def test_generate_hands_sdpa_no_mask_without_padding_and_is_causal_only_for_several_queries(monkeypatch):
    """Chapter 6: transformers builds no mask when there is no padding and either one query or nothing cached,
    and sets is_causal=True only for more than one query. Read where generate() calls SDPA: without padding
    the prefill gets (None, is_causal=True) and every decode step (None, False); with left padding every call
    gets a boolean mask and is_causal=False."""
    from transformers import LlamaConfig, LlamaForCausalLM

    seen = []  # (queries, mask shape or None, is_causal) per call; one layer, one head per key head (no GQA packing)
    sdpa = F.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, is_causal=False, **kwargs):
        seen.append((query.shape[-2], None if attn_mask is None else tuple(attn_mask.shape), is_causal))
        return sdpa(query, key, value, attn_mask=attn_mask, is_causal=is_causal, **kwargs)

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=4, pad_token_id=0)).eval()
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False)
    assert seen == [(6, None, True), (1, None, False), (1, None, False)]
    seen.clear()
    padded = torch.tensor([[5, 6, 7, 8, 9, 10], [0, 0, 7, 8, 9, 10]])
    model.generate(padded, attention_mask=(padded != 0).long(), max_new_tokens=2, do_sample=False)
    assert seen == [(6, (2, 1, 6, 6), False), (1, (2, 1, 1, 7), False)]


# --- chapter 8: packed rows in transformers ---

DOCUMENTS = [[5, 6, 7, 8, 9], [10, 11, 12, 13], [14, 15, 16]]


def packed_row():
    tokens = torch.tensor([sum(DOCUMENTS, [])])  # [1, T]
    position_ids = torch.tensor([[p for doc in DOCUMENTS for p in range(len(doc))]])  # restart at 0
    return tokens, position_ids


@pytest.fixture
def eager_compile(monkeypatch):
    """torch.compile as the identity, so transformers' flex_attention path runs eagerly on the CPU: the block
    mask is built by the same create_block_mask, and flex_attention's reference implementation evaluates the
    same mask_mod; compiling changes the speed, not which pairs the mask allows. transformers compiles both
    (create_block_mask(_compile=True), WrappedFlexAttention), which takes minutes on a CPU."""
    from transformers.integrations import flex_attention as hf_flex

    monkeypatch.setattr(torch, "compile", lambda model=None, **kwargs: model)
    monkeypatch.setattr(hf_flex.WrappedFlexAttention, "_instance", None)
    monkeypatch.setattr(hf_flex.WrappedFlexAttention, "_is_flex_compiled", False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        warnings.filterwarnings("ignore", message="_compile flag on create_block_mask")  # transformers 5.24.0 passes it
        yield


def test_the_flex_attention_path_of_transformers_has_the_same_packing_gate(eager_compile):
    """Chapter 8: transformers' flex_attention path builds its block mask through the same create_causal_mask
    as sdpa, so it keeps packed documents apart only with use_cache=False and no attention_mask. Through
    model(...): each document's logits against the document alone, and the BlockMask the attention layer
    receives (may a query of document 1 read a key of document 0?)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    model.set_attn_implementation("flex_attention")
    tokens, position_ids = packed_row()
    masks = []
    model.model.layers[0].self_attn.register_forward_pre_hook(
        lambda module, args, kwargs: masks.append(kwargs["attention_mask"]), with_kwargs=True)
    with torch.no_grad():
        alone = torch.cat([model(torch.tensor([doc])).logits[0] for doc in DOCUMENTS])  # [T, V]
        atol = 64 * torch.finfo(alone.dtype).eps * alone.abs().max().item()
        masks.clear()
        results = {}
        for name, call in {"default": {}, "use_cache=False": {"use_cache": False},
                           "all-ones mask": {"use_cache": False, "attention_mask": torch.ones_like(tokens)}}.items():
            packed = model(tokens, position_ids=position_ids, **call).logits[0]
            query, key = torch.tensor(6), torch.tensor(0)  # token 6 is in document 1, token 0 in document 0
            reads_across = bool(masks[-1].mask_mod(torch.tensor(0), torch.tensor(0), query, key))
            results[name] = (torch.allclose(packed, alone, rtol=0, atol=atol), reads_across)
    assert type(masks[-1]).__name__ == "BlockMask"
    assert results == {"default": (False, True), "use_cache=False": (True, False), "all-ones mask": (False, True)}


def test_the_flattening_collator_passes_restarting_position_ids_and_no_attention_mask():
    """Chapter 8: DataCollatorWithFlattening packs the examples into one row with restarting position_ids and
    no attention_mask, and TrainingArguments.use_cache, which Trainer copies into model.config.use_cache,
    defaults to False (read from the dataclass: constructing TrainingArguments needs accelerate, which the
    course does not install; Trainer's assignment is a source row)."""
    from transformers import DataCollatorWithFlattening, TrainingArguments

    batch = DataCollatorWithFlattening()([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    assert "attention_mask" not in batch
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5]] and batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    (use_cache,) = [field.default for field in dataclasses.fields(TrainingArguments) if field.name == "use_cache"]
    assert use_cache is False


# --- the GPU numbers the prose types, against the committed GPU measurement ---

def gpu_measurement() -> dict:
    return json.loads((ROOT / "attnlab" / "data" / "benchmarks_cuda.json").read_text("utf-8"))


def bf16_row(T: int) -> dict:
    (row,) = [row for row in gpu_measurement()["bf16"] if row["T"] == T]
    return row


def decode_row(context: int) -> dict:
    (row,) = [row for row in gpu_measurement()["decode"] if row["context"] == context]
    return row


def tflops(T: int, rule: str) -> float:
    from attnlab.blocked import attention_flops

    row = bf16_row(T)
    return attention_flops(T, row["H"], row["d"], causal=rule == "causal") / row[f"flex_{rule}_ms"] / 1e9


# (chapter, prose cell, what the committed GPU measurement holds, decimals): each number is typed in the
# prose of all three languages, so a new GPU run that changes it fails here until the prose is rewritten.
TYPED_GPU_NUMBERS = [
    ("03-sdpa-flash-attention", "md-035", lambda: bf16_row(2048)["flash_full_over_causal"]["median"], 2),
    ("03-sdpa-flash-attention", "md-035", lambda: bf16_row(16384)["flash_full_over_causal"]["median"], 2),
    ("03-sdpa-flash-attention", "md-035", lambda: bf16_row(32768)["flash_full_over_causal"]["median"], 2),
    ("06-kv-cache", "md-024", lambda: decode_row(2048)["tokens_per_s_cache"], 0),
    ("06-kv-cache", "md-024", lambda: decode_row(4096)["tokens_per_s_cache"], 0),
    ("08-masks-in-real-models", "md-063", lambda: bf16_row(32768)["flex_causal_over_full"]["median"], 2),
    ("08-masks-in-real-models", "md-063",
     lambda: bf16_row(32768)["flex_causal_blocks"]["visited"] / bf16_row(32768)["flex_causal_blocks"]["total"], 2),
    ("08-masks-in-real-models", "md-063", lambda: tflops(16384, "full"), 0),
    ("08-masks-in-real-models", "md-063", lambda: tflops(32768, "full"), 0),
    ("08-masks-in-real-models", "md-063", lambda: tflops(32768, "causal"), 0),
]


def prose(chapter: str, cell: str, lang: str) -> str:
    nb = json.loads((ROOT / "chapters" / lang / f"{chapter}.ipynb").read_text("utf-8"))
    (found,) = [c for c in nb["cells"] if c["id"] == cell]
    return "".join(found["source"])


def typed(value: float, decimals: int, lang: str) -> str:
    text = f"{value:.{decimals}f}"
    return text.replace(".", ",") if lang == "de" else text


@pytest.mark.parametrize("chapter, cell, value, decimals", TYPED_GPU_NUMBERS)
def test_every_gpu_number_in_the_prose_is_the_committed_measurement(chapter, cell, value, decimals):
    for lang in LANGS:
        number = typed(value(), decimals, lang)
        pattern = rf"(?<![\d.,]){re.escape(number)}(?![\d])"
        assert re.search(pattern, prose(chapter, cell, lang)), (
            f"chapters/{lang}/{chapter}.ipynb {cell}: the GPU measurement now gives {number}; rewrite the prose")


def test_the_gpu_prose_names_the_torch_and_the_gpu_that_measured_it():
    machine = gpu_measurement()["machine"]
    version = ".".join(machine["torch"].split(".")[:2])  # "2.11.0+cu130" -> "2.11"
    assert "H200" in machine["gpu"], machine["gpu"]
    for chapter, cell in (("03-sdpa-flash-attention", "md-035"), ("08-masks-in-real-models", "md-012")):
        for lang in LANGS:
            text = prose(chapter, cell, lang)
            assert f"torch {version}" in text and "H200" in text, (chapter, cell, lang, version)


def test_what_chapter_3_says_of_the_single_sequence_gpu_rows_holds_for_the_committed_rows():
    """Chapter 3: at T = 1024 and 2048 causal and full take the same time (one wave of tiles), and skipping
    saves time from T = 4096 on; chapter 6: the cached decode steps slow down from 2048 to 4096."""
    assert all(abs(bf16_row(T)["flash_full_over_causal"]["median"] - 1) < 0.05 for T in (1024, 2048))
    assert bf16_row(4096)["flash_full_over_causal"]["median"] > 1.1
    assert decode_row(4096)["tokens_per_s_cache"] < decode_row(2048)["tokens_per_s_cache"]
