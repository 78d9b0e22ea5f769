"""One source per chapter -> three notebooks (en, de, zh).

Source format (``chapters/src/NN-slug.md``, see docs/authoring.md)::

    ---
    kind: notebook            # or "page" (a plain Markdown page per language)
    ---

    ::::{lang} en
    English prose (MyST Markdown)
    ::::
    ::::{lang} de
    Deutscher Text
    ::::
    ::::{lang} zh
    中文正文
    ::::

    ```{code-cell}
    :tags: [hide-input]
    :alt: en: what the figure shows | de: was die Abbildung zeigt | zh: 图中显示的内容
    :caption: en: A caption | de: Eine Bildunterschrift | zh: 图注
    code, written once for all languages
    ```

A run of ``::::{lang}`` blocks becomes one Markdown cell in each language
and must hold en, de and zh exactly once. Code cells are shared; a
generated setup cell (after the opening prose) sets the notebook's language.
``:alt:`` and ``:caption:`` give the cell's figure its text in each language
(stored as myst-nb cell metadata, ``mystnb: {image: {alt}, figure: {caption}}``);
every figure output needs an ``:alt:``. In a ``kind: page`` source, code cells
become plain ``python`` code blocks (shown, not executed).

Comments in code cells are written in all three languages and each notebook
keeps its own (the code itself is identical)::

    x = q.view(B, T, H, d)  # en: split D into H heads | de: D in H Köpfe aufteilen | zh: 把 D 拆成 H 个头
    # en: a whole-line comment
    # de: ein Kommentar über eine ganze Zeile
    # zh: 整行注释

A neutral lead-in before ``en:`` (``# [B, T]: en: … | de: … | zh: …``) stays in every
language. Messages are shown the same way: ``print(tr("ch8.empty_rows"))`` becomes
``print("Queries, die nichts lesen, pro Zeile des Batches:")`` in the German
notebook, and a call with placeholders an f-string (or ``"…".format(…)``) that
prints exactly what tr() prints (see "Messages in code" in messages.py).

Commands (run from the repository root)::

    python -m tools.notebooks build [SOURCE ...]  # render + execute (stores outputs)
    python -m tools.notebooks render              # render only, no execution
    python -m tools.notebooks refresh [SOURCE ...]  # only prose or cell options changed: keep outputs
    python -m tools.notebooks check               # stale / missing language / code drift

Exercises (``exercises/src/NN-slug.md``, same format) mark the learner's part
of a code cell with ``# BEGIN SOLUTION`` / ``# END SOLUTION`` lines. Each
gives ``exercises/<lang>/NN-slug.ipynb`` (the stub: each marked region
replaced by a localized TODO comment and ``raise NotImplementedError(...)``,
not executed, no outputs) and ``solutions/<lang>/NN-slug.ipynb`` (markers
dropped, executed, outputs stored). See docs/exercises.md.

The modules, in the order they build on each other: source_format (the format's
vocabulary, the folders, SourceError), comments (three-language comments), message_writer
and messages (tr() calls written out as text), sources (the parser), notebook, pages and
exercises (rendering each kind), files (every file of a source), checks (committed files
against their sources), execution (running notebooks, refreshing) and __main__ (the
command line). This package re-exports what other code uses.
"""

from __future__ import annotations

from .checks import check, compared_code, strip_outputs
from .comments import localize_code, strip_comments, untranslated_comments
from .execution import WIDGET_STATE, execute, refresh
from .exercises import (exercise_code, is_exercise, is_stub, render_exercise, render_exercise_files, solution_path,
                        solution_regions)
from .files import reader_text, render
from .message_writer import CODE_WIDTH
from .messages import MessageRewrite, localize_messages, neutral_code, render_code
from .notebook import GENERATED_CELLS, colab_cell, figures_without_alt, render_notebook, write_notebook
from .pages import chapter_list, chapter_title, page_text, render_page, toc_chapters
from .source_format import GENERATED_DIRS, LANG_CLOSE, LANG_OPEN, LANGUAGES, ROOT, SOURCE_DIRS, SourceError
from .sources import Cell, Source, find_sources, parse_source

__all__ = ["CODE_WIDTH", "GENERATED_CELLS", "GENERATED_DIRS", "LANG_CLOSE", "LANG_OPEN", "LANGUAGES", "ROOT",
           "SOURCE_DIRS", "WIDGET_STATE", "Cell", "MessageRewrite", "Source", "SourceError", "chapter_list",
           "chapter_title", "check", "colab_cell", "compared_code", "execute", "exercise_code", "figures_without_alt",
           "find_sources", "is_exercise", "is_stub", "localize_code", "localize_messages", "neutral_code", "page_text",
           "parse_source", "reader_text", "refresh", "render", "render_code", "render_exercise",
           "render_exercise_files", "render_notebook", "render_page", "solution_path", "solution_regions",
           "strip_comments", "strip_outputs", "toc_chapters", "untranslated_comments", "write_notebook"]
