"""attnlab.audit: chapter 5's tests on tiny Hugging Face models (chapter 10). Nothing is downloaded."""

import subprocess
import sys
import pathlib

import pytest
import torch

pytest.importorskip("transformers")

from attnlab import i18n  # noqa: E402
from attnlab.audit import (Adapter, audit, audit_table, course_mask, generate_matches, library_mask, main,  # noqa: E402
                           tiny_model)

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def english():
    i18n.set_language("en")
    yield
    i18n.set_language("en")


@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "gemma3"])
def test_every_decoder_is_causal_under_eager_and_sdpa_padded_or_not_and_its_cache_agrees(name):
    rows = audit(name, T=6)
    assert len(rows) == 4 and all(row.causal and row.cache_ok and row.as_expected for row in rows)


def test_bert_and_t5s_encoder_read_ahead_and_t5s_decoder_is_causal():
    bert = audit("bert", implementations=("sdpa",), paddings=("none",), T=6)
    assert [row.leaks["prefix"] for row in bert] == [(0, 1)] and bert[0].as_expected and bert[0].cache_ok is None
    t5 = {row.part: row for row in audit("t5", implementations=("eager",), T=6)}
    assert not t5["encoder"].causal and t5["decoder"].causal and t5["decoder"].cache_ok
    assert all(row.as_expected for row in t5.values())


def test_a_layer_that_adds_its_own_mask_leaks_only_on_sdpas_fast_path():
    rows = {row.padding: row for row in audit("llama", implementations=("audit_own_mask",), T=6)}
    assert rows["none"].leaks == {"prefix": (0, 1), "cut": (0, 1), "jacobian": (0, 1)}
    assert rows["none"].cache_ok is False and not rows["none"].as_expected
    assert rows["left"].causal and rows["left"].cache_ok  # padding makes the library build the mask


def test_an_attention_function_that_drops_the_mask_leaks_everywhere():
    rows = audit("llama", implementations=("audit_drops_mask",), T=6)
    assert all(not row.causal and not row.as_expected for row in rows)


def test_the_librarys_masks_equal_the_course_mask_builder():
    for impl in ("eager", "sdpa"):
        model = tiny_model("llama", impl)
        keep = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])
        assert torch.equal(library_mask(model, 6, keep), course_mask(6, keep=keep))
        positions = torch.tensor([[0, 1, 2, 0, 1, 0]])  # three packed sequences
        assert torch.equal(library_mask(model, 6, position_ids=positions), course_mask(6, position_ids=positions))
        assert torch.equal(library_mask(model, 3, past=5), course_mask(3, 8))  # lower right
    window = tiny_model("mistral", "eager")
    assert torch.equal(library_mask(window, 7, window=True), course_mask(7, window=4))
    sdpa = tiny_model("llama", "sdpa")
    assert library_mask(sdpa, 6) is None and library_mask(sdpa, 1, past=5) is None  # the is_causal fast path
    assert library_mask(tiny_model("llama", "eager"), 6) is not None


def test_generate_with_and_without_the_cache_agrees_with_left_padding():
    model = tiny_model("llama", "sdpa")
    prompts = torch.randint(1, 128, (2, 6), generator=torch.Generator().manual_seed(0))
    assert generate_matches(model, prompts, [6, 3], new_tokens=3) == {"tokens": True, "logits": True}
    leaky = tiny_model("llama", "audit_own_mask")
    assert generate_matches(leaky, prompts, [6, 6], new_tokens=3)["logits"] is False  # no padding: the leak


def test_the_table_speaks_the_readers_language():
    rows = audit("llama", implementations=("sdpa",), paddings=("none",), T=4)
    i18n.set_language("de")
    table = audit_table(rows)
    assert "Abschneidetest" in table and "muss kausal sein: ok" in table
    i18n.set_language("zh")
    assert "截断测试" in audit_table(rows)


def test_bad_input_gets_a_clear_message():
    with pytest.raises(ValueError, match="model must be one of"):
        audit("gpt5")
    with pytest.raises(ValueError, match="padding must be one of"):
        Adapter(tiny_model("llama"), padding="right")
    with pytest.raises(ValueError, match="part must be 'encoder' or 'decoder'"):
        Adapter(tiny_model("t5"))
    with pytest.raises(TypeError, match="audit takes a model name"):
        audit(42)


def test_the_command_line(capsys):
    assert main(["LlamaForCausalLM", "--implementations", "sdpa", "--length", "5", "--lang", "de"]) == 0
    out = capsys.readouterr().out
    assert "LlamaForCausalLM" in out and "wie erwartet" in out
    assert main(["llama", "--implementations", "audit_own_mask", "--length", "5", "--lang", "en"]) == 1
    assert "NOT as expected" in capsys.readouterr().out
    assert main(["NoSuchModel"]) == 2
    assert "unknown model: NoSuchModel" in capsys.readouterr().err


def test_the_command_line_from_a_shell():
    result = subprocess.run([sys.executable, "-m", "attnlab.audit", "MistralConfig", "--implementations", "eager",
                             "--length", "5"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "all 2 rows as expected" in result.stdout and result.stderr == ""


def test_the_chapters_own_mask_attention_is_the_packages():
    """Chapter 10 shows own_mask_attention in a cell; the package holds the same code (docstring aside)."""
    import ast
    import inspect

    import nbformat

    from attnlab import audit as audit_module

    def body(source):
        node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)
                    and n.name == "own_mask_attention")
        statements = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body  # without the docstring
        return [ast.dump(s) for s in statements if not isinstance(s, ast.ImportFrom)]

    nb = nbformat.read(ROOT / "chapters" / "en" / "10-auditing-a-real-model.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "def own_mask_attention" in c.source)
    assert body(cell) == body(inspect.getsource(audit_module.own_mask_attention))
