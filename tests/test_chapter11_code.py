"""The code chapter 11 shows in the notebook is the code of the package (attnlab.blocked_backward,
attnlab.ring_backward), compared as syntax trees like tests/test_taught_code.py does, and the
notebook's definitions compute what the package computes, in every language."""

import ast
import inspect

import pytest
import torch

from attnlab import blocked_backward, ring_backward
from attnlab.exercises import ch11
from test_taught_code import defined_in, definition, notebook_cells, run_cells

CHAPTER = "11-backward-pass"
TAUGHT = [("attention_grads", blocked_backward), ("ByHand", blocked_backward), ("tile_grads", blocked_backward),
          ("blocked_backward", blocked_backward), ("BlockedAttention", blocked_backward),
          ("ring_backward", ring_backward)]


@pytest.mark.parametrize("name,module", TAUGHT, ids=[name for name, _ in TAUGHT])
def test_chapter_11_shows_the_package_code(name, module):
    shown = definition(defined_in(notebook_cells(CHAPTER), name), name)
    assert ast.dump(shown) == ast.dump(definition(inspect.getsource(module), name))


@pytest.mark.parametrize("lang", ["en", "de", "zh"])
def test_the_notebook_backward_computes_what_the_package_computes(lang):
    namespace = run_cells(notebook_cells(CHAPTER, lang), ["attention_grads", "tile_grads", "blocked_backward",
                                                          "BlockedAttention"])
    torch.manual_seed(0)
    q, k, v, d_out = torch.randn(4, 2, 3, 21, 8).unbind(0)
    keep = torch.ones(2, 21, dtype=torch.bool)
    keep[1, -4:] = False
    out, lse, _ = blocked_backward.blocked_forward(q, k, v, 8, True, keep)
    shown = namespace["blocked_backward"](q, k, v, out, lse, d_out, 8, True, keep)
    package = blocked_backward.blocked_backward(q, k, v, out, lse, d_out, 8, True, keep)
    assert all(torch.equal(a, b) for a, b in zip(shown[:3], package[:3])) and shown[3] == package[3]
    assert all(torch.equal(a, b) for a, b in zip(namespace["attention_grads"](q, k, v, d_out),
                                                 blocked_backward.attention_grads(q, k, v, d_out)))


def test_the_exercise_reference_tile_equals_the_chapters_tile_grads():
    case = ch11.TILE_BACKWARD.make_cases()[0]
    q, k, v, d_out, lse, D, blocked = (a.float() if a.is_floating_point() else a for a in case.args)
    for mine, chapter in zip(ch11.tile_backward(q, k, v, d_out, lse, D, blocked),
                             blocked_backward.tile_grads(q, k, v, d_out, lse, D, blocked)):
        assert torch.allclose(mine, chapter, atol=1e-5)
