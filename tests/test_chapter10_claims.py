"""What chapter 10 and the cheat sheet say about transformers, checked through the calls a reader makes:
``model(...)`` and ``generate()`` on tiny models built from configs (nothing downloaded), with the
attention mask read where the model hands it to its attention layer (a forward pre-hook on the layer),
not from the mask functions called on their own. Rows of docs/library-claims.md name these tests.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnlab.audit import tiny_config, tiny_model, model_from_config, tolerance  # noqa: E402

IDS = torch.randint(1, 128, (1, 8), generator=torch.Generator().manual_seed(0))  # [1, T]: two documents, 5 + 3


def without_dropout(name: str):
    config = tiny_config(name)
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout"):
        if hasattr(config, key):
            setattr(config, key, 0.0)
    return config


def second_document_alone(model, **call) -> bool:
    """Is the second document of a packed row (restarting position_ids) computed as if it were alone?"""
    first, second = IDS[:, :5], IDS[:, 5:]
    restart = torch.cat([torch.arange(5), torch.arange(3)])[None]  # [1, 8]
    with torch.no_grad():
        alone = model(input_ids=second).logits
        packed = model(input_ids=IDS, position_ids=restart, **call).logits[:, 5:]
    return torch.allclose(packed, alone, atol=tolerance(alone), rtol=0)


@pytest.mark.parametrize("name", ["llama", "mistral", "gpt2"])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_packed_documents_are_kept_apart_only_without_a_cache_object_and_without_a_mask(name, mode):
    """Chapter 10: the default call (use_cache on, from config.use_cache) makes an empty DynamicCache, so the
    mask functions do not look for packed sequences and the second document reads the first; use_cache=False
    keeps them apart; an all-ones 2-D attention_mask switches the detection off again. Eval and train mode alike
    (a training loop runs in train mode; dropout set to 0 so that only the mask differs)."""
    model = model_from_config(without_dropout(name), "sdpa")
    model.train(mode == "train")
    assert model.config.use_cache is True  # the default the chapter names
    assert not second_document_alone(model)
    assert second_document_alone(model, use_cache=False)
    assert not second_document_alone(model, use_cache=False, attention_mask=torch.ones_like(IDS))


def masks_received(model, **call) -> list:
    """The attention_mask each decoder layer's attention module receives in ``model(**call)``."""
    seen = []
    layers = model.model.layers
    handles = [layer.self_attn.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("attention_mask")), with_kwargs=True) for layer in layers]
    try:
        with torch.no_grad():
            model(**call)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def test_sdpa_gets_no_mask_without_padding_and_a_bool_mask_with_it():
    """Chapter 10 and the cheat sheet: under sdpa the library passes no mask (None) when the mask would be plain
    causal (no padding, an all-ones attention_mask, one new token after the cache) and a boolean mask with
    True = may read when there is real padding."""
    model = tiny_model("llama", "sdpa")
    ids = IDS[:, :6]
    assert all(mask is None for mask in masks_received(model, input_ids=ids))
    assert all(mask is None for mask in masks_received(model, input_ids=ids, attention_mask=torch.ones_like(ids)))
    keep = torch.tensor([[0, 0, 1, 1, 1, 1]])  # left padding
    (mask, *_) = masks_received(model, input_ids=ids, attention_mask=keep)
    assert mask.dtype == torch.bool and mask.shape == (1, 1, 6, 6)
    assert not mask[0, 0, :, :2].any() and bool(mask[0, 0, -1, 2:].all())  # True = may read; the padding is blocked
    assert not mask[0, 0, 0].any()  # chapter 1: a pad query stays fully blocked (5.24.0 no longer unmasks the row)
    with torch.no_grad():
        past = model(input_ids=ids, use_cache=True).cache
    assert all(mask is None for mask in masks_received(model, input_ids=IDS[:, 6:7], cache=past))


def test_eager_always_gets_an_additive_float_mask():
    """Chapter 10 and the cheat sheet: eager always receives a mask, float, 0 = may read and the dtype's minimum
    = blocked, [B, 1, T_q, T_kv], even without padding."""
    model = tiny_model("llama", "eager")
    (mask, *_) = masks_received(model, input_ids=IDS[:, :6])
    assert mask.dtype == torch.float32 and mask.shape == (1, 1, 6, 6)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril()
    assert bool((mask[0, 0][allowed] == 0).all()) and bool((mask[0, 0][~allowed] == torch.finfo(torch.float32).min).all())


def test_generate_counts_positions_over_the_real_tokens_only():
    """Chapter 10: with left padding, generate() passes position_ids that count only the real tokens, so a
    padded prompt sees the positions the same prompt has alone."""
    model = tiny_model("gpt2", "sdpa")
    seen = []
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs.get("position_ids")),
                                             with_kwargs=True)
    keep = torch.tensor([[0, 0, 0, 1, 1, 1]])
    try:
        model.generate(input_ids=IDS[:, :6] * keep, attention_mask=keep, max_new_tokens=2, do_sample=False,
                       pad_token_id=0)
    finally:
        handle.remove()
    assert seen[0] is not None and seen[0][0, 3:].tolist() == [0, 1, 2]  # prefill: the real tokens at 0, 1, 2
    assert seen[1][0, -1].item() == 3  # the first new token continues at position 3


def test_chapter_10s_packing_figures_are_those_of_the_committed_sweep():
    """Chapter 10 teaches from the auditor's sweep of transformers 5.24.0 (attnlab/data/audit-transformers.json):
    its typed counts of what the three packed calls do, and the classes it names for each group, are the JSON's."""
    import json
    import pathlib
    from collections import defaultdict

    root = pathlib.Path(__file__).resolve().parent.parent
    data = json.loads((root / "attnlab" / "data" / "audit-transformers.json").read_text("utf-8"))
    groups, kinds = defaultdict(set), defaultdict(int)
    for verdict in data["verdicts"]:
        packing = verdict["packing"]
        kinds[packing["kind"]] += 1
        if packing["kind"] == "leaks":
            apart = {call: True for call in ("default", "no_cache", "no_cache_ones")}
            for row in packing["rows"]:
                apart[row["call"]] &= row["isolated"] is True
            groups[tuple(call for call, ok in apart.items() if ok)].add(verdict["target"])
    only_no_cache, all_but_ones, none = groups[("no_cache",)], groups[("default", "no_cache")], groups[()]
    assert sum(map(len, groups.values())) == len(only_no_cache) + len(all_but_ones) + len(none)  # no other pattern
    notebook = json.loads((root / "chapters" / "en" / "10-auditing-a-real-model.ipynb").read_text("utf-8"))
    text = " ".join(" ".join("".join(cell["source"]).split()) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    na, unchecked = kinds["not_applicable"], kinds["could_not_check"]
    for sentence in (f"Of its {len(data['verdicts'])} targets, {kinds['leaks']} let packed documents read each other",
                     f"In {len(only_no_cache)} of them only `use_cache=False` without an `attention_mask`",
                     f"in {len(all_but_ones)} only the all-ones mask lets them read each other",
                     f"{len(none)} let them read each other in every call that runs",
                     f"Of the other {na + unchecked}, the check does not apply to {na}",
                     f"and {unchecked} could not be checked"):
        assert sentence in text, sentence
    assert {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GemmaForCausalLM", "GPT2LMHeadModel",
            "PhiForCausalLM"} <= only_no_cache
    assert all_but_ones == {"Gemma3ForConditionalGeneration", "Gemma4ForConditionalGeneration",
                            "Gemma4UnifiedForConditionalGeneration", "MoshiForCausalLM"}
    assert {"BertLMHeadModel", "RobertaForCausalLM", "OPTForCausalLM", "JambaForCausalLM", "ZambaForCausalLM",
            "RecurrentGemmaForCausalLM"} <= none
    assert not groups.get(("default", "no_cache", "no_cache_ones"))  # no class keeps them apart in every call
