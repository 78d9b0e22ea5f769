"""Every file one source makes (unexecuted), and all the text a reader of it sees.

:func:`render` writes a chapter's three notebooks, a page's three Markdown files, or an
exercise's stubs and solutions; :func:`reader_text` is all the text a reader of one language
sees (the CJK font subset is cut from it).
"""

from __future__ import annotations

import pathlib

from .exercises import is_exercise, render_exercise_files
from .messages import render_code
from .notebook import render_notebook, write_notebook
from .pages import render_page
from .source_format import LANGUAGES, ROOT
from .sources import Source


def reader_text(source: Source, lang: str) -> str:
    """Everything a reader of ``lang`` sees from ``source``: prose, code with its comments, alt texts, captions."""
    parts = []
    for cell in source.cells:
        if cell.kind == "markdown":
            parts.append(cell.text[lang])
        else:
            parts.append(render_code(cell.text, lang))
            parts += [texts[lang] for texts in (cell.alt, cell.caption) if texts]
    return "\n".join(parts)


def render(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Write the three unexecuted files of ``source`` under ``root``."""
    if is_exercise(source):
        return render_exercise_files(source, root)
    written = []
    for lang in LANGUAGES:
        out = source.output_path(lang, root)
        out.parent.mkdir(parents=True, exist_ok=True)
        if source.meta.get("kind") == "page":
            out.write_text(render_page(source, lang), "utf-8")
        else:
            write_notebook(render_notebook(source, lang), out)
        written.append(out)
    return written
