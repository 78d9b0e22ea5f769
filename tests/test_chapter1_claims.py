"""Claims of chapter 1 that code can check: half precision, fully blocked rows,
and a chapter that still runs when the learner changes the sentence."""

import nbformat
import pytest
import torch

import attnlab
from attnlab import attention, masks
from tools import notebooks

FP16_MIN = torch.finfo(torch.float16).min


def test_minus_1e9_raises_in_float16_masked_fill_and_becomes_minus_inf_in_a_tensor():
    scores = torch.randn(4, 4).half()
    with pytest.raises(RuntimeError, match="overflow"):
        scores.masked_fill(~masks.causal_allowed(4), -1e9)
    assert torch.isneginf(torch.tensor(-1e9, dtype=torch.float16))
    assert scores.float().masked_fill(~masks.causal_allowed(4), -1e9).isfinite().all()  # float32 holds it


def test_finfo_min_added_to_float16_scores_overflows_from_minus_16_on():
    assert torch.tensor(-15.9, dtype=torch.float16) + FP16_MIN == FP16_MIN
    assert torch.isneginf(torch.tensor(-16.0, dtype=torch.float16) + FP16_MIN)
    row = torch.tensor([0.5, -30.0, 2.0], dtype=torch.float16)  # a fully blocked row
    biased = row + FP16_MIN
    assert biased.tolist() == [FP16_MIN, float("-inf"), FP16_MIN]
    assert biased.softmax(-1).tolist() == [0.5, 0.0, 0.5]  # not uniform
    assert torch.isnan((row - 20 + FP16_MIN).softmax(-1)).all()  # every score below -16: NaN
    filled = row.masked_fill(torch.ones(3, dtype=torch.bool), FP16_MIN)  # masked_fill does not overflow
    assert torch.allclose(filled.softmax(-1).float(), torch.full((3,), 1 / 3), atol=1e-3)
    # with an allowed entry the overflow is harmless: the blocked weight is 0 either way
    partly = torch.tensor([0.5, -30.0, 2.0], dtype=torch.float16) + torch.tensor([0.0, FP16_MIN, FP16_MIN],
                                                                                 dtype=torch.float16)
    assert partly.softmax(-1).tolist() == [1.0, 0.0, 0.0]


def two_layers(x, allowed, fill=float("-inf")):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(3, x.size(-1), x.size(-1), generator=gen) / x.size(-1) ** 0.5
    for _ in range(2):
        scores = attention.attention_scores(x @ w[0], x @ w[1])
        x = attention.mask_scores(scores, allowed, fill).softmax(-1) @ (x @ w[2])
    return x


def test_a_fully_blocked_row_poisons_the_next_layer_and_the_fixes_do_not():
    T = 5
    x = torch.randn(T, 8, generator=torch.Generator().manual_seed(1))
    may_read = masks.causal_allowed(T) & ~(torch.arange(T) < 1)  # left padding: nobody reads position 0
    assert not may_read[0].any() and not may_read[:, 0].any()
    poisoned = two_layers(x, may_read)
    assert torch.isnan(poisoned).all()  # rows 1.. gave position 0 weight 0, yet 0 * NaN = NaN
    finite = two_layers(x, may_read, torch.finfo(torch.float32).min)
    unmasked = two_layers(x, may_read | ~may_read.any(-1, keepdim=True))  # Hugging Face's unmasking
    assert not torch.isnan(finite).any() and not torch.isnan(unmasked).any()
    assert torch.equal(finite[1:], unmasked[1:])


def chapter_1_code():
    nb = nbformat.read(notebooks.ROOT / "chapters" / "en" / "01-causal-mask.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and c.id not in ("colab", "setup")]


@pytest.mark.parametrize("lang, sentence", [
    ("en", "hi there"),
    ("de", "das Modell darf das nächste Wort nicht sehen"),
    ("zh", "我们 今天 在 课上 学习 因果 掩码 模型 不能 偷看 下一个 词"),
])
def test_chapter_1_runs_for_a_sentence_of_2_to_12_tokens(lang, sentence, monkeypatch):
    import attnlab.figures.widgets

    monkeypatch.setattr(attnlab, "tokens", lambda: sentence.split())
    monkeypatch.setattr(attnlab.figures.widgets, "mask_explorer", lambda *args, **kwargs: None)  # tested elsewhere
    attnlab.setup(lang)
    try:
        namespace = {"attnlab": attnlab}
        for code in chapter_1_code():
            exec(compile(code, "<chapter 1>", "exec"), namespace)
        T = len(sentence.split())
        assert namespace["T"] == T and namespace["p"] == T // 2
        assert namespace["weights"].shape == (T, T)
    finally:
        attnlab.set_language("en")


def test_sdpa_returns_zeros_for_a_left_padded_llamas_pad_rows_on_the_cpu():
    """Chapter 1, fix 3: transformers 5.24.0 leaves a pad query's row fully blocked under sdpa (no unmasking),
    and on the CPU SDPA returns zeros for it. Checked where a reader meets it: the attention output each layer
    of a left-padded tiny Llama hands to its output projection (a forward pre-hook on o_proj), through
    ``model(...)``. A GPU kernel may return other numbers (chapter 8, tests/test_gpu.py)."""
    pytest.importorskip("transformers")
    from attnlab.audit import tiny_model

    model = tiny_model("llama", "sdpa")
    ids = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(0))  # [1, T]
    keep = torch.tensor([[0, 0, 1, 1, 1, 1]])  # left padding: queries 0 and 1 may read nothing
    seen = []
    handles = [layer.self_attn.o_proj.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
               for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=keep)
    finally:
        for handle in handles:
            handle.remove()
    assert len(seen) == len(model.model.layers)
    for out in seen:  # [1, T, H * d]: SDPA's output, heads concatenated
        assert bool((out[0, :2] == 0).all()), "the pad rows are not zeros"
        assert bool((out[0, 2:].abs().amax(-1) > 0).all()), "a real row is zero"
