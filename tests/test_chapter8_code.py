"""Chapter 8 teaches its rules in the notebook; the package holds the same rules. They must agree,
and the chapter must still run when a reader changes its sizes."""

import ast
import inspect
import re
import warnings

import nbformat
import pytest
import torch
import torch.nn.functional as F

from attnlab import batching, mask_builder, rope
from attnlab.gpt import GPT, GPTConfig
from tools import notebooks

CHAPTER = "08-masks-in-real-models"


def code_cells(lang: str = "en") -> list[str]:
    nb = nbformat.read(notebooks.ROOT / "chapters" / lang / f"{CHAPTER}.ipynb", as_version=4)
    return [cell.source for cell in nb.cells if cell.cell_type == "code" and cell.id not in notebooks.GENERATED_CELLS]


def definition(source: str, name: str) -> str:
    """ast.dump of the function ``name`` in ``source`` without docstring and annotations."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:]
            node.returns = None
            for arg in node.args.args:
                arg.annotation = None
            return ast.dump(node)
    raise LookupError(name)


@pytest.fixture(scope="module")
def taught():
    """The functions the chapter defines, executed from the committed English notebook."""
    cells = code_cells()
    namespace = {}
    exec("import attnlab", namespace)
    exec(cells[0], namespace)  # the chapter's imports
    for cell in cells:
        if re.search(r"^def ", cell, re.M):
            exec("\n".join(block for block in re.split(r"\n(?=\S)", cell) if block.startswith("def ")), namespace)
    return namespace


@pytest.mark.parametrize("name", ["forward_with_mask", "document_leaks"])
def test_the_notebook_shows_the_package_code(name):
    shown = next(cell for cell in code_cells() if f"def {name}(" in cell)
    assert definition(shown, name) == definition(inspect.getsource(batching), name)


def test_the_mask_rules_agree(taught):
    lengths, T = [7, 4, 1], 7
    for side in ("right", "left"):
        keep = taught["keep_from_lengths"](lengths, T, side)
        assert torch.equal(keep, mask_builder.keep_from_lengths(lengths, T, side))
        docs = torch.tensor([[0, 0, 1, 1, 1, 2, 2]] * 3)
        mine = taught["batch_mask"](taught["and_masks"](taught["causal"], taught["padding_mod"](keep),
                                                        taught["document_mod"](docs)), 3, 5, T)
        package = mask_builder.batch_mask(mask_builder.and_masks(mask_builder.mask_mod("causal"),
                                                                 mask_builder.padding_mod(keep),
                                                                 mask_builder.document_mod(docs)), 3, 5, T)
        assert torch.equal(mine, package)


@pytest.mark.parametrize("options", [{}, {"positions": "rope", "n_kv_head": 2}])
def test_forward_with_mask_and_document_leaks_agree(taught, options):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=4, n_embd=32, **options)).eval()
    tokens, docs, positions = batching.pack([[3, 4, 5], [6, 7], [8, 9, 10]])
    allowed = mask_builder.batch_mask(mask_builder.mask_mod("causal"), 1, tokens.size(1))
    with torch.no_grad():
        assert torch.equal(taught["forward_with_mask"](model, tokens, allowed, positions),
                           batching.forward_with_mask(model, tokens, allowed, positions))
        run = lambda t: batching.forward_with_mask(model, t, allowed, positions)  # noqa: E731
        assert taught["document_leaks"](run, tokens, docs, 40) == batching.document_leaks(run, tokens, docs, 40)


def test_rope_agrees(taught):
    x = torch.randn(2, 3, 5, 16)
    positions = torch.arange(4, 9)
    assert torch.allclose(taught["apply_rope"](x, positions), rope.apply_rope(x, positions), atol=1e-6)


def test_cross_document_share_counts_pairs(taught):
    share = taught["cross_document_share"]
    assert share([10]) == 0.0
    docs = torch.tensor([[0] * 3 + [1] * 5])
    causal = mask_builder.batch_mask(mask_builder.mask_mod("causal"), 1, 8)
    same = mask_builder.batch_mask(mask_builder.document_mod(docs), 1, 8)
    assert share([3, 5]) == pytest.approx((causal & ~same).sum().item() / causal.sum().item())


def test_the_chapter_runs_with_other_sizes():
    changes = [("rows = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14], [15, 16]]", "rows = [[5, 6, 7], [8, 9, 10, 11, 12], [13]]"),
               ("T_w, W = 12, 3", "T_w, W = 10, 2"), ("W_ring = 4", "W_ring = 3"),
               ("prompt_len, steps = 12, 24", "prompt_len, steps = 3, 9"), ("H, H_kv = 8, 2", "H, H_kv = 6, 3"),
               ("T_r = 9", "T_r = 5")]
    cells = code_cells()
    for old, _ in changes:
        assert any(old in cell for cell in cells), old
    namespace: dict = {}
    exec("import attnlab; attnlab.setup('en')", namespace)
    for source in cells:
        if "mask_combination_explorer(" in source or "from transformers import" in source:
            continue  # the explorer takes seconds and depends on nothing above; the Llama cell's sizes are its own
        for old, new in changes:
            source = source.replace(old, new)
        exec(source, namespace)
    assert namespace["T"] == 5 and namespace["decode"].shape == (3, 1, 1, 6)
    assert namespace["depends"] == namespace["reach"][1][-1].tolist()  # window 2, two layers
    assert namespace["ring"][:, 0].int().tolist() == [6, 4, 5]
    assert torch.allclose(namespace["grouped"], namespace["interleaved"], atol=1e-6)
    assert torch.allclose(namespace["decode_step"](namespace["T_r"] - 1), namespace["full"][:, :, -1:], atol=1e-5)


def test_flex_attention_without_compile_skips_no_block():
    """Chapter 8's folded part on FlexAttention's reference path: of the block mask only its rule
    counts. Blocks marked empty (a causal block mask) with a rule that allows every pair give
    bidirectional attention, not causal attention; the blocks were computed all the same."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

    T = 16
    causal_blocks = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, B=None, H=None, Q_LEN=T,
                                      KV_LEN=T, BLOCK_SIZE=8, device="cpu")
    mismatched = BlockMask.from_kv_blocks(causal_blocks.kv_num_blocks, causal_blocks.kv_indices,
                                          causal_blocks.full_kv_num_blocks, causal_blocks.full_kv_indices,
                                          BLOCK_SIZE=8, mask_mod=lambda b, h, q_idx, kv_idx: q_idx >= 0,
                                          seq_lengths=(T, T))
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, T, 16).unbind(0)  # [B, H, T, d]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = flex_attention(q, k, v, block_mask=mismatched)
    assert mismatched.sparsity() > 0  # the upper blocks are marked empty
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6)
    assert not torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-3)
