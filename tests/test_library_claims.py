"""Every sentence of the course that says how torch or transformers behaves has a check
(docs/library-claims.md): a row names the chapter, the prose cell, a verbatim piece of the
English sentence, the check and the library version. This file fails on a row whose sentence
is gone from its cell, whose check does not exist (a pytest node id, a tagged chapter cell with
a compared output, a source file of the installed library), or whose version is not the one
requirements/lock.txt pins. It runs nothing of the libraries apart from the three checks at its end:
the checks themselves run in the suite (nbval compares the tagged cells' outputs; pytest runs the
node ids)."""

from __future__ import annotations

import ast
import json
import pathlib
import re
from dataclasses import dataclass
from functools import cache

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLAIMS = ROOT / "docs" / "library-claims.md"
HEADER = ["chapter", "cell", "claim", "check", "version"]
LIBRARIES = ("torch", "transformers")
QUOTE = re.compile(r"“(.+?)”")
SOURCE = re.compile(r"^source: (?P<path>[\w./-]+)@(?P<version>[\w.+-]+)(?:, lines? (?P<first>\d+)(?:-(?P<last>\d+))?)?$")
UPSTREAM = {"pytorch/pytorch/": "torch", "huggingface/transformers/": "transformers"}
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
CELL_ID = re.compile(r"^md-(\d{3})$")
TAG = re.compile(r"^claim-[a-z0-9-]+$")


@dataclass
class Row:
    line: int
    chapter: str
    cell: str
    claim: str
    checks: list[str]
    versions: dict[str, str]

    def __str__(self) -> str:
        return f"docs/library-claims.md:{self.line} (chapter {self.chapter}, {self.cell})"


def split_row(line: str) -> list[str]:
    """The cells of a Markdown table row; `\\|` is a pipe inside a cell."""
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


def parse_rows(text: str) -> list[Row]:
    rows, in_table = [], False
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("|"):
            in_table = False
            continue
        cells = split_row(line)
        if [cell.lower() for cell in cells] == HEADER:
            in_table = True
            continue
        if not in_table or set(line.replace("|", "").strip()) <= set("-: "):
            continue
        assert len(cells) == len(HEADER), f"docs/library-claims.md:{n}: {len(cells)} cells, expected {HEADER}"
        chapter, cell, claim, check, version = cells
        versions = {}
        for part in filter(None, (p.strip() for p in version.split(","))):
            name, _, number = part.partition(" ")
            versions[name] = number.strip()
        rows.append(Row(n, chapter, cell, claim, [c.strip() for c in check.split(";") if c.strip()], versions))
    return rows


@cache
def rows() -> tuple[Row, ...]:
    return tuple(parse_rows(CLAIMS.read_text("utf-8")))


@cache
def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text("utf-8").splitlines():
        name, sep, version = line.partition("==")
        if sep and name.strip() in LIBRARIES:
            pins[name.strip()] = version.split(";")[0].split()[0]
    return pins


def notebook(chapter: str) -> dict:
    """The English notebook of chapter `8` (chapters/en/08-….ipynb), as JSON."""
    found = sorted((ROOT / "chapters" / "en").glob(f"{int(chapter):02d}-*.ipynb"))
    assert len(found) == 1, f"chapter {chapter}: {len(found)} English notebooks"
    return read_notebook(found[0])


@cache
def read_notebook(path: pathlib.Path) -> dict:
    return json.loads(path.read_text("utf-8"))


def page_text(stem: str) -> str:
    """The English page generated from chapters/src/<stem>.md (the landing page, the cheat sheet, …)."""
    path = ROOT / "chapters" / "en" / f"{stem}.md"
    assert path.exists(), f"no page {path.relative_to(ROOT)}"
    return path.read_text("utf-8")


@cache
def tagged_cells() -> dict[str, list[tuple[pathlib.Path, dict]]]:
    """claim-* tag -> [(English notebook, its cell)], read from the generated notebooks, which
    `tools.notebooks check` keeps equal to their sources."""
    found: dict[str, list] = {}
    for path in sorted((ROOT / "chapters" / "en").glob("*.ipynb")):
        if "claim-" not in path.read_text("utf-8"):
            continue
        for cell in read_notebook(path)["cells"]:
            for tag in cell.get("metadata", {}).get("tags", []):
                if tag.startswith("claim-"):
                    found.setdefault(tag, []).append((path, cell))
    return found


def normalized(text: str) -> str:
    return " ".join(text.split())


def test_lock_pins_both_libraries():
    assert set(locked()) == set(LIBRARIES), f"requirements/lock.txt pins {locked()}"


def test_the_file_has_rows_in_the_documented_format():
    assert rows(), "docs/library-claims.md has no rows under the header | chapter | cell | claim | check | version |"
    for row in rows():
        assert row.checks, f"{row}: no check"
        assert QUOTE.search(row.claim), f"{row}: the claim must quote the English sentence (or a piece of it) in “…”"


@pytest.mark.parametrize("row", rows(), ids=str)
def test_the_quoted_sentence_is_in_its_cell(row):
    if not row.chapter.isdigit():  # a page: no cells, the quote must be on the English page
        assert row.cell == "-", f"{row}: a page has no cell ids; write `-`"
        text = normalized(page_text(row.chapter))
        for quoted in QUOTE.findall(row.claim):
            assert normalized(quoted) in text, f"{row}: “{quoted}” is not on the English page"
        return
    assert CELL_ID.match(row.cell), f"{row}: cell must be a prose cell id md-NNN (the notebooks' cell id)"
    cells = {cell["id"]: cell for cell in notebook(row.chapter)["cells"]}
    assert row.cell in cells, f"{row}: the English notebook has no cell {row.cell}"
    text = normalized("".join(cells[row.cell]["source"]))
    for quoted in QUOTE.findall(row.claim):
        if normalized(quoted) not in text:
            where = [cell_id for cell_id, cell in cells.items() if cell["cell_type"] == "markdown"
                     and normalized(quoted) in normalized("".join(cell["source"]))]
            pytest.fail(f"{row}: “{quoted}” is not in {row.cell}" + (f" (it is in {', '.join(where)})" if where else
                                                                       " (nor in any other cell: update the row)"))


@pytest.mark.parametrize("row", rows(), ids=str)
def test_the_version_is_the_locked_one(row):
    assert row.versions, f"{row}: no version (write `torch {locked()['torch']}` or `transformers …`)"
    for name, version in row.versions.items():
        assert name in LIBRARIES, f"{row}: unknown library {name!r}"
        assert version == locked()[name], f"{row}: {name} {version}, but requirements/lock.txt pins {locked()[name]}"


def check_node_id(row: Row, check: str) -> None:
    path, *names = check.split("::")
    file = ROOT / path
    assert file.is_file() and path.startswith("tests/"), f"{row}: no test file {path}"
    assert names, f"{row}: {check} names no test"
    names[-1] = names[-1].split("[")[0]  # a parametrized id: the function must exist
    scope = ast.parse(file.read_text("utf-8")).body
    for name in names:
        found = [node for node in scope if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and node.name == name]
        assert found, f"{row}: {check}: no {name} in {path}"
        scope = found[0].body if isinstance(found[0], ast.ClassDef) else []
    assert names[-1].startswith("test"), f"{row}: {check} is not a test"


def check_cell(row: Row, check: str) -> None:
    tag = check.removeprefix("cell:").strip()
    assert TAG.match(tag), f"{row}: {check}: a check cell is named by a tag claim-<words> (`:tags: [claim-…]`)"
    places = tagged_cells().get(tag, [])
    assert len(places) == 1, f"{row}: {check}: tagged on {len(places)} cells of the English notebooks, expected one"
    path, cell = places[0]
    tags = cell["metadata"]["tags"]
    assert cell["cell_type"] == "code" and "nbval-ignore-output" not in tags, (
        f"{row}: {check}: the tagged cell of {path.name} must be a code cell whose output nbval compares")
    assert cell.get("outputs"), f"{row}: {check}: the cell prints nothing, so nbval compares nothing"


def check_source(row: Row, check: str) -> None:
    match = SOURCE.match(check)
    assert match, f"{row}: {check!r}: write `source: <file>@<version>, lines A-B`"
    path, version = match["path"], match["version"]
    upstream = next((lib for prefix, lib in UPSTREAM.items() if path.startswith(prefix)), None)
    library = upstream or path.split("/")[0]
    assert library in LIBRARIES, f"{row}: {path}: a file of torch/…, transformers/… (installed) or {tuple(UPSTREAM)}"
    if upstream and COMMIT.match(version):  # an upstream copy read at a commit, not at the release tag
        assert f"read at {version}" in row.claim, (
            f"{row}: {path}@{version} is a commit, not {library} {locked()[library]}: say so in the claim "
            f"(“read at {version}”) and what checks the behaviour at the locked version, or which version measured it")
    else:
        assert version.removeprefix("v") == locked()[library], f"{row}: {path}@{version}, but the lock pins {locked()[library]}"
    assert row.versions.get(library) == locked()[library], f"{row}: the version column must name {library}"
    if upstream is None:  # in the installed package: the file and its lines must be there
        import importlib.util

        base = pathlib.Path(importlib.util.find_spec(library).origin).parent.parent
        file = base / path
        assert file.is_file(), f"{row}: {path} is not in the installed {library}"
        if match["first"]:
            lines = len(file.read_text("utf-8").splitlines())
            assert int(match["last"] or match["first"]) <= lines, f"{row}: {path} has {lines} lines"


def check_docs(row: Row, check: str) -> None:
    url = check.removeprefix("docs:").strip()
    assert url.startswith("https://"), f"{row}: {check}"
    versions = {lib: locked()[lib] for lib in row.versions}
    wanted = {"torch": "/docs/{0}.{1}/", "transformers": "/transformers/v{0}.{1}.{2}/"}
    assert any(wanted[lib].format(*v.split(".")) in url for lib, v in versions.items()), (
        f"{row}: {url}: cite the documentation of the locked version (…/docs/2.13/… or …/transformers/v5.24.0/…)")


@pytest.mark.parametrize("row", rows(), ids=str)
def test_every_check_exists(row):
    for check in row.checks:
        if check.startswith("tests/"):
            check_node_id(row, check)
        elif check.startswith("cell:"):
            check_cell(row, check)
        elif check.startswith("source:"):
            check_source(row, check)
        elif check.startswith("docs:"):
            check_docs(row, check)
        else:
            pytest.fail(f"{row}: unknown check {check!r} (tests/…::test_…, cell:claim-…, source: …, docs: …)")


def test_every_claim_cell_is_named_by_a_row():
    named = {check.removeprefix("cell:").strip() for row in rows() for check in row.checks if check.startswith("cell:")}
    unnamed = sorted(set(tagged_cells()) - named)
    assert not unnamed, f"cells tagged as claim checks that no row of docs/library-claims.md names: {unnamed}"


def test_the_parser_reads_escaped_pipes_and_several_checks():
    text = ("| chapter | cell | claim | check | version |\n|---|---|---|---|---|\n"
            "| 8 | md-024 | “a \\| b” | tests/x.py::test_y; cell:claim-z | torch 2.13.0, transformers 5.24.0 |\n")
    (row,) = parse_rows(text)
    assert row.claim == "“a | b”" and row.checks == ["tests/x.py::test_y", "cell:claim-z"]
    assert row.versions == {"torch": "2.13.0", "transformers": "5.24.0"}


@pytest.mark.parametrize("check, message", [
    ("tests/test_library_claims.py::test_no_such_test", "no test_no_such_test"),
    ("tests/no_such_file.py::test_x", "no test file"),
    ("cell:claim-no-such-cell", "tagged on 0 cells"),
    ("source: transformers/no_such_file.py@5.24.0", "not in the installed transformers"),
    ("source: transformers/masking_utils.py@5.23.0", "the lock pins"),
    ("source: transformers/masking_utils.py@5.24.0, lines 1-999999", "lines"),
    ("source: transformers/masking_utils.py@008ec6b", "the lock pins"),
    ("source: pytorch/pytorch/aten/src/ATen/native/cpu/FlashAttentionKernel.cpp@008ec6b", "read at 008ec6b"),
    ("docs: https://docs.pytorch.org/docs/stable/notes/randomness.html", "locked version"),
])
def test_a_missing_or_stale_check_fails(check, message):
    row = Row(0, "8", "md-003", "“x”", [check], {"torch": locked()["torch"], "transformers": locked()["transformers"]})
    with pytest.raises((AssertionError, pytest.fail.Exception), match=re.escape(message)):
        test_every_check_exists(row)


# --- checks of claims that had none (chapter 3: SDPA's CPU tiles) ---

def test_sdpa_cpu_flash_kernel_tiles_are_those_chapter_3_counts():
    """Chapter 3 counts SDPA's causal work on the CPU with the flash kernel's tiles (256 x 512 queries x
    keys, 64 x 512 below 768 queries, 32 x 512 below 192). Read back through the call a reader makes:
    the kernel allocates one float32 working buffer of (q_tile x k_tile + 2 q_tile + q_tile x d) numbers
    per thread (scores, row maximum and sum, output tile), which torch.profiler records; two head sizes
    separate q_tile from k_tile."""
    import torch
    import torch.nn.functional as F

    from attnlab.blocked import sdpa_cpu_tiles

    threads, calls = torch.get_num_threads(), [(T, d) for T in (128, 256, 1024) for d in (32, 64)]
    with torch.autograd.profiler.profile(profile_memory=True, use_kineto=False) as recorded:  # 0.1 s; kineto's takes seconds
        for T, d in calls:
            F.scaled_dot_product_attention(*torch.randn(3, 1, 2, T, d).unbind(0), is_causal=True)
    allocated = {event.cpu_memory_usage for event in recorded.function_events if event.name == "aten::empty"}
    for T, d in calls:
        q_tile, k_tile = sdpa_cpu_tiles(T)
        expected = threads * (q_tile * min(k_tile, T) + 2 * q_tile + q_tile * d) * 4  # float32 bytes
        assert expected in allocated, (T, d, expected, sorted(allocated))


def test_sdpa_cpu_causal_work_counts_whole_key_tiles():
    """The work fractions chapter 3 prints: a query tile computes every key tile that begins at or
    before its last query (`num_keys = min(m + qBlockSize, kvSize)`), counted here pair by pair."""
    from attnlab.blocked import attention_flops, sdpa_cpu_causal_work, sdpa_cpu_tiles

    assert [sdpa_cpu_causal_work(T) for T in (256, 1024, 4096)] == [1.0, 6 / 8, 72 / 128]
    for T in (100, 700, 1000, 1500):
        q_tile, k_tile = sdpa_cpu_tiles(T)
        computed = 0
        for query in range(T):
            m = query // q_tile * q_tile
            last = min(m + q_tile, T) - 1  # the tile's last query
            computed += sum(min(k_tile, T - n) for n in range(0, last + 1, k_tile))
        assert sdpa_cpu_causal_work(T) == computed / T**2
    assert attention_flops(4, 2, 8, causal=False) == 4 * 2 * 8 * 16 and attention_flops(4, 2, 8, causal=True) == 4 * 2 * 8 * 10


def test_a_decode_step_of_chapter_6s_gpu_model_is_about_300_operator_calls():
    """Chapter 6 explains the flat GPU decode rows by launch overhead: one cached decode step of the
    benchmark's `gpu` model (6 layers, D = 384, 6 heads) is some 300 PyTorch operator calls, about
    half of them views (no kernel) and the rest small kernels. Counted through the model's own call."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from attnlab.gpt import GPT, GPTConfig, KVCache

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, block_size=8, n_layer=6, n_head=6, n_embd=384)).eval()
    cache = KVCache(model.config, 1, 8)
    with torch.no_grad():
        model(torch.randint(0, 256, (1, 4)), cache=cache)  # prefill: the calls of a step do not depend on the context
        counted = Count()
        with counted:
            model(torch.randint(0, 256, (1, 1)), cache=cache)  # one decode step
    views = {"view", "_unsafe_view", "t", "transpose", "select", "slice", "unsqueeze", "expand", "permute", "alias",
             "split", "unbind", "detach", "as_strided"}
    kernels = [name for name in counted.calls if name not in views]
    assert 250 <= len(counted.calls) <= 350 and 80 <= len(kernels) <= 160, (len(counted.calls), len(kernels))
