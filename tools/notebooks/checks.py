"""Checking the committed files against their sources: stale, missing, orphaned, code drift.

``python -m tools.notebooks check`` (and tests/test_notebooks.py) lists every problem: a
notebook or page that its source would no longer render, one missing or made by no source,
an unexecuted chapter or solution, an executed stub, a figure without alt text, code that
differs between the en/de/zh notebooks, and English comments in the de or zh ones.
"""

from __future__ import annotations

import copy
import itertools
import json
import pathlib

import nbformat

from .comments import strip_comments, untranslated_comments
from .exercises import is_exercise, render_exercise, solution_path, stub_lines
from .messages import neutral_code, render_code
from .notebook import GENERATED_CELLS, figures_without_alt, render_notebook
from .pages import render_page
from .source_format import GENERATED_DIRS, LANGUAGES, ROOT, SOURCE_DIRS, SourceError
from .sources import Source, find_sources


def strip_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook as rendered, before execution (what a source change alters)."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def compared_code(nb: nbformat.NotebookNode, source: Source, lang: str, neutral=lambda code: code) -> list[str]:
    """What must be identical in every language: each code cell without comments, its messages turned back into tr()."""
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.id not in GENERATED_CELLS]
    rewrites = []
    for cell in source.cells:
        if cell.kind == "code":
            rewrites.append([])
            render_code(cell.text, lang, rewrites[-1])
    return [strip_comments(neutral_code(neutral(code), done)) for code, done in itertools.zip_longest(cells, rewrites, fillvalue=[])
            if code != []]


def check(root: pathlib.Path = ROOT) -> list[str]:
    """Problems with the committed files: stale, missing, orphaned, code drift, English comments in de/zh."""
    problems: list[str] = []
    try:
        sources = find_sources()
    except SourceError as error:
        return [str(error)]
    expected: set[pathlib.Path] = set()
    for source in sources:
        problems += [f"{where}: an English comment in the {where.split(': ')[1]} notebook; write it "
                     "'# en: … | de: … | zh: …' (only shapes and formulas stay untranslated)"
                     for where in untranslated_comments(source)]
        if is_exercise(source):
            problems += check_exercise(source, root, expected)
            continue
        code_by_lang = {}
        for lang in LANGUAGES:
            out = source.output_path(lang, root)
            expected.add(out)
            rel = out.relative_to(root)
            if not out.exists():
                problems.append(f"{rel}: missing, run `make notebooks`")
                continue
            if source.meta.get("kind") == "page":
                if out.read_text("utf-8") != render_page(source, lang):
                    problems.append(f"{rel}: stale versus {source.rel}, run `make notebooks`")
                continue
            committed = nbformat.read(out, as_version=4)
            if strip_outputs(committed) != render_notebook(source, lang):
                problems.append(f"{rel}: stale versus {source.rel}, run `make notebooks`")
            code_by_lang[lang] = compared_code(committed, source, lang)
            unexecuted = [c.id for c in committed.cells if c.cell_type == "code" and c.execution_count is None]
            if unexecuted:
                problems.append(f"{rel}: cells {unexecuted[:3]} not executed, run `make notebooks`")
            if no_alt := figures_without_alt(committed):
                problems.append(f"{rel}: cells {no_alt} show a figure without alt text (add :alt: in {source.rel})")
        if len(code_by_lang) == len(LANGUAGES) and len({json.dumps(v) for v in code_by_lang.values()}) > 1:
            problems.append(f"{source.rel}: code differs between the en/de/zh notebooks")
    for section in (*SOURCE_DIRS, *GENERATED_DIRS):
        for lang in LANGUAGES:
            for path in sorted((root / section / lang).glob("*")):
                if path.suffix in (".ipynb", ".md") and path not in expected:
                    problems.append(f"{path.relative_to(root)}: no source in "
                                    f"{'exercises' if section in GENERATED_DIRS else section}/src/ makes it")
    return problems


def _stub_code(nb: nbformat.NotebookNode, source: Source, lang: str) -> list[str]:
    """Code of a stub without comments, its localized raise message and messages made neutral."""
    raise_line = stub_lines("", lang)[1]
    return compared_code(nb, source, lang, lambda code: code.replace(raise_line, "raise NotImplementedError()"))


def check_exercise(source: Source, root: pathlib.Path, expected: set[pathlib.Path]) -> list[str]:
    """Stale, missing, executed stubs, unexecuted solutions, code drift of one exercise source."""
    problems: list[str] = []
    stub_code: dict[str, list[str]] = {}
    solution_code: dict[str, list[str]] = {}
    for lang in LANGUAGES:
        for out, solution in ((source.output_path(lang, root), False), (solution_path(source, lang, root), True)):
            expected.add(out)
            rel = out.relative_to(root)
            if not out.exists():
                problems.append(f"{rel}: missing, run `make notebooks`")
                continue
            committed = nbformat.read(out, as_version=4)
            try:
                rendered = render_exercise(source, lang, solution)
            except SourceError as error:
                return [str(error)]
            if strip_outputs(committed) != rendered:
                problems.append(f"{rel}: stale versus {source.rel}, run `make notebooks`")
            code_cells = [c for c in committed.cells if c.cell_type == "code"]
            if solution:
                solution_code[lang] = compared_code(committed, source, lang)
                unexecuted = [c.id for c in code_cells if c.execution_count is None]
                if unexecuted:
                    problems.append(f"{rel}: cells {unexecuted[:3]} not executed, run `make notebooks`")
            else:
                stub_code[lang] = _stub_code(committed, source, lang)
                if any(c.outputs or c.execution_count is not None for c in code_cells) or "widgets" in committed.metadata:
                    problems.append(f"{rel}: an exercise notebook must have no outputs, run `make notebooks`")
    for kind, code_by_lang in (("exercise", stub_code), ("solution", solution_code)):
        if len(code_by_lang) == len(LANGUAGES) and len({json.dumps(v) for v in code_by_lang.values()}) > 1:
            problems.append(f"{source.rel}: {kind} code differs between the en/de/zh notebooks")
    return problems
