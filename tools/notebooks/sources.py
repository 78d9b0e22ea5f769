"""Reading a source: ``chapters/src/NN-slug.md`` -> a :class:`Source` of prose and code cells.

The parser checks the format as it reads (each prose block in en, de and zh exactly once,
known cell options, three-language comments, known message keys) and names file and line
in every :class:`SourceError`.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass, field

import yaml

from .comments import localize_code
from .message_writer import unknown_message_keys
from .source_format import (BACKTICK_DIRECTIVE_WITH_CODE, CELL_OPTIONS, CODE_CLOSE, CODE_OPEN, DROPDOWN_TITLE_WITH_LINK,
                            LANG_CLOSE, LANG_OPEN, LANGUAGES, OPTION, ROOT, SOURCE_DIRS, THREE_LANGUAGES, SourceError)

LOCALIZED_OPTION = re.compile(r"^" + THREE_LANGUAGES)


@dataclass
class Cell:
    kind: str  # "markdown" or "code"
    text: dict[str, str] | str  # markdown: {lang: text}; code: the code
    tags: list[str] = field(default_factory=list)
    line: int = 0
    alt: dict[str, str] | None = None  # code cells: the figure's alt text per language
    caption: dict[str, str] | None = None  # code cells: the figure's caption per language


@dataclass
class Source:
    path: pathlib.Path
    meta: dict
    cells: list[Cell]

    @property
    def rel(self) -> str:
        return (self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path).as_posix()

    @property
    def slug(self) -> str:
        return self.path.stem

    def output_path(self, lang: str, root: pathlib.Path = ROOT) -> pathlib.Path:
        section = self.path.parent.parent.name  # chapters/src/x.md -> chapters
        suffix = ".md" if self.meta.get("kind") == "page" else ".ipynb"
        return root / section / lang / f"{self.slug}{suffix}"


def parse_source(path: pathlib.Path) -> Source:
    lines = path.read_text("utf-8").splitlines()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    where = lambda n: f"{shown}:{n + 1}"  # noqa: E731
    meta: dict = {}
    i = 0
    if lines and lines[0] == "---":
        end = lines.index("---", 1)
        meta = yaml.safe_load("\n".join(lines[1:end])) or {}
        i = end + 1
    cells: list[Cell] = []
    group: dict[str, str] | None = None
    group_line = 0

    def close_group() -> None:
        nonlocal group
        if group is not None:
            missing = [lang for lang in LANGUAGES if lang not in group]
            if missing:
                raise SourceError(f"{where(group_line)}: prose block lacks {', '.join(missing)}")
            cells.append(Cell("markdown", group, line=group_line + 1))
            group = None

    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if m := LANG_OPEN.match(line):
            lang = m.group(1)
            if lang not in LANGUAGES:
                raise SourceError(f"{where(i)}: unknown language {lang!r}")
            if group is None:
                group, group_line = {}, i
            if lang in group:
                raise SourceError(f"{where(i)}: second {lang} block in one prose cell (write one block per "
                                  "language; consecutive prose cells need a code cell between them)")
            try:
                end = lines.index(LANG_CLOSE, i + 1)
            except ValueError:
                raise SourceError(f"{where(i)}: unclosed {{lang}} block") from None
            text = "\n".join(lines[i + 1:end]).strip("\n")
            if not text.strip():
                raise SourceError(f"{where(i)}: empty {lang} block")
            for n, block_line in enumerate(lines[i + 1:end], start=i + 1):
                if BACKTICK_DIRECTIVE_WITH_CODE.match(block_line):
                    raise SourceError(f"{where(n)}: a backtick in the title of a ```{{directive}}: Markdown then "
                                      "shows it as text and what follows as code; write it :::{directive} … :::")
                if DROPDOWN_TITLE_WITH_LINK.match(block_line):
                    raise SourceError(f"{where(n)}: a link in a dropdown's title (a link inside its button); "
                                      "name the page in the title and put the link in the dropdown's text")
            group[lang] = text
            i = end + 1
            continue
        close_group()
        if CODE_OPEN.match(line):
            j = i + 1
            options: dict = {}
            while j < len(lines) and (m := OPTION.match(lines[j])):
                name, value = m.groups()
                if name not in CELL_OPTIONS:
                    raise SourceError(f"{where(j)}: unknown cell option :{name}: (known: "
                                      + ", ".join(f":{o}:" for o in CELL_OPTIONS) + ")")
                if name in options:
                    raise SourceError(f"{where(j)}: second :{name}: in one code cell")
                try:
                    options[name] = (yaml.safe_load(value) or []) if name == "tags" else localized_option(name, value)
                except SourceError as error:
                    raise SourceError(f"{where(j)}: {error}") from None
                j += 1
            try:
                end = lines.index(CODE_CLOSE, j)
            except ValueError:
                raise SourceError(f"{where(i)}: unclosed code cell") from None
            code = "\n".join(lines[j:end]).strip("\n")
            try:
                localize_code(code, "en")
            except SourceError as error:
                raise SourceError(f"{where(i)}: {error}") from None
            if unknown := unknown_message_keys(code):
                raise SourceError(f"{where(i)}: tr() of {', '.join(map(repr, unknown))}: no such key in "
                                  "attnlab/messages.toml")
            cells.append(Cell("code", code, options.get("tags", []), line=i + 1,
                              alt=options.get("alt"), caption=options.get("caption")))
            i = end + 1
            continue
        raise SourceError(f"{where(i)}: text outside a {{lang}} block or code cell: {line[:60]!r}")
    close_group()
    return Source(path, meta, cells)


def localized_option(name: str, value: str) -> dict[str, str]:
    """``en: … | de: … | zh: …`` -> ``{"en": …, "de": …, "zh": …}`` (all three, none empty)."""
    m = LOCALIZED_OPTION.match(value.strip())
    texts = {lang: m.group(lang).strip() for lang in LANGUAGES} if m else {}
    if not m or not all(texts.values()):
        present = [lang for lang in LANGUAGES if re.search(rf"(^|\|)\s*{lang}:\s*\S", value)]
        missing = [lang for lang in LANGUAGES if lang not in present] or ["the 'en: … | de: … | zh: …' form"]
        raise SourceError(f":{name}: lacks {', '.join(missing)}: write "
                          f"':{name}: en: … | de: … | zh: …' on one line")
    return texts


def find_sources(names: list[str] | None = None) -> list[Source]:
    paths = sorted(p for d in SOURCE_DIRS for p in (ROOT / d / "src").glob("*.md"))
    if names:
        wanted = {pathlib.Path(n).resolve() for n in names}
        paths = [p for p in paths if p.resolve() in wanted]
    return [parse_source(p) for p in paths]
