"""The causality tests of attnlab.causality on the causal GPT and on every leaky variant of attnlab.leaky."""

import ast
import pathlib

import nbformat
import pytest
import torch
from torch import nn

from attnlab import i18n
from attnlab.causality import (CausalityError, assert_causal, assert_causal_jacobian, cut_map, dependence_map,
                               example_tokens, find_leaks, first_leak, jacobian_map)
from attnlab.gpt import GPT, GPTConfig
from attnlab.leaky import VARIANTS, ConvBeforeBlock, TokenConv, leaky_gpt
from small_models import small_gpt

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Which test catches which variant (the table of chapter 5).
CAUGHT_BY = {
    "no_mask": {"prefix", "cut", "jacobian"},
    "time_norm": {"prefix", "cut", "jacobian"},
    "label_in_input": {"prefix", "cut"},  # the leak happens on token ids, before the embedding: no gradient
    "lookahead_conv": {"prefix", "cut", "jacobian"},
    "merge_without_transpose": {"prefix", "cut", "jacobian"},
    "positions_from_end": {"cut"},  # depends on the length of the future, not on its tokens
}


small = small_gpt


@pytest.fixture(scope="module")
def model():
    return small()


@pytest.fixture(scope="module")
def idx(model):
    return example_tokens(model, T=12)


def test_the_table_covers_every_variant():
    assert set(CAUGHT_BY) == set(VARIANTS)


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_the_causal_model_passes_every_test_within_rounding_and_with_exact_jacobian_zeros(attention, norm):
    model = small(attention=attention, norm=norm)
    idx = example_tokens(model, T=12)
    assert find_leaks(model, idx) == {"prefix": None, "cut": None, "jacobian": None}
    future = torch.ones(12, 12, dtype=torch.bool).triu(1)
    # A batch of 1 against a batch of T, and T tokens against fewer: other shapes, so only up to rounding
    # (kernels split their sums by shape; the bits may differ on one CPU and agree on another).
    assert dependence_map(model, idx)[future].max() < 1e-5
    assert cut_map(model, idx)[future].max() < 1e-5
    assert (jacobian_map(model, idx)[future] == 0).all()  # exact on any machine: gradients through weights that are exactly 0
    assert assert_causal(model, idx) < 1e-5
    assert_causal_jacobian(model, idx)


@pytest.mark.parametrize("name", VARIANTS)
def test_each_variant_is_caught_by_exactly_the_expected_tests(name, model, idx):
    found = find_leaks(leaky_gpt(name, model), idx)
    assert {test for test, leak in found.items() if leak is not None} == CAUGHT_BY[name], found


@pytest.mark.parametrize("name", VARIANTS)
def test_assert_causal_names_the_first_leaking_pair(name, model, idx):
    leaky = leaky_gpt(name, model)
    with pytest.raises(CausalityError) as caught:
        assert_causal(leaky, idx)
    error = caught.value
    assert error.s > error.t >= 0 and error.value > error.atol
    assert f"position {error.t} " in str(error) and f"position {error.s} " in str(error)
    expected_test = "prefix" if "prefix" in CAUGHT_BY[name] else "cut"
    assert error.test == expected_test
    leak_map = dependence_map(leaky, idx) if expected_test == "prefix" else cut_map(leaky, idx)
    assert first_leak(leak_map, 1e-5) == (error.t, error.s)


@pytest.mark.parametrize("name", VARIANTS)
def test_assert_causal_jacobian_raises_exactly_where_the_table_says(name, model, idx):
    leaky = leaky_gpt(name, model)
    if "jacobian" in CAUGHT_BY[name]:
        with pytest.raises(CausalityError, match="Jacobian"):
            assert_causal_jacobian(leaky, idx)
    else:
        assert_causal_jacobian(leaky, idx)  # a blind spot by construction (see chapter 5)


def test_variants_copy_the_weights_and_leave_the_model_alone(model, idx):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    one_layer = small(n_layer=1)
    unmasked = leaky_gpt("no_mask", one_layer)
    with torch.no_grad():  # one layer: the mask's last row allows everything, so the last output is the same
        assert torch.allclose(unmasked(idx)[0][:, -1], one_layer(idx)[0][:, -1], atol=1e-5)
        assert not torch.allclose(unmasked(idx)[0][:, 0], one_layer(idx)[0][:, 0], atol=1e-5)
    for name in VARIANTS:
        leaky_gpt(name, model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.config.causal


def test_the_left_padded_convolution_is_causal(model, idx):
    fixed = leaky_gpt("lookahead_conv", model)
    fixed.blocks[0] = ConvBeforeBlock(TokenConv(model.config.n_embd, look_ahead=False), fixed.blocks[0].block)
    assert find_leaks(fixed, idx) == {"prefix": None, "cut": None, "jacobian": None}


def test_tests_run_in_eval_mode_and_restore_the_mode():
    model = small(dropout=0.3).train()
    idx = example_tokens(model, T=10)
    assert_causal(model, idx)  # dropout would make two calls differ: the tests switch it off
    assert_causal_jacobian(model, idx)
    assert model.training


class PrefixMean(nn.Module):
    """A learner's own model that returns bare logits: mean of the embeddings so far (or of all of them)."""

    def __init__(self, vocab_size=20, dim=8, causal=True):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, dim)
        self.out = nn.Linear(dim, vocab_size)
        self.causal = causal

    def forward(self, idx):
        x = self.wte(idx)  # [B, T, D]
        if self.causal:
            x = x.cumsum(dim=1) / torch.arange(1, idx.size(1) + 1).view(1, -1, 1)
        else:
            x = x.mean(dim=1, keepdim=True).expand_as(x)
        return self.out(x)


def test_a_learners_model_that_returns_bare_logits():
    torch.manual_seed(0)
    idx = torch.randint(0, 20, (1, 9))
    good, bad = PrefixMean(causal=True), PrefixMean(causal=False)
    assert_causal(good, idx)
    assert_causal_jacobian(good, idx)
    assert find_leaks(bad, idx) == {"prefix": (0, 1), "cut": (0, 1), "jacobian": (0, 1)}


def test_clear_localized_errors(model, idx):
    with pytest.raises(ValueError, match=r"\[1, T\]"):
        assert_causal(model, torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="torch.long"):
        assert_causal(model, torch.zeros(1, 5))
    with pytest.raises(ValueError, match="embedding="):
        jacobian_map(lambda ids: torch.zeros(1, ids.size(1), 3), idx)
    i18n.set_language("de")
    try:
        with pytest.raises(CausalityError, match="nicht kausal"):
            assert_causal(leaky_gpt("no_mask", model), idx)
    finally:
        i18n.set_language("en")
    with pytest.raises(ValueError, match="unknown leaky variant"):
        leaky_gpt("no_such_bug", model)


def code_cells(path):
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and c.id not in ("colab", "setup")]


def test_the_tests_taught_in_chapter_5_compute_what_the_package_computes(model, idx):
    from attnlab import causality

    namespace = {}
    cells = code_cells(ROOT / "chapters" / "en" / "05-is-my-model-causal.ipynb")
    exec(cells[0], namespace)  # imports
    for name in ("dependence_map", "cut_map", "jacobian_map"):
        cell = next(c for c in cells if f"def {name}(" in c)
        node = next(n for n in ast.parse(cell).body if isinstance(n, ast.FunctionDef) and n.name == name)
        exec(ast.get_source_segment(cell, node), namespace)  # the definition only, not the rest of the cell
        assert namespace[name] is not getattr(causality, name)
    for name in ("no_mask", "merge_without_transpose", "lookahead_conv", "label_in_input"):
        leaky = leaky_gpt(name, model)
        assert torch.equal(namespace["dependence_map"](leaky, idx), causality.dependence_map(leaky, idx))
        assert torch.equal(namespace["cut_map"](leaky, idx).nan_to_num(), causality.cut_map(leaky, idx).nan_to_num())
        assert torch.equal(namespace["jacobian_map"](leaky, idx), causality.jacobian_map(leaky, idx))


def test_bad_input_gets_a_clear_message_in_the_readers_language(model, idx):
    from attnlab import setup
    from attnlab.figures.causality import causality_explorer

    cases = [  # (exception, call, English words, German words)
        (ValueError, lambda: assert_causal(model, [1, 2, 3]), ["ONE sequence of token ids"], ["EINE Sequenz"]),
        (TypeError, lambda: assert_causal("model", idx), ["the causality tests need a model", "'model'"],
         ["brauchen ein Modell"]),
        (ValueError, lambda: assert_causal(lambda ids: ids.float(), idx), ["must return float logits [B, T, V]"],
         ["Gleitkomma-Logits [B, T, V]"]),
        (TypeError, lambda: assert_causal_jacobian(model, idx, embedding="emb"), ["embedding must be the nn.Module"],
         ["embedding muss das nn.Module sein"]),
        (ValueError, lambda: assert_causal(model, idx, atol=-1), ["atol must be a number >= 0"], ["atol muss"]),
        (ValueError, lambda: assert_causal_jacobian(model, idx, embedding=nn.Embedding(50, 32)),
         ["the model's outputs do not depend on it"], ["hängen nicht davon ab"]),
        (ValueError, lambda: assert_causal(GPT(model.config).to(torch.bfloat16), idx),
         ["computes in torch.bfloat16", "float32 copy"], ["rechnet in torch.bfloat16"]),
        (ValueError, lambda: leaky_gpt("nope", model), ["unknown leaky variant 'nope'"], ["unbekannte undichte"]),
        (TypeError, lambda: leaky_gpt("no_mask", "model"), ["pass a GPT or a GPTConfig"], ["Übergib ein GPT"]),
        (ValueError, lambda: causality_explorer({}, idx), ["non-empty dict"], ["nicht leeres dict"]),
        # a plain function with its embedding: ids beyond the embedding are refused before the model runs
        (ValueError, lambda: find_leaks(lambda ids: model(ids), torch.tensor([[1, 2, 300]]),
                                        embedding=model.token_embedding),
         ["Token ids must lie in 0..{}".format(model.token_embedding.num_embeddings - 1), "from 1 to 300"],
         ["Token-IDs müssen in 0..{} liegen".format(model.token_embedding.num_embeddings - 1)]),
    ]
    for exception, call, english, german in cases:
        for lang, words in (("en", english), ("de", german)):
            setup(lang)
            try:
                with pytest.raises(exception) as error:
                    call()
            finally:
                setup("en")
            for word in words:
                assert word in str(error.value), (lang, str(error.value))


def test_a_plain_function_can_be_tested_as_the_chapter_recommends(model, idx):
    """``lambda ids: model(preprocess(ids))``: V comes from its logits, the embedding is passed."""
    from attnlab.leaky import LabelInInput

    model.eval()
    pipeline = lambda ids: model(LabelInInput.preprocess(ids))  # noqa: E731
    assert find_leaks(pipeline, idx, embedding=model.token_embedding) == {"prefix": (0, 1), "cut": (0, 1),
                                                                          "jacobian": None}
    assert assert_causal(lambda ids: model(ids), idx) < 1e-5


def test_a_model_in_training_mode_with_dropout_is_tested_in_eval_mode_and_put_back():
    model = small(dropout=0.1).train()
    idx = example_tokens(model)
    assert assert_causal(model, idx) < 1e-5
    assert_causal_jacobian(model, idx)
    assert model.training


def test_the_jacobian_hook_replaces_only_the_call_of_the_sequences_shape(model, idx):
    """A model may call its token embedding a second time with another shape (LED's encoder embeds its
    padding so): the replacing hook leaves that call's output alone, and the test still runs."""

    class TwoCalls(nn.Module):
        def __init__(self, gpt):
            super().__init__()
            self.gpt = gpt

        def forward(self, ids):
            logits = self.gpt(ids)[0]  # [B, T, V]
            extra = self.gpt.token_embedding(ids[:, :1])  # [B, 1, D]: a second call, another shape
            one_per_row = extra.view(ids.size(0), extra.size(-1))  # [B, D]: fails for any other shape, as LED does
            return logits + 0 * one_per_row.sum()

    model.eval()
    assert find_leaks(TwoCalls(model), idx)["jacobian"] is None
    assert assert_causal_jacobian(TwoCalls(model), idx) is None


def test_a_model_that_embeds_sequence_first_gets_the_same_jacobian_map(model, idx):
    """XLNet embeds ``input_ids.T``: its embedding returns [T, 1, D]. The Jacobian map must still be [T, T]
    over (output, input) positions, the same map as for the [1, T, D] layout, without a false leak."""

    class SequenceFirst(nn.Module):
        def __init__(self, gpt):
            super().__init__()
            self.gpt = gpt

        def forward(self, ids):
            x = self.gpt.token_embedding(ids.T).transpose(0, 1)  # [T, B, D] -> [B, T, D]
            positions = self.gpt.position_embedding(torch.arange(ids.size(1)))
            h = x + positions
            for block in self.gpt.blocks:
                h = block(h)
            return self.gpt.head(self.gpt.norm_f(h))

    model.eval()
    wrapped = SequenceFirst(model)
    assert torch.allclose(wrapped(idx), model(idx)[0], atol=1e-5)
    sequence_first = jacobian_map(wrapped, idx)
    assert sequence_first.shape == (idx.size(1), idx.size(1))
    assert torch.allclose(sequence_first, jacobian_map(model, idx), rtol=1e-4, atol=1e-6)
    assert find_leaks(wrapped, idx)["jacobian"] is None
