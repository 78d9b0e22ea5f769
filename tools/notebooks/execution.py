"""Executing notebooks: outputs stored in place, the same on every run; refreshing without running.

:func:`execute` runs a notebook in a fresh kernel and stores its outputs and widget state
(no error and nothing on stderr allowed; widget ids and stream chunks made deterministic).
:func:`refresh` renders a source again and keeps the outputs it had, when only prose or cell
options changed.
"""

from __future__ import annotations

import json
import pathlib
import uuid

import nbformat

from .comments import strip_comments
from .exercises import is_exercise, solution_path
from .files import render
from .notebook import LANGUAGE_INFO, figures_without_alt, write_notebook
from .source_format import LANGUAGES, ROOT, SourceError
from .sources import Source

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def stable_widget_ids(nb: nbformat.NotebookNode, seed: str) -> nbformat.NotebookNode:
    """Replace the random widget model ids by ids derived from ``seed`` and their order."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    text = json.dumps(nb, ensure_ascii=False)
    for n, old in enumerate(list(state)):
        text = text.replace(old, uuid.uuid5(uuid.NAMESPACE_URL, f"attnlab:{seed}:{n}").hex)
    return nbformat.from_dict(json.loads(text))


def execute(path: pathlib.Path, timeout: int = 300) -> None:
    """Run a notebook in a fresh kernel; store outputs and widget state in place.

    Fails on any error output and on anything written to stderr (warnings
    included, such as matplotlib's missing-glyph warning).
    """
    from nbclient import NotebookClient

    path = path.resolve()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            record_timing=False, resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" or output.get("name") == "stderr":
                raise RuntimeError(f"{path.relative_to(ROOT)} cell {cell.id}: unexpected output\n"
                                   f"{output.get('text') or output.get('evalue')}")
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = coalesce_streams(cell.outputs)
    if missing := figures_without_alt(nb):
        raise RuntimeError(f"{path.relative_to(ROOT)}: cells {missing} show a figure without alt text: "
                           "add ':alt: en: … | de: … | zh: …' to the code cell in the source")
    nb.metadata.language_info = dict(LANGUAGE_INFO)
    nb = stable_widget_ids(nb, path.relative_to(ROOT).as_posix())
    write_notebook(nb, path)


def coalesce_streams(outputs: list) -> list:
    """Join consecutive stdout (or stderr) chunks: how a print is split depends on timing."""
    merged: list = []
    for output in outputs:
        if (output.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1]["name"] == output["name"]):
            merged[-1]["text"] += output["text"]
        else:
            merged.append(output)
    return merged


def executed_paths(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The notebooks of ``source`` that ``build`` executes: a chapter's, or an exercise's solutions."""
    if source.meta.get("kind") == "page":
        return []
    if is_exercise(source):
        return [solution_path(source, lang, root) for lang in LANGUAGES]
    return [source.output_path(lang, root) for lang in LANGUAGES]


def refresh(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Render ``source`` again (prose, alt texts, captions, tags, exercise stubs) and keep the
    outputs and widget state of the executed notebooks.

    Only for changes that cannot alter what a cell prints: refuses, and leaves every file as
    it was, when any code cell's id, code (comments aside) or order differs from what was
    executed (run ``build`` then).
    """
    executed = {path: nbformat.read(path, as_version=4) for path in executed_paths(source, root) if path.exists()}
    before = {path: path.read_bytes() for path in executed}
    written = render(source, root)
    code = lambda nb: [(c.id, strip_comments(c.source)) for c in nb.cells if c.cell_type == "code"]  # noqa: E731
    fresh = {path: nbformat.read(path, as_version=4) for path in executed}
    changed = [path for path in executed if code(fresh[path]) != code(executed[path])]
    if changed:
        for path, data in before.items():
            path.write_bytes(data)
        raise SourceError(f"{changed[0].relative_to(root)}: code changed since it was executed; "
                          "run `python -m tools.notebooks build` instead")
    for path, old in executed.items():
        new = fresh[path]
        outputs = {c.id: c for c in old.cells if c.cell_type == "code"}
        for cell in new.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = outputs[cell.id].outputs, outputs[cell.id].execution_count
        for key in ("widgets", "language_info"):
            if key in old.metadata:
                new.metadata[key] = old.metadata[key]
        write_notebook(new, path)
    return written
