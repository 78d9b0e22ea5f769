"""A ``kind: page`` source as a plain Markdown page per language, with its list of chapters.

A page's code cells become ``python`` code blocks (shown, not executed); a ``{chapter-list}``
block becomes the numbered list of the chapters, from _toc.yml and each chapter's first heading.
"""

from __future__ import annotations

import pathlib
import re

import yaml

from .messages import render_code
from .source_format import ROOT, SourceError
from .sources import Source, parse_source

# The landing page's list of chapters comes from one place: _toc.yml gives the chapters
# and their order, each chapter's first heading (``# 4 · Title``) its number and title in
# every language. The source writes only what each chapter teaches:
#
#     ```{chapter-list}
#     01-causal-mask: why position $t$ may read only positions $0..t$, …
#     02-multi-head-attention: $D$, $H$ and $d$, …
#     ```
#
# and the page shows ``1. **The causal mask** – why position …``. A chapter of the toc
# without a line, a line for a chapter the toc lacks, or a number that is not the
# chapter's place in the toc is an error; a renamed chapter makes the page stale.
CHAPTER_LIST = re.compile(r"^```\{chapter-list\}\n(?P<body>.*?)\n```$", re.M | re.S)
CHAPTER_TITLE = re.compile(r"^# (?P<number>\d+) · (?P<title>.+)$")


def toc_chapters(root: pathlib.Path = ROOT) -> list[str]:
    """Slugs of the numbered chapters (``NN-slug``), in the order of _toc.yml."""
    toc = yaml.safe_load((root / "_toc.yml").read_text("utf-8"))
    files = [entry["file"] for part in toc["parts"] for entry in part.get("chapters", [])]
    return [f.rsplit("/", 1)[1] for f in files if f.startswith("chapters/en/") and re.match(r"\d\d-", f.rsplit("/", 1)[1])]


def chapter_title(slug: str, lang: str, root: pathlib.Path = ROOT) -> tuple[int, str]:
    """(number, title) of a chapter in ``lang``, from the first heading of its source."""
    source = parse_source(root / "chapters" / "src" / f"{slug}.md")
    first = next(cell for cell in source.cells if cell.kind == "markdown").text[lang].splitlines()[0]
    if not (m := CHAPTER_TITLE.match(first)):
        raise SourceError(f"{source.rel}: the {lang} block must start with '# N · Title', not {first[:60]!r}")
    return int(m.group("number")), m.group("title")


def chapter_list_separator(title: str, lang: str) -> str:
    """What comes between a chapter's bold title and what it teaches: a spaced dash in en and de,
    where a colon after a title that ends in a question mark would print "?**:"; in zh a full-width
    colon, or nothing after a full-width question mark, which already ends the title."""
    if lang == "zh":
        return "" if title.endswith(("？", "?")) else "："
    return " – "


def bold_title(title: str, lang: str) -> str:
    """A chapter title in bold. In zh a closing full-width question mark goes after the ``**``:
    CommonMark does not close ``**`` that follows punctuation and precedes a Chinese character
    (``**…吗？**针对`` would show its asterisks), so the list writes ``**…吗**？针对``."""
    if lang == "zh" and title.endswith("？"):
        return f"**{title[:-1]}**？"
    return f"**{title}**"


def chapter_list(body: str, lang: str, where: str, root: pathlib.Path = ROOT) -> str:
    """The numbered Markdown list of a ``{chapter-list}`` block in ``lang`` (see above)."""
    entries: dict[str, str] = {}
    for line in body.splitlines():
        slug, sep, text = line.partition(": ")
        if not sep or not text.strip():
            raise SourceError(f"{where}: {{chapter-list}} line {line[:60]!r} must be 'NN-slug: what it teaches'")
        if slug in entries:
            raise SourceError(f"{where}: {{chapter-list}} names {slug} twice ({lang})")
        entries[slug] = text.strip()
    chapters = toc_chapters(root)
    if missing := [slug for slug in chapters if slug not in entries]:
        raise SourceError(f"{where}: {{chapter-list}} ({lang}) lacks {', '.join(missing)}, which _toc.yml lists")
    if extra := [slug for slug in entries if slug not in chapters]:
        raise SourceError(f"{where}: {{chapter-list}} ({lang}) names {', '.join(extra)}, which _toc.yml does not list")
    lines = []
    for place, slug in enumerate(chapters, start=1):
        number, title = chapter_title(slug, lang, root)
        if number != place:
            raise SourceError(f"{where}: chapter {slug} is numbered {number} but is number {place} in _toc.yml")
        lines.append(f"{number}. {bold_title(title, lang)}{chapter_list_separator(title, lang)}{entries[slug]}")
    return "\n".join(lines)


def page_text(text: str, lang: str, where: str) -> str:
    """A page's Markdown in ``lang`` with its ``{chapter-list}`` written out."""
    return CHAPTER_LIST.sub(lambda m: chapter_list(m.group("body"), lang, where), text)


def render_page(source: Source, lang: str) -> str:
    """A plain Markdown page; its code cells become ``python`` code blocks (not executed)."""
    header = f"<!-- Generated from {source.rel} by python -m tools.notebooks: edit the source, not this file. -->\n\n"
    parts = [page_text(cell.text[lang], lang, f"{source.rel}:{cell.line}") if cell.kind == "markdown"
             else f"```python\n{render_code(cell.text, lang)}\n```"
             for cell in source.cells]
    return header + "\n\n".join(parts) + "\n"
