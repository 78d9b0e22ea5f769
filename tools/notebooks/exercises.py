"""Exercises: one source -> stub notebooks (exercises/<lang>/) and solutions (solutions/<lang>/).

An exercise source marks the learner's part of a code cell with ``# BEGIN SOLUTION`` /
``# END SOLUTION``. The stub replaces each marked region by a localized TODO comment and
``raise NotImplementedError(...)`` (not executed, no outputs); the solution drops the markers
(executed, outputs stored). See docs/exercises.md.
"""

from __future__ import annotations

import json
import pathlib

import nbformat

from .notebook import GENERATED_CELLS, render_notebook, write_notebook
from .source_format import GENERATED_DIRS, LANGUAGES, ROOT, SOLUTION_BEGIN, SOLUTION_END, SourceError
from .sources import Source


def is_exercise(source: Source) -> bool:
    return source.path.parent.parent.name == "exercises"


def is_stub(path: pathlib.Path) -> bool:
    """An exercise notebook (exercises/<lang>/x.ipynb): rendered, never executed."""
    return path.parent.parent.name == "exercises" and path.parent.name in LANGUAGES


def solution_path(source: Source, lang: str, root: pathlib.Path = ROOT) -> pathlib.Path:
    return root / GENERATED_DIRS[0] / lang / f"{source.slug}.ipynb"


def stub_lines(indent: str, lang: str) -> list[str]:
    """What replaces a solution region in the learner's notebook (texts from attnlab/messages.toml)."""
    from attnlab.i18n import tr

    return [f"{indent}# {tr('grader.stub.todo', lang=lang)}",
            f"{indent}raise NotImplementedError({json.dumps(tr('grader.stub.raise', lang=lang), ensure_ascii=False)})"]


def solution_regions(code: str) -> list[tuple[int, int]]:
    """(begin, end) line numbers of every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` pair."""
    regions, begin = [], None
    for n, line in enumerate(code.split("\n")):
        marker = line.strip()
        if marker == SOLUTION_BEGIN:
            if begin is not None:
                raise SourceError(f"code line {n + 1}: {SOLUTION_BEGIN} inside another solution region")
            begin = n
        elif marker == SOLUTION_END:
            if begin is None:
                raise SourceError(f"code line {n + 1}: {SOLUTION_END} without {SOLUTION_BEGIN}")
            if n == begin + 1:
                raise SourceError(f"code line {n + 1}: empty solution region")
            regions.append((begin, n))
            begin = None
    if begin is not None:
        raise SourceError(f"code line {begin + 1}: {SOLUTION_BEGIN} without {SOLUTION_END}")
    return regions


def exercise_code(code: str, lang: str, solution: bool) -> str:
    """The solution (markers dropped) or the stub (each region -> TODO + raise) of a code cell."""
    lines = code.split("\n")
    out: list[str] = []
    last = 0
    for begin, end in solution_regions(code):
        out += lines[last:begin]
        if solution:
            out += lines[begin + 1:end]
        else:
            out += stub_lines(lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())], lang)
        last = end + 1
    return "\n".join(out + lines[last:])


def render_exercise(source: Source, lang: str, solution: bool) -> nbformat.NotebookNode:
    """The exercise notebook (the stub) or its solution, unexecuted."""
    nb = render_notebook(source, lang)
    nb.metadata["attnlab"]["notebook"] = "solution" if solution else "exercise"
    first = nb.cells[0]
    if solution and first.cell_type == "markdown" and first.source.startswith("# "):
        from attnlab.i18n import tr

        title, newline, rest = first.source[2:].partition("\n")
        first.source = f"# {tr('grader.solution_title', lang=lang, title=title)}{newline}{rest}"
        # The intro's "Stuck? Here is the solution" paragraph would link the solution page to itself:
        # on the solution page a note that points back to the exercise takes its place, right after
        # the intro's first paragraph, before the instructions that the solution does not need.
        own_link = f"](../../{GENERATED_DIRS[0]}/{lang}/{source.slug}.ipynb)"
        note = tr("grader.solution_note", lang=lang, link=f"../../exercises/{lang}/{source.slug}.ipynb")
        paragraphs = [p for p in first.source.split("\n\n") if own_link not in p]
        first.source = "\n\n".join(paragraphs[:2] + [note] + paragraphs[2:])
    regions = 0
    for cell, code_cell in zip([c for c in nb.cells if c.cell_type == "code" and c.id not in GENERATED_CELLS],
                               [c for c in source.cells if c.kind == "code"]):
        try:
            regions += len(solution_regions(cell.source))
            cell.source = exercise_code(cell.source, lang, solution)
        except SourceError as error:
            raise SourceError(f"{source.rel}:{code_cell.line}: {error}") from None
    if not regions:
        raise SourceError(f"{source.rel}: an exercise needs at least one {SOLUTION_BEGIN} ... {SOLUTION_END} region")
    return nb


def render_exercise_files(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Write the stub and the solution of ``source`` in every language (unexecuted)."""
    written = []
    for lang in LANGUAGES:
        for path, solution in ((source.output_path(lang, root), False), (solution_path(source, lang, root), True)):
            write_notebook(render_exercise(source, lang, solution), path)
            written.append(path)
    return written
