"""Chapter 8 teaches its rules in the notebook; the package holds the same rules. They must agree."""

import re

import nbformat
import pytest
import torch

from attnlab import batching, mask_builder, rope
from attnlab.gpt import GPT, GPTConfig
from tools import notebooks

NOTEBOOK = notebooks.ROOT / "chapters" / "en" / "08-masks-in-real-models.ipynb"


@pytest.fixture(scope="module")
def taught():
    """The functions the chapter defines, executed from the committed English notebook."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    namespace = {}
    exec(next(c.source for c in nb.cells if c.cell_type == "code" and c.id != "setup"), namespace)  # imports
    for cell in nb.cells:
        if cell.cell_type == "code" and re.search(r"^def ", cell.source, re.M):
            definitions = "\n".join(block for block in re.split(r"\n(?=\S)", cell.source)
                                    if block.startswith(("def ", "@")))
            exec(definitions, namespace)
    return namespace


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
