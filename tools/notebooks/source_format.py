"""The source format's vocabulary and where its files live.

What a source in chapters/src/ or exercises/src/ is made of (the package docstring and
docs/authoring.md describe the format): the three languages, the lines that open and close
a prose block or a code cell, a code cell's options, the ``en: … | de: … | zh: …`` form, an
exercise's solution markers; the folders the sources and the generated files live in; and
the error a source that breaks the format raises.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent  # tools/notebooks/source_format.py -> the repository
LANGUAGES = ("en", "de", "zh")
SOURCE_DIRS = ("chapters", "exercises")
GENERATED_DIRS = ("solutions",)  # output only: made from exercises/src/
LANG_OPEN = re.compile(r"^::::\{lang\}\s+(\w+)\s*$")
LANG_CLOSE = "::::"
CODE_OPEN = re.compile(r"^```\{code-cell\}(\s+\w+)?\s*$")
CODE_CLOSE = "```"
OPTION = re.compile(r"^:(\w[\w-]*):\s*(.*)$")
# A backtick fence's info string may not hold a backtick (CommonMark): ```{dropdown} with `code` in
# its title is read as a paragraph, and its closing fence opens a code block that swallows what follows.
BACKTICK_DIRECTIVE_WITH_CODE = re.compile(r"^\s*`{3,}\{[\w-]+\}.*`")
# A dropdown's title is its button: a link inside it is a control in a control (axe: nested-interactive).
DROPDOWN_TITLE_WITH_LINK = re.compile(r"^\s*(`{3,}|:{3})\{dropdown\}.*\]\(")
CELL_OPTIONS = ("tags", "alt", "caption")
THREE_LANGUAGES = r"en:\s(?P<en>.*?)\s\|\sde:\s(?P<de>.*?)\s\|\szh:\s(?P<zh>.*?)\s*$"  # en: … | de: … | zh: …
SOLUTION_BEGIN = "# BEGIN SOLUTION"  # an exercise's learner part: # BEGIN SOLUTION ... # END SOLUTION
SOLUTION_END = "# END SOLUTION"


class SourceError(ValueError):
    """A chapter source that breaks the format (message names file and line)."""
