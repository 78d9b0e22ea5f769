"""The code that chapters 2 and 3 show in the notebook is the code of the package.

Chapter 2 writes ``split_heads``, ``merge_heads`` and ``MultiHeadAttention`` in a
cell, chapter 3 writes ``tile_kind`` and ``blocked_attention``; the package holds
the same definitions (``attnlab.multihead``, ``attnlab.blocked``). Compared as
syntax trees without docstrings, comments and type annotations (the notebook's
comments are in the reader's language), and by running both on the same input.
"""

import ast
import functools
import inspect
import math

import nbformat
import pytest
import torch

from attnlab import blocked, multihead
from tools import notebooks


def notebook_cells(chapter: str, lang: str = "en") -> list[str]:
    nb = nbformat.read(notebooks.ROOT / "chapters" / lang / f"{chapter}.ipynb", as_version=4)
    return [cell.source for cell in nb.cells if cell.cell_type == "code" and cell.id not in ("colab", "setup")]


def definition(source: str, name: str) -> ast.AST:
    """The def/class ``name`` in ``source``, without docstrings and annotations."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return normalized(node)
    raise LookupError(name)


def normalized(node: ast.AST) -> ast.AST:
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if (isinstance(child, (ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            child.body = body[1:] or [ast.Pass()]
        if isinstance(child, ast.FunctionDef):
            child.returns = None
            for arg in child.args.args + child.args.kwonlyargs:
                arg.annotation = None
    return node


def defined_in(cells: list[str], name: str) -> str:
    matches = [cell for cell in cells if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
                                             for n in ast.parse(cell).body)]
    assert len(matches) == 1, f"{name} should be defined in exactly one cell"
    return matches[0]


def run_cells(cells: list[str], names: list[str]) -> dict:
    """Execute the import cell and the cells that define ``names``; return the namespace."""
    namespace: dict = {}
    exec("import attnlab", namespace)  # what the generated setup cell imports
    exec(cells[0], namespace)  # the chapter's imports
    for cell in dict.fromkeys(defined_in(cells, name) for name in names):
        exec(cell, namespace)
    return namespace


CHAPTER_2 = "02-multi-head-attention"
CHAPTER_3 = "03-sdpa-flash-attention"


@pytest.mark.parametrize("name", ["split_heads", "merge_heads", "MultiHeadAttention"])
def test_chapter_2_shows_the_package_code(name):
    shown = definition(defined_in(notebook_cells(CHAPTER_2), name), name)
    package = definition(inspect.getsource(multihead), name)
    assert ast.dump(shown) == ast.dump(package)


@pytest.mark.parametrize("name", ["tile_kind", "tile_map", "blocked_attention"])
def test_chapter_3_shows_the_package_code(name):
    shown = definition(defined_in(notebook_cells(CHAPTER_3), name), name)
    package = definition(inspect.getsource(blocked), name)
    assert ast.dump(shown) == ast.dump(package)


@pytest.mark.parametrize("lang", ["en", "de", "zh"])
def test_the_notebook_module_computes_what_the_package_module_computes(lang):
    namespace = run_cells(notebook_cells(CHAPTER_2, lang), ["split_heads", "merge_heads", "MultiHeadAttention"])
    config = multihead.AttentionConfig(d_model=48, n_heads=6, bias=True)
    torch.manual_seed(0)
    package = multihead.MultiHeadAttention(config).eval()
    shown = namespace["MultiHeadAttention"](config).eval()
    shown.load_state_dict(package.state_dict())  # same parameter names, same shapes
    x = torch.randn(3, 7, 48)
    with torch.no_grad():
        assert torch.equal(shown(x), package(x))
        assert torch.equal(shown.weights(x), package.weights(x))


def test_the_notebook_blocked_attention_computes_what_the_package_computes():
    namespace = run_cells(notebook_cells(CHAPTER_3), ["tile_kind", "blocked_attention"])
    torch.manual_seed(0)
    q_all, k, v = torch.randn(3, 2, 3, 45, 8).unbind(0)
    for q, block, causal in [(q_all, 8, True), (q_all[..., -13:, :], 6, True), (q_all, 16, False)]:
        shown_out, shown_counts = namespace["blocked_attention"](q, k, v, block=block, causal=causal)
        out, counts = blocked.blocked_attention(q, k, v, block=block, causal=causal)
        assert torch.equal(shown_out, out) and shown_counts == counts
    assert counts.skipped == 0 and counts.full == math.ceil(45 / 16) ** 2


def run_with_changes(chapter: str, changes: list[tuple[str, str]]) -> dict:
    """Run a chapter's code cells after the reader's edits (timing cells skipped)."""
    namespace: dict = {}
    exec("import attnlab", namespace)
    for source in notebook_cells(chapter):
        for old, new in changes:
            source = source.replace(old, new)
        if "best_time" not in source:
            exec(source, namespace)
    return namespace


@pytest.mark.parametrize("changes", [
    [("AttentionConfig(d_model=128, n_heads=4)", "AttentionConfig(d_model=96, n_heads=8)"), ("B, T = 2, 6", "B, T = 1, 3")],
    [("AttentionConfig(d_model=128, n_heads=4)", "AttentionConfig(d_model=64, n_heads=1)"), ("B, T = 2, 6", "B, T = 3, 12")],
], ids=["H8-T3", "H1-T12"])
def test_chapter_2_runs_with_other_sizes(changes):
    for old, _ in changes:
        assert any(old in cell for cell in notebook_cells(CHAPTER_2)), old
    namespace = run_with_changes(CHAPTER_2, changes)
    assert namespace["per_head"].shape[-1] == len(namespace["tokens"])


def test_chapter_3_runs_with_other_block_sizes():
    changes = [("for block in (16, 64):", "for block in (7, 300):"),
               ("tile_explorer(T=32, blocks=(4, 8, 16))", "tile_explorer(T=20, blocks=(3, 32))"),
               ("T_kv, T_q = 5, 2", "T_kv, T_q = 9, 1"), ("sizes = [256, 512, 1024, 2048]", "sizes = [64, 128]")]
    for old, _ in changes:
        assert any(old in cell for cell in notebook_cells(CHAPTER_3)), old
    namespace = run_with_changes(CHAPTER_3, changes)
    assert namespace["counts"].skipped == 0  # block 300 > T = 200: one diagonal tile, nothing skipped


CHAPTER_4 = "04-teacher-forcing"
CHAPTER_5 = "05-is-my-model-causal"


@pytest.mark.parametrize("name, module", [("loss_prefix_by_prefix", "train"), ("train_step", "train"),
                                          ("Block", "gpt"), ("attend", "gpt")])
def test_chapter_4_shows_the_package_code(name, module):
    """The block, the attention call (the method SelfAttention.attend) and the training step."""
    import importlib

    package = importlib.import_module(f"attnlab.{module}")
    shown = definition(defined_in(notebook_cells(CHAPTER_4), name), name)
    assert ast.dump(shown) == ast.dump(definition(inspect.getsource(package), name))


@pytest.mark.parametrize("lang", ["en", "de", "zh"])
def test_the_chapter_4_block_attention_and_step_compute_what_the_package_computes(lang):
    from attnlab import gpt, train

    namespace = run_cells(notebook_cells(CHAPTER_4, lang), ["Block", "attend", "train_step"])
    for overrides in ({}, {"causal": False}, {"n_kv_head": 2}, {"window": 5}, {"attention": "explicit"}):
        config = gpt.GPTConfig(vocab_size=30, block_size=12, **overrides)
        torch.manual_seed(0)
        package = gpt.Block(config).eval()
        shown = namespace["Block"](config).eval()
        shown.load_state_dict(package.state_dict())
        x = torch.randn(2, 12, config.n_embd)
        attn = package.attn
        q, k, v = attn.project(x, torch.arange(12))
        with torch.no_grad():
            assert torch.equal(shown(x), package(x)), overrides
            assert torch.equal(namespace["attend"](attn, q, k, v), attn.attend(q, k, v)), overrides
            assert torch.equal(namespace["attend"](attn, q[:, :, -3:], k, v), attn.attend(q[:, :, -3:], k, v))
    models, losses = [], []
    for step in (namespace["train_step"], train.train_step):
        torch.manual_seed(0)
        model = gpt.GPT(gpt.GPTConfig(vocab_size=30, block_size=8))
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        x, y = torch.randint(0, 30, (2, 4, 8), generator=torch.Generator().manual_seed(1)).unbind(0)
        losses.append([step(model, optimizer, x, y) for _ in range(3)])
        models.append(model)
    assert losses[0] == losses[1]
    assert all(torch.equal(a, b) for a, b in zip(models[0].state_dict().values(), models[1].state_dict().values()))


def test_chapter_4_trains_the_block_and_the_attend_it_shows():
    """Editing the shown Block or attend changes the training (no display-only cells, issue 22)."""
    from attnlab import gpt

    needed = ("import ", "tok = course_tokenizer()", "class Block", "SelfAttention.attend = attend", "def train_step",
              "models, losses = {}, {}")
    original = gpt.SelfAttention.attend

    def causal_losses(changes):
        namespace: dict = {}
        exec("import attnlab", namespace)
        try:
            for source in notebook_cells(CHAPTER_4):
                if not any(part in source for part in needed):
                    continue
                for old, new in changes + [("for _ in range(500)", "for _ in range(2)")]:
                    assert old in "".join(notebook_cells(CHAPTER_4)), old
                    source = source.replace(old, new)
                exec(source, namespace)
                if "models, losses = {}, {}" in source:
                    return namespace["losses"][True]
        finally:
            gpt.SelfAttention.attend = original  # the notebook installs its attend on the package's class
        raise AssertionError("no training cell")

    shown = causal_losses([])
    assert shown == causal_losses([("for _ in range(500)", "for _ in range(500)")])
    assert causal_losses([("is_causal=True, **gqa)", "is_causal=False, **gqa)")]) != shown  # attend without its mask
    assert causal_losses([("x = x + self.attn(self.norm_1(x), cache)", "x = self.attn(self.norm_1(x), cache)")]) != shown
    assert gpt.SelfAttention.attend is original


@pytest.mark.parametrize("name", ["dependence_map", "cut_map", "jacobian_map"])
def test_chapter_5_shows_the_package_code(name):
    from attnlab import causality

    shown = definition(defined_in(notebook_cells(CHAPTER_5), name), name)
    assert ast.dump(shown) == ast.dump(definition(inspect.getsource(causality), name))


def test_chapter_5_runs_with_another_sequence():
    changes = [('tok.encode("the causal mask ")', 'tok.encode("a short leak")')]
    for old, _ in changes:
        assert any(old in cell for cell in notebook_cells(CHAPTER_5)), old
    namespace = run_with_changes(CHAPTER_5, changes)
    assert namespace["T"] == len("a short leak")
    assert len(namespace["explorer"].maps["causal"]["cut"]) == namespace["T"]


def test_chapter_6_shows_the_package_cache_update_and_its_caches_run_it():
    """Chapter 6 writes ``KVCache.update`` in a cell and installs it, so editing the cell changes the page."""
    from attnlab import gpt

    cell = defined_in(notebook_cells("06-kv-cache"), "update")
    assert ast.dump(definition(cell, "update")) == ast.dump(definition(inspect.getsource(gpt.KVCache), "update"))
    assert "KVCache.update = update" in cell


# ---- chapters 10 and 11: every taught cell drives what the page prints after it (issue 32, point 7)


def printed_by(chapter: str, needed: tuple[str, ...], changes: tuple[tuple[str, str], ...] = (),
               prelude: str = "") -> list[str]:
    """Run the code cells of ``chapter`` (en) that contain one of ``needed`` (in page order) after the
    reader's ``changes``; return what each printed. Each cell is registered with ``linecache`` as a
    kernel does, so ``inspect.getsource`` works on its functions (``run_ring_backward(code=...)``)."""
    import contextlib
    import io
    import linecache

    cells = [cell for cell in notebook_cells(chapter) if any(part in cell for part in needed)]
    assert len(cells) == len(needed), [part for part in needed if not any(part in cell for cell in cells)]
    source = "".join(cells)
    for old, _ in changes:
        assert old in source, old
    namespace: dict = {}
    exec("import attnlab\nattnlab.setup('en')\n" + prelude, namespace)
    printed = []
    for i, cell in enumerate(cells):
        for old, new in changes:
            cell = cell.replace(old, new)
        name = f"<{chapter} cell {i}>"
        linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(cell, name, "exec"), namespace)
        printed.append(out.getvalue())
    return printed


CHAPTER_11 = "11-backward-pass"
CH11_IMPORTS = "from attnlab.blocked_backward import"
CH11_STEP = ("def tile_grads", "def blocked_backward", "class BlockedAttention", "with blocked_attention_in(model")
CH11_RING = ("def tile_grads", "def ring_backward", "results = run_ring_backward(")
BREAKS_11 = {  # taught cell: (its edit, the cells to run, the first of them whose output must change)
    "attention_grads: dS without D": ([("ds = a * (da - D)", "ds = a * da")],
                                      ("def attention_grads", "class ByHand"), "class ByHand"),
    "ByHand: twice the gradient": ([("return *attention_grads(q, k, v, d_out, allowed), None",
                                     "return *attention_grads(q, k, v, 2 * d_out, allowed), None")],
                                   ("def attention_grads", "class ByHand"), "class ByHand"),
    "tile_grads: dK without its scale, GPT step": ([("dk = ds.transpose(-2, -1) @ q.to(dtype) * scale",
                                                     "dk = ds.transpose(-2, -1) @ q.to(dtype)")], CH11_STEP,
                                                   "with blocked_attention_in(model"),
    "tile_grads: dK without its scale, ring": ([("dk = ds.transpose(-2, -1) @ q.to(dtype) * scale",
                                                 "dk = ds.transpose(-2, -1) @ q.to(dtype)")], CH11_RING,
                                               "results = run_ring_backward("),
    "blocked_backward: dV twice": ([("dv[..., ks, :] += tile_dv", "dv[..., ks, :] += 2 * tile_dv")], CH11_STEP,
                                   "with blocked_attention_in(model"),
    "BlockedAttention: no dV": ([("return dq, dk, dv, None, None, None", "return dq, dk, 0 * dv, None, None, None")],
                                CH11_STEP, "with blocked_attention_in(model"),
    "ring_backward: dQ zeroed": ([("dq += share_dq", "dq += 0 * share_dq")], CH11_RING, "results = run_ring_backward("),
    "ring_backward: no last hop": ([("elif P > 1:", "elif False:")], CH11_RING, "results = run_ring_backward("),
}


@functools.lru_cache(maxsize=None)
def shown_11(needed: tuple[str, ...]) -> list[str]:
    return printed_by(CHAPTER_11, needed)


@pytest.mark.parametrize("taught", list(BREAKS_11))
def test_a_broken_taught_cell_of_chapter_11_changes_what_the_page_prints(taught):
    """The learner's experiment (issue 32): break a taught cell in a copy, and the later output must change.
    About 1 s each (the first ring run a few seconds: the process server starts)."""
    changes, needed, watched = BREAKS_11[taught]
    needed = (CH11_IMPORTS, *needed)
    index = needed.index(watched)
    shown = shown_11(needed)
    broken = printed_by(CHAPTER_11, needed, tuple(changes))
    assert "True" in shown[index], shown[index]
    assert broken[index].count("False") > shown[index].count("False"), broken[index]  # a check that held now fails


def test_a_broken_own_mask_attention_changes_what_chapter_10_prints():
    """Chapter 10's own_mask_attention is registered with the library and runs in the Llama that the
    next cell tests: let it drop the causal rule that the mask brings, and the left-padded run leaks too."""
    pytest.importorskip("transformers")
    needed = ("from attnlab.audit import", "def own_mask_attention", 'own = tiny_model("llama", "my_own_mask")')
    prelude = "import torch\nidx = torch.randint(1, 128, (1, 8), generator=torch.Generator().manual_seed(0))\n"
    broken = printed_by("10-auditing-a-real-model", needed, (("if attention_mask is not None:", "if False:"),), prelude)
    shown = printed_by("10-auditing-a-real-model", needed, (), prelude)  # last: the shown function stays registered
    broken, shown = broken[-1], shown[-1]
    assert broken != shown
    left = [run.splitlines()[1] for run in (shown, broken)]  # the left-padded run: no leak, then a leak
    assert left[0].count(" -") == 3 and left[1].count(" -") < 3, left  # leaks_line: "-" where a test found none
